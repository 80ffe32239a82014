"""edl_common: the one duration grammar, the one Quantity grammar, the option tables' defaults."""

from __future__ import annotations

import subprocess
import sys
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from agent.elastic.membership import MembershipSettings
from agent.elastic.supervisor import ElasticSettings
from agent.process.cli import parse_args
from edl_common import errors
from edl_common.durations import format_duration, parse_duration
from edl_common.errors import ConfigError
from edl_common.options import field_default
from edl_common.quantity import QuantityError, format_quantity, milli_value, parse_quantity

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1m30s", 90.0),
        ("5m0s", 300.0),
        ("300ms", 0.3),
        ("1.5h", 5400.0),
        ("2h45m", 9900.0),
        ("1h2m3.5s", 3723.5),
        ("250us", 0.00025),
        ("250\u00b5s", 0.00025),
        ("100ns", 1e-7),
        (".5s", 0.5),
        ("90", 90.0),
        ("0.5", 0.5),
        (" 5s ", 5.0),
    ],
)
def test_durations_are_read_as_kubernetes_writes_them(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["soon", "", "1m30", "5 s", "1d", "-1s", "s", "nan", "inf", "1e"])
def test_anything_else_is_one_config_error(text: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_duration(text)
    assert "\n" not in str(info.value)


def test_zero_only_where_it_means_off() -> None:
    assert parse_duration("0s", allow_zero=True) == 0.0
    with pytest.raises(ConfigError, match="must be > 0"):
        parse_duration("0")


@given(st.integers(min_value=0, max_value=10**7), st.sampled_from([1, 1000]))
def test_a_formatted_duration_parses_back(whole: int, per_second: int) -> None:
    seconds = whole / per_second
    assert parse_duration(format_duration(seconds), allow_zero=True) == pytest.approx(seconds)


def test_the_go_form_of_common_durations() -> None:
    assert [format_duration(s) for s in (0, 0.3, 90, 300, 3600)] == [
        "0s",
        "300ms",
        "1m30s",
        "5m0s",
        "1h0m0s",
    ]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1E", Decimal(10) ** 18),
        ("1e3", Decimal(1000)),
        ("1E3", Decimal(1000)),
        ("850m", Decimal("0.85")),
        ("2Ki", Decimal(2048)),
        ("1Ei", Decimal(2) ** 60),
        ("1.5", Decimal("1.5")),
        ("-1", Decimal(-1)),
        ("5e-3", Decimal("0.005")),
        ("400u", Decimal("0.0004")),
    ],
)
def test_quantities_parse_exactly(text: str, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["1K", "2e", "1_000", "nan", "Infinity", "1ki", "", "m"])
def test_what_apimachinery_refuses_is_refused(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


@given(
    st.one_of(
        st.floats(allow_nan=False, allow_infinity=False, min_value=-1e18, max_value=1e18),
        st.integers(min_value=-(10**15), max_value=10**15).map(lambda n: n / 1000),
        st.integers(min_value=1, max_value=999).map(lambda n: n / 10**9),
    )
)
@example(2.4445)  # a half milli: rounds away from zero, like the formatter
@example(-2.4445)
def test_every_quantity_we_write_parses_back_equal(value: float) -> None:
    """What the adapter serves, the HPA (and our own model) reads back as the same number."""
    text = format_quantity(value)
    parsed = parse_quantity(text)
    assert format_quantity(float(parsed)) == text
    if abs(value) >= 1:  # served in milli-units, as the HPA reads them
        nearest = Decimal(repr(value)).quantize(Decimal("0.001"), rounding=ROUND_HALF_UP)
        assert milli_value(text) == milli_value(nearest)  # a half rounds away from zero
    else:  # nano precision below one
        assert abs(parsed - Decimal(repr(value))) <= Decimal("0.5e-9")


def test_one_config_error_for_every_package() -> None:
    import agent.errors
    import metrics_adapter.errors

    assert agent.errors.ConfigError is metrics_adapter.errors.ConfigError is errors.ConfigError


def test_no_flag_and_no_variable_give_the_dataclasses_defaults() -> None:
    """The parse wires each row to its field; the fields' defaults are the rows' (written once,
    in `agent.elastic.option_table`)."""
    argv = ["run", "--elastic", "--job", "j", "--membership", "kubernetes", "--", "x"]
    elastic = parse_args(argv, {})[0].elastic
    assert elastic is not None
    assert elastic.membership_settings == MembershipSettings()
    assert elastic.timeouts == ElasticSettings()


def test_the_simulators_tables_default_to_their_settings_fields() -> None:
    """edl-hpa's and edl-sim's rows take their defaults from the settings they fill."""
    from edl_sim.cluster.cli import parse_run_args, settings_from
    from edl_sim.cluster.engine import SimSettings
    from edl_sim.cluster.policy import PolicySettings
    from edl_sim.hpa import cli as hpa_cli
    from edl_sim.hpa.controller import ControllerSettings
    from edl_sim.hpa.tune import MAX_ROUNDS, Objective

    sim, policy = settings_from(
        parse_run_args(["--workload", "w", "--curves", "c", "--cluster", "n"])
    )
    assert (sim, policy) == (SimSettings(), PolicySettings())
    args = hpa_cli.parse(["tune", "hpa.yaml", "--trace", "t.csv"])
    assert hpa_cli._controller_settings(args) == ControllerSettings()
    assert (args.under_weight, args.over_weight, args.pause_weight) == (
        Objective().under_weight,
        Objective().over_weight,
        Objective().pause_weight,
    )
    assert args.max_rounds == MAX_ROUNDS


def test_field_default_reads_a_dataclass_field_or_says_there_is_none() -> None:
    assert field_default(ElasticSettings, "drain_timeout") == ElasticSettings().drain_timeout
    with pytest.raises(KeyError):
        field_default(ElasticSettings, "no_such_field")


@pytest.mark.slow
def test_the_docs_tables_are_generated_from_the_option_tables() -> None:
    r = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "options_docs.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr
