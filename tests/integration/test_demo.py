"""`make demo` (the main job) runs end to end: agents train, the adapter serves, the HPA decides."""

from __future__ import annotations

import re
import subprocess
import sys

from examples.demo import REPO_ROOT


def test_demo_trains_serves_and_previews_the_hpa() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "examples.demo", "--epochs", "120", "--timeout", "150"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    out = result.stdout
    assert result.returncode == 0, out[-4000:] + result.stderr[-4000:]
    accuracies = [float(a) for a in re.findall(r"final test accuracy ([0-9.]+)", out)]
    assert len(accuracies) == 2 and min(accuracies) > 0.9, out[-2000:]
    served = re.findall(
        r"the HPA reads samples_per_second per pod: digits-trainer-rank0 (\d+), "
        r"digits-trainer-rank1 (\d+)",
        out,
    )
    assert served, out[-4000:]
    assert all(int(a) > 0 and int(b) > 0 for a, b in served)
    assert re.search(r"the metric asks for \d+ replicas; it would set \d+ \(now 2\)", out)
