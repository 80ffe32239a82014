"""The policies drive the project's own HPA model and sizer, and the cluster behaves like one."""

from __future__ import annotations

import io
import itertools
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

import edl_sim.cluster.policies.edl as edl_module
import edl_sizing as sizing
import edl_sizing.sizing_round as round_module
from edl_sim.cluster import load_workload
from edl_sim.cluster.cli import compare, main, parse_run_args, settings_from
from edl_sim.cluster.jobs import JobRun
from edl_sim.cluster.policies.hpa_loop import read_manifest
from edl_sim.cluster.sim_cluster import SimCluster, SimNode, deletion_order
from edl_sim.hpa import load_hpa
from edl_sizing import Resources
from tests.unit.edl_sim.cluster.helpers import inputs

REPO = Path(__file__).resolve().parents[4]
LINEAR_16 = [("lin", n, 10.0 * n) for n in (1, 2, 4, 8, 16)]


def _json(args: list[str]) -> dict[str, Any]:
    out, err = io.StringIO(), io.StringIO()
    assert main(["run", *args, "--json", "--quiet"], out, err) == 0, err.getvalue()
    result: dict[str, Any] = json.loads(out.getvalue())
    return result


def test_the_packaged_throughput_hpa_is_the_example() -> None:
    example = load_hpa(REPO / "manifests/examples/digits-trainer/hpa-throughput.yaml")
    assert read_manifest(None, "hpa-throughput.yaml").spec == example.spec


def with_component(manifest: Path, component: Path, out: Path) -> Path:
    """``manifest`` with the JSON patch of a kustomize Component applied (its `add` ops)."""
    doc = yaml.safe_load(manifest.read_text())
    (patch,) = yaml.safe_load(component.read_text())["patches"]
    for op in yaml.safe_load(patch["patch"]):
        assert op["op"] == "add"
        *parents, leaf = op["path"].strip("/").split("/")
        node = doc
        for key in parents:
            node = node[key]
        node[leaf] = op["value"]
    out.write_text(yaml.safe_dump(doc))
    return out


def test_the_packaged_sizing_hpa_is_the_example_on_1_35(tmp_path: Path) -> None:
    """The simulator's HPA is the example as a 1.35 cluster runs it: with hpa-tolerance/."""
    example_dir = REPO / "manifests/examples/digits-trainer"
    example = load_hpa(
        with_component(
            example_dir / "hpa-sizing.yaml",
            example_dir / "hpa-tolerance" / "kustomization.yaml",
            tmp_path / "hpa.yaml",
        )
    )
    spec = read_manifest(None, "hpa-sizing.yaml").spec
    assert spec == example.spec
    assert spec != load_hpa(example_dir / "hpa-sizing.yaml").spec  # the component's part
    (metric,) = spec.metrics
    assert metric.metric_name == "desired_replicas"
    assert metric.source.target.average_value_milli == 1000


def test_edl_growth_of_ten_percent_needs_the_per_hpa_tolerance(tmp_path: Path) -> None:
    """One 11-CPU node, a job at 10 of max 16: the sizer wants 11, 10% above 10.

    With HPAConfigurableTolerance the example HPA's tolerance 0 lets 11 through; without it
    the controller's 10% tolerance keeps the job at 10 for its whole life.
    """
    job = ("a", 0, 1, 16, 10, 1, "1Gi", 0, 200_000, "lin", 0)
    args = inputs(tmp_path, [job], nodes=[("n", 1, 11, "32Gi", 0)], curves=LINEAR_16)
    gated = _json([*args, "--policy", "edl"])
    older = _json([*args, "--policy", "edl", "--no-configurable-tolerance"])
    assert gated["rescales"] == 1
    assert gated["utilisation_mean"] > 10.5 / 11
    assert older["rescales"] == 0
    assert older["utilisation_mean"] < 10 / 11
    assert older["jct_mean_s"] > gated["jct_mean_s"] * 1.05


def test_edl_calls_the_real_decide_once_per_sizing_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert vars(edl_module)["run_round"] is round_module.run_round
    assert vars(round_module)["decide"] is sizing.decide
    calls: list[float] = []

    def counting(*args: Any, **kwargs: Any) -> sizing.Plan:
        calls.append(args[4])
        return sizing.decide(*args, **kwargs)

    monkeypatch.setattr(round_module, "decide", counting)
    job = ("a", 0, 1, 8, 2, 1, "1Gi", 0, 30_000, "lin", 0)
    args = inputs(tmp_path, [job], nodes=[("n", 2, 4, "8Gi", 0)], curves=LINEAR_16)
    result = _json([*args, "--policy", "edl", "--sizing-interval", "7"])
    assert calls, "the sizer never ran"
    assert all(b - a >= 7 - 1e-9 for a, b in itertools.pairwise(calls))
    assert len(calls) <= result["makespan_s"] / 7 + 1


