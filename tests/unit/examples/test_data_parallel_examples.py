"""The data-parallel examples: the elastic script is the plain one with at most six lines changed.

`diff examples/train_digits_ddp.py examples/train_digits_ddp_elastic.py` (and Paddle's pair)
may take out at most 6 lines of the plain script and put in at most 6; the training loop's
body is not among them; docs/agent.md shows the same diff.
"""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PAIRS = {
    "torch": ("examples/train_digits_ddp.py", "examples/train_digits_ddp_elastic.py"),
    "paddle": ("examples/train_digits_paddle_dp.py", "examples/train_digits_paddle_dp_elastic.py"),
}
MAX_CHANGED = 6


def diff(plain: str, elastic: str) -> tuple[list[str], list[str]]:
    """The lines `diff` takes out of `plain` and puts into `elastic`."""
    a = (ROOT / plain).read_text().splitlines()
    b = (ROOT / elastic).read_text().splitlines()
    out, into = [], []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag != "equal":
            out += a[i1:i2]
            into += b[j1:j2]
    return out, into


@pytest.mark.parametrize("framework", list(PAIRS))
def test_the_elastic_script_changes_at_most_six_lines(framework: str) -> None:
    out, into = diff(*PAIRS[framework])
    assert 0 < len(out) <= MAX_CHANGED, out
    assert 0 < len(into) <= MAX_CHANGED, into
    assert not any("backward" in line or "optimizer.step" in line for line in out + into)
    assert any("ElasticTrainer.start()" in line for line in into)


@pytest.mark.parametrize("framework", list(PAIRS))
def test_docs_show_the_diff_as_it_is(framework: str) -> None:
    page = (ROOT / "docs" / "agent.md").read_text()
    out, into = diff(*PAIRS[framework])
    for line in out:
        assert f"-{line}" in page, line
    for line in into:
        assert f"+{line}" in page, line
