"""Collecting the fast unit layer imports neither torch nor Paddle.

`tests.support.fast_units` fails a fast test that imports a framework while it *runs*; a test
module that imports one at its top (``pytest.importorskip("torch")``) would load it while the
layer is *collected*, before any test is deselected: seconds for every developer's loop.
Framework tests import inside (a fixture) or ask `tests.support.frameworks.needs`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # collects the whole unit layer in a fresh interpreter

ROOT = Path(__file__).resolve().parents[3]

COLLECT = """
import json, sys
import pytest
code = pytest.main(["tests/unit", "-m", "unit and not slow", "--collect-only", "-q",
                    "-p", "no:cacheprovider"])
print(json.dumps({"code": int(code), "frameworks": [m for m in ("torch", "paddle")
                                                    if m in sys.modules]}))
"""


def test_collecting_the_fast_unit_layer_imports_no_framework() -> None:
    done = subprocess.run(
        [sys.executable, "-c", COLLECT],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"code": 0, "frameworks": []}, done.stdout[-3000:] + done.stderr[-3000:]
