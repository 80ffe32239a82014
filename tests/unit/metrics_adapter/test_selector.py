"""LabelSelector: the Kubernetes grammar, semantics and errors naming the bad token."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metrics_adapter.errors import InvalidSelectorError
from metrics_adapter.kube.selectors import LabelSelector, Operator

LABELS = {"app": "trainer", "tier": "gpu", "n": "5", "example.com/team": "ml"}

MATCHES = [
    ("", True),
    ("   ", True),
    ("app=trainer", True),
    ("app==trainer", True),
    ("app = trainer", True),
    ("app=other", False),
    ("app!=other", True),
    ("app!=trainer", False),
    ("missing!=x", True),
    ("app in (trainer, other)", True),
    ("app in (other)", False),
    ("app notin (other)", True),
    ("missing notin (x)", True),
    ("app notin (trainer)", False),
    ("app", True),
    ("missing", False),
    ("!missing", True),
    ("!app", False),
    ("n>4", True),
    ("n<4", False),
    ("app>4", False),
    ("missing<9", False),
    ("example.com/team=ml", True),
    ("app=trainer,tier=gpu", True),
    ("app=trainer,tier=cpu", False),
    ("app in (trainer),!missing,tier", True),
    ("missing=", False),
    ("app in (trainer,)", True),
]


@pytest.mark.parametrize(("text", "expected"), MATCHES)
def test_matches(text: str, expected: bool) -> None:
    assert LabelSelector.parse(text).matches(LABELS) is expected


ERRORS = [
    ("app=b=c", "'='"),
    ("(", "'('"),
    ("app in ()", None),  # kube-apiserver: the set of the empty value
    ("a>-1", "'-1'"),  # a label value too: no sign
    ("a>" + "9" * 19, "'" + "9" * 19 + "'"),  # past 64 bits
    ("app in (a", "end of string"),
    ("app in a", "'a'"),
    ("!app=x", "'='"),
    ("a b", "'b'"),
    ("a,", "end of string"),
    (",a", "','"),
    ("a=(b)", "'('"),
    ("a>b", "'b'"),
    ("-a=b", "'-a'"),
    ("a=-b", "'-b'"),
    ("Ab.io/x=y", "'Ab.io/x'"),
    ("/x=y", "'/x'"),
    ("a/=y", "'a/'"),
    ("x" * 64 + "=y", "x" * 64),
    ("a=" + "v" * 64, "v" * 64),
    ("a==", None),
    ("a!", "'!'"),
    ("a notin", "end of string"),
]


@pytest.mark.parametrize(("text", "token"), ERRORS)
def test_errors_name_the_bad_token(text: str, token: str | None) -> None:
    if token is None:
        assert LabelSelector.parse(text).requirements[0].values == ("",)
        return
    with pytest.raises(InvalidSelectorError) as info:
        LabelSelector.parse(text)
    assert token in str(info.value)
    assert info.value.code == 400


def test_operators_and_round_trip() -> None:
    sel = LabelSelector.parse("a=1, b!=2, c in (x,y), d notin (z), e, !f, g>3, h<4")
    ops = [r.operator for r in sel.requirements]
    assert ops == [
        Operator.EQUALS,
        Operator.NOT_EQUALS,
        Operator.IN,
        Operator.NOT_IN,
        Operator.EXISTS,
        Operator.DOES_NOT_EXIST,
        Operator.GREATER_THAN,
        Operator.LESS_THAN,
    ]
    assert LabelSelector.parse(str(sel)) == sel
    assert sel.equality_labels() == {"a": "1"}


_name = st.from_regex(r"\A[a-z0-9]([a-z0-9._-]{0,10}[a-z0-9])?\Z")
_labels = st.dictionaries(_name, _name, max_size=5)


@st.composite
def requirement_text(draw: st.DrawFn) -> str:
    key = draw(_name)
    kind = draw(st.sampled_from(["=", "==", "!=", "in", "notin", "exists", "!"]))
    if kind in ("in", "notin"):
        values = draw(st.lists(_name, min_size=1, max_size=3))
        return f"{key} {kind} ({','.join(values)})"
    if kind == "exists":
        return key
    if kind == "!":
        return f"!{key}"
    return f"{key}{kind}{draw(_name)}"


@pytest.mark.slow
@settings(max_examples=300)
@given(st.lists(requirement_text(), min_size=1, max_size=4), _labels)
def test_valid_selectors_parse_and_round_trip(parts: list[str], labels: dict[str, str]) -> None:
    sel = LabelSelector.parse(",".join(parts))
    assert len(sel.requirements) == len(parts)
    again = LabelSelector.parse(str(sel))
    assert again == sel
    assert again.matches(labels) == sel.matches(labels)
    assert sel.matches(labels) == all(LabelSelector.parse(p).matches(labels) for p in parts)


@settings(max_examples=500)
@given(st.text(alphabet=st.sampled_from(list("ab=!,() in notin<>-./_x9 \t")), max_size=30))
def test_fuzz_never_raises_anything_but_invalid_selector(text: str) -> None:
    try:
        LabelSelector.parse(text)
    except InvalidSelectorError as e:
        assert "position" in str(e) or "invalid label" in str(e)


@settings(max_examples=300)
@given(st.text(max_size=40))
def test_fuzz_arbitrary_unicode(text: str) -> None:
    try:
        LabelSelector.parse(text)
    except InvalidSelectorError:
        pass


@pytest.mark.parametrize(
    ("text", "same_as"),
    [
        ("in", "in"),  # `in` and `notin` are keys where a key is expected
        ("notin=in", "notin=in"),
        ("in in (in)", "in in (in)"),
        ("app in ()", "app in ()"),  # the set of the empty value: app=""
        ("app in (,a)", "app in (,a)"),
        ("app=a\x00,b=c", "app=a,b=c"),  # a NUL after a word ends the word and is dropped
        ("app=\x00a", "app=a"),  # ... after a symbol too
        ("app= \x00a", "app="),  # where a token would start, it ends the selector
        ("\x00app=a", ""),
    ],
)
def test_what_kube_apiserver_accepts_we_read_as_it_does(text: str, same_as: str) -> None:
    """Seen against the real apiserver (tests/e2e/metrics_adapter/test_selector_grammar.py)."""
    assert LabelSelector.parse(text) == LabelSelector.parse(same_as)
    assert LabelSelector.parse("app in ()").matches({"app": ""})
    assert not LabelSelector.parse("app in ()").matches({"app": "a"})