def test_edl_sim_sizer_options_reach_decide(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    policies: list[sizing.SizingPolicy] = []

    def recording(*args: Any, **kwargs: Any) -> sizing.Plan:
        policies.append(args[3])
        return sizing.decide(*args, **kwargs)

    monkeypatch.setattr(round_module, "decide", recording)
    job = ("a", 0, 1, 8, 2, 1, "1Gi", 0, 30_000, "lin", 0)
    args = inputs(tmp_path, [job], nodes=[("n", 2, 4, "8Gi", 0)], curves=LINEAR_16)
    _json([*args, "--policy", "edl", "--rescale-margin", "1.5", "--prior-kappa", "0.001"])
    assert policies, "the sizer never ran"
    assert {(p.rescale_margin, p.prior.kappa) for p in policies} == {(1.5, 0.001)}
    assert sizing.SizingPolicy().rescale_margin != 1.5  # the option, not the default


def test_protected_pods_get_their_room(tmp_path: Path) -> None:
    """A priority-100 service of 3 one-CPU pods arrives at 200 s on a 4-CPU node a job fills.

    The sizer shrinks the job (protected demand) and the HPA applies it within a sizing
    round and an HPA sync; the plain throughput HPA never does, so the service waits until
    the job is done; with preemption the scheduler takes the room at once.
    """
    job = ("a", 0, 1, 4, 4, 1, "1Gi", 0, 40_000, "lin", 0)
    service = [(200, 3, 1, "1Gi", 0, 100)]
    args = inputs(tmp_path, [job], curves=LINEAR_16, background=service)
    edl = _json([*args, "--policy", "edl"])
    assert edl["protected_pods"] == 3
    assert edl["protected_pending_max_s"] <= 10 + 15
    plain = _json([*args, "--policy", "hpa-throughput", "--target-efficiency", "0.5"])
    assert plain["protected_pending_max_s"] > 100
    preempting = _json([*args, "--policy", "hpa-throughput", "--preemption"])
    assert preempting["protected_pending_max_s"] == 0
    assert preempting["workers_preempted"] == 3


def _cluster(placement: str) -> SimCluster[JobRun]:
    nodes = [SimNode(f"n{i}", Resources(cpu=4, memory=8 * 2**30)) for i in range(3)]
    return SimCluster(nodes, placement)


@pytest.mark.parametrize(
    ("placement", "nodes"), [("spread", ["n0", "n1", "n2"]), ("pack", ["n0"] * 3)]
)
def test_placement(placement: str, nodes: list[str]) -> None:
    cluster = _cluster(placement)
    for i in range(3):
        cluster.create_pod(f"p{i}", Resources(cpu=1), 0, 0.0)
    bound, evicted = cluster.schedule(0.0)
    assert [p.node.name for p in bound if p.node is not None] == nodes
    assert evicted == []


def test_scheduler_serves_priority_first_and_scale_down_removes_unbound_then_newest() -> None:
    cluster = _cluster("pack")
    low = [cluster.create_pod(f"low{i}", Resources(cpu=4), 0, 0.0) for i in range(3)]
    high = cluster.create_pod("high", Resources(cpu=4), 10, 1.0)
    bound, _ = cluster.schedule(1.0)
    assert high in bound
    assert [p.name for p in bound] == ["high", "low0", "low1"]
    cluster.mark_running(low[0])
    assert [p.name for p in deletion_order(low)] == ["low2", "low1", "low0"]


CASE1_CURVE = [
    ("c", n, x)
    for n, x in ((1, 104), (2, 200), (4, 398), (8, 759), (16, 1346), (32, 2184), (60, 3046))
]
"""Case 1's class curve: straight lines between the sizes (0.7 of a worker per worker from 8 to
16, 0.5 from 16 to 32, 0.3 beyond)."""


def _world_at(worlds: tuple[tuple[float, int], ...], t: float) -> int:
    return [n for when, n in worlds if when <= t][-1]


def test_edl_late_arrivals_are_not_held_small_beside_the_first_job(tmp_path: Path) -> None:
    """Four jobs asking for 48 workers arrive 10 s apart on 48 CPUs (1-CPU workers).

    The first runs 48 and gives the late ones room. A worker is valued by the share it
    speeds its job up, so once the late jobs are past their hold-off they take the first
    job's workers: at 200 s each runs at least a third of what the first runs. (Valued by
    samples alone, 0.5 of a worker at the first job against 0.7 at a late one is under the
    rescale margin: the first kept 30 while the late ones ran 6 for six minutes.)
    """
    jobs = [
        (name, 10 * i, 2, 60, 48, 1, "1Gi", 0, 900_000, "c", 0) for i, name in enumerate("abcd")
    ]
    args = inputs(tmp_path, jobs, nodes=[("n", 12, 4, "16Gi", 0)], curves=CASE1_CURVE)
    options = parse_run_args([*args, "--policy", "edl"])
    workload = load_workload(options.workload, options.curves, options.cluster)
    sim, policy = settings_from(options)
    (result,) = compare(workload, ["edl"], sim, policy)
    at = {j.name: _world_at(j.worlds, 200.0) for j in result.jobs}
    assert min(at["b"], at["c"], at["d"]) * 3 >= at["a"], at
    assert all(j.finished is not None for j in result.jobs)


def test_edl_a_job_shrunk_for_a_service_grows_back_to_its_request_over_budget(
    tmp_path: Path,
) -> None:
    """A job asking for 8 of 8 CPUs; a priority-1000 service takes 1, 2, ... 7 of them.

    Each step shrinks the job (7 rescales, past a budget of 4 per hour). When the service
    leaves at 800 s the job grows back to its request: the shrinks were not its choice.
    (Before, the budget held it at 1 worker beside 7 free CPUs until the hour rolled on.)
    """
    job = ("a", 0, 1, 8, 8, 1, "1Gi", 0, 400_000, "lin", 0)
    service = [(100 * i, i, 1, "1Gi", 0, 1000) for i in range(1, 8)] + [(800, 0, 1, "1Gi", 0, 1000)]
    args = inputs(
        tmp_path, [job], nodes=[("n", 1, 8, "16Gi", 0)], curves=LINEAR_16, background=service
    )
    options = parse_run_args([*args, "--policy", "edl", "--rescale-budget", "4"])
    workload = load_workload(options.workload, options.curves, options.cluster, options.background)
    sim, policy = settings_from(options)
    (result,) = compare(workload, ["edl"], sim, policy)
    (a,) = result.jobs
    assert _world_at(a.worlds, 790.0) == 1, a.worlds
    assert _world_at(a.worlds, 950.0) == 8, a.worlds
