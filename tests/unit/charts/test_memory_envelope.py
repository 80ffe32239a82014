"""The adapter's memory limit: the chart's, the manifests', and the envelope docs/install.md gives.

The adapter reads its container's limit as its memory budget (admission stops strangers at
70 % of it), so the limit a user installs is the one the documented envelope was measured
against (issue 37: peak RSS under every flood at most 80 % of it).
"""

from __future__ import annotations

from typing import Any

import pytest

from edl_common.http.memory import ADMIT_RATIO
from edl_common.quantity import parse_quantity
from tests.support.helm import template
from tests.support.kustomize import ROOT, render

pytestmark = [pytest.mark.unit, pytest.mark.slow]


def _adapter_limit(docs: list[dict[str, Any]]) -> int:
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return int(parse_quantity(container["resources"]["limits"]["memory"]))


def test_the_chart_the_manifests_and_the_documented_envelope_agree() -> None:
    chart = _adapter_limit(template("edl"))
    manifests = _adapter_limit(render("manifests/base"))
    assert chart == manifests == 512 << 20
    install = (ROOT / "docs/install.md").read_text()
    assert "512 MiB limit" in install
    assert f"{round(ADMIT_RATIO * 100)} % of it ({int(chart * ADMIT_RATIO) >> 20} MiB)" in install
