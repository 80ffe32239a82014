"""Manifest parsing, validation messages and v2 defaulting."""

from __future__ import annotations

import copy
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from edl_common.quantity import format_milli, milli_value, parse_quantity
from edl_sim.hpa.errors import ManifestError, QuantityError
from edl_sim.hpa.manifest import load_hpa, manifest_with_behavior, parse_hpa
from edl_sim.hpa.spec import (
    DEFAULT_SCALE_DOWN,
    DEFAULT_SCALE_UP,
    Behavior,
    MetricSourceType,
    PolicyType,
    ScalingPolicy,
    SelectPolicy,
)

EXAMPLE = Path(__file__).resolve().parents[4] / "examples" / "hpa" / "hpa.yaml"

BASE: dict[str, Any] = {
    "apiVersion": "autoscaling/v2",
    "kind": "HorizontalPodAutoscaler",
    "metadata": {"name": "t", "namespace": "ns"},
    "spec": {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "t"},
        "minReplicas": 2,
        "maxReplicas": 8,
        "metrics": [
            {
                "type": "Pods",
                "pods": {
                    "metric": {"name": "m"},
                    "target": {"type": "AverageValue", "averageValue": "850m"},
                },
            }
        ],
    },
}


def doc(**spec_changes: Any) -> dict[str, Any]:
    d = copy.deepcopy(BASE)
    d["spec"].update(spec_changes)
    return d


def test_example_manifest_parses() -> None:
    hpa = load_hpa(EXAMPLE)
    assert (hpa.name, hpa.namespace, hpa.spec.max_replicas) == ("resnet-trainer", "training", 16)
    assert hpa.spec.metrics[0].type is MetricSourceType.PODS
    assert hpa.spec.metrics[0].source.target.average_value_milli == 700
    assert hpa.spec.behavior is None


def test_quantities_are_milli_values() -> None:
    assert milli_value("850m") == 850
    assert milli_value("1.5") == 1500
    assert milli_value("2k") == 2_000_000
    assert milli_value("1Ki") == 1_024_000
    assert milli_value("1e-4") == 1  # MilliValue rounds up
    assert milli_value(Decimal("0.0001")) == 1
    assert parse_quantity("5e2") == 500
    assert format_milli(1500) == "1500m" and format_milli(2000) == "2"
    with pytest.raises(QuantityError):
        parse_quantity("12 apples")


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"apiVersion": "autoscaling/v1"}, "apiVersion"),
        ({"kind": "Deployment"}, "kind"),
    ],
)
def test_wrong_api_version_or_kind(change: dict[str, Any], field: str) -> None:
    d = copy.deepcopy(BASE)
    d.update(change)
    with pytest.raises(ManifestError) as info:
        parse_hpa(d)
    assert info.value.field == field


@pytest.mark.parametrize(
    ("spec_changes", "field"),
    [
        ({"maxReplicas": 0}, "spec.maxReplicas"),
        ({"minReplicas": 9}, "spec.maxReplicas"),
        ({"minReplicas": "two"}, "spec.minReplicas"),
        ({"replicas": 3}, "spec.replicas"),
        ({"metrics": [{"type": "Pods"}]}, "spec.metrics[0].pods"),
        ({"metrics": [{"type": "Bogus"}]}, "spec.metrics[0].type"),
        (
            {
                "metrics": [
                    {
                        "type": "Pods",
                        "pods": {
                            "metric": {"name": "m"},
                            "target": {"type": "Value", "value": "1"},
                        },
                    }
                ]
            },
            "spec.metrics[0].pods.target.type",
        ),
        (
            {
                "metrics": [
                    {
                        "type": "Pods",
                        "pods": {
                            "metric": {"name": "m"},
                            "target": {"type": "AverageValue", "averageValue": "x"},
                        },
                    }
                ]
            },
            "spec.metrics[0].pods.target.averageValue",
        ),
        (
            {"behavior": {"scaleDown": {"stabilisationWindowSeconds": 60}}},
            "spec.behavior.scaleDown.stabilisationWindowSeconds",
        ),
        (
            {"behavior": {"scaleUp": {"stabilizationWindowSeconds": 4000}}},
            "spec.behavior.scaleUp.stabilizationWindowSeconds",
        ),
        ({"behavior": {"scaleUp": {"policies": []}}}, "spec.behavior.scaleUp.policies"),
        (
            {
                "behavior": {
                    "scaleUp": {"policies": [{"type": "Pods", "value": 1, "periodSeconds": 1801}]}
                }
            },
            "spec.behavior.scaleUp.policies[0].periodSeconds",
        ),
        (
            {
                "behavior": {
                    "scaleUp": {"policies": [{"type": "Replicas", "value": 1, "periodSeconds": 15}]}
                }
            },
            "spec.behavior.scaleUp.policies[0].type",
        ),
        (
            {"behavior": {"scaleDown": {"selectPolicy": "Fastest"}}},
            "spec.behavior.scaleDown.selectPolicy",
        ),
        ({"behavior": {"scaleDown": {"tolerance": "-1"}}}, "spec.behavior.scaleDown.tolerance"),
    ],
)
def test_errors_name_the_field(spec_changes: dict[str, Any], field: str) -> None:
    with pytest.raises(ManifestError) as info:
        parse_hpa(doc(**spec_changes))
    assert info.value.field == field
    assert str(info.value).startswith(field + ": ")
    assert "\n" not in str(info.value)


def test_no_behavior_stays_legacy_after_defaulting() -> None:
    spec = parse_hpa(doc()).spec.defaulted()
    assert spec.behavior is None


def test_empty_behavior_gets_all_defaults() -> None:
    spec = parse_hpa(doc(behavior={})).spec.defaulted()
    assert spec.behavior is not None
    assert spec.behavior.scale_up == DEFAULT_SCALE_UP
    assert spec.behavior.scale_down == DEFAULT_SCALE_DOWN
    assert spec.behavior.scale_down.stabilization_window_seconds is None  # filled by the controller


def test_defaulting_is_field_by_field() -> None:
    behavior = {
        "scaleUp": {"selectPolicy": "Min"},
        "scaleDown": {
            "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}],
            "tolerance": 0.05,
        },
    }
    spec = parse_hpa(doc(behavior=behavior)).spec.defaulted()
    assert spec.behavior is not None and spec.behavior.scale_up is not None
    assert spec.behavior.scale_up.select_policy is SelectPolicy.MIN
    assert spec.behavior.scale_up.policies == DEFAULT_SCALE_UP.policies
    assert spec.behavior.scale_up.stabilization_window_seconds == 0
    down = spec.behavior.scale_down
    assert down is not None
    assert down.policies == (ScalingPolicy(PolicyType.PODS, 1, 60),)  # replaces the default list
    assert down.select_policy is SelectPolicy.MAX
    assert down.tolerance == Decimal("0.05")


def test_default_metric_is_cpu_80_percent() -> None:
    spec = parse_hpa(doc(metrics=[])).spec.defaulted()
    assert spec.metrics[0].type is MetricSourceType.RESOURCE
    assert spec.metrics[0].source.target.average_utilization == 80


def test_manifest_with_behavior_keeps_the_rest() -> None:
    hpa = parse_hpa(doc())
    behavior = Behavior(scale_up=DEFAULT_SCALE_UP, scale_down=DEFAULT_SCALE_DOWN)
    reparsed = parse_hpa(yaml.safe_load(manifest_with_behavior(hpa, behavior)))
    assert reparsed.spec.metrics == hpa.spec.metrics
    assert reparsed.spec.behavior == behavior
    assert hpa.spec.behavior is None  # the original is not modified


def test_bad_yaml_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("spec: [unclosed\n")
    with pytest.raises(ManifestError, match="bad YAML at line"):
        load_hpa(path)
