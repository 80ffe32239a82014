"""Read an `autoscaling/v2` HPA manifest into typed dataclasses, validating like the API server.

Every problem is reported as one `ManifestError` naming the field path, e.g.
`spec.behavior.scaleDown.policies[0].periodSeconds: must be between 1 and 1800`.
Unknown fields are rejected (kubectl's default strict field validation) so a typo such as
`stabilisationWindowSeconds` is caught instead of silently falling back to a default.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml

from edl_common.quantity import milli_value, parse_quantity
from edl_sim.hpa.errors import ManifestError, QuantityError
from edl_sim.hpa.spec import (
    Behavior,
    CrossVersionObjectReference,
    ExternalMetricSource,
    HorizontalPodAutoscaler,
    HorizontalPodAutoscalerSpec,
    MetricIdentifier,
    MetricSourceType,
    MetricSpec,
    MetricTarget,
    MetricTargetType,
    ObjectMetricSource,
    PodsMetricSource,
    PolicyType,
    ResourceMetricSource,
    ScalingPolicy,
    ScalingRules,
    SelectPolicy,
)

API_VERSION = "autoscaling/v2"
KIND = "HorizontalPodAutoscaler"
MAX_WINDOW_SECONDS = 3600
MAX_PERIOD_SECONDS = 1800


def _mapping(value: object, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ManifestError(path, f"must be a mapping, got {type(value).__name__}")
    return value


def _only(fields: Mapping[str, Any], allowed: Sequence[str], path: str) -> None:
    for key in fields:
        if key not in allowed:
            raise ManifestError(f"{path}.{key}" if path else str(key), "unknown field")


def _required(fields: Mapping[str, Any], key: str, path: str) -> object:
    if key not in fields or fields[key] is None:
        raise ManifestError(f"{path}.{key}", "required field is missing")
    return fields[key]


def _string(value: object, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise ManifestError(path, "must be a non-empty string")
    return value


def _integer(value: object, path: str, low: int | None = None, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ManifestError(path, f"must be an integer, got {value!r}")
    if low is not None and value < low:
        raise ManifestError(path, f"must be greater than or equal to {low}, got {value}")
    if high is not None and value > high:
        raise ManifestError(path, f"must be less than or equal to {high}, got {value}")
    return value


def _quantity_milli(value: object, path: str) -> int:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ManifestError(path, f"must be a quantity such as 850m or 2, got {value!r}")
    try:
        milli = milli_value(value)
    except QuantityError as e:
        raise ManifestError(path, str(e)) from e
    if milli <= 0:
        raise ManifestError(path, f"must be positive, got {value!r}")
    return milli


def _reference(value: object, path: str) -> CrossVersionObjectReference:
    fields = _mapping(value, path)
    _only(fields, ("kind", "name", "apiVersion"), path)
    api_version = fields.get("apiVersion", "")
    if not isinstance(api_version, str):
        raise ManifestError(f"{path}.apiVersion", "must be a string")
    return CrossVersionObjectReference(
        kind=_string(_required(fields, "kind", path), f"{path}.kind"),
        name=_string(_required(fields, "name", path), f"{path}.name"),
        api_version=api_version,
    )


def _identifier(value: object, path: str) -> MetricIdentifier:
    fields = _mapping(value, path)
    _only(fields, ("name", "selector"), path)
    selector = fields.get("selector")
    if selector is not None:
        selector = dict(_mapping(selector, f"{path}.selector"))
    return MetricIdentifier(_string(_required(fields, "name", path), f"{path}.name"), selector)


def _target(value: object, path: str, allowed: Sequence[MetricTargetType]) -> MetricTarget:
    fields = _mapping(value, path)
    _only(fields, ("type", "value", "averageValue", "averageUtilization"), path)
    raw_type = _required(fields, "type", path)
    try:
        target_type = MetricTargetType(str(raw_type))
    except ValueError as e:
        raise ManifestError(f"{path}.type", f"unsupported value {raw_type!r}") from e
    if target_type not in allowed:
        names = ", ".join(t.value for t in allowed)
        raise ManifestError(f"{path}.type", f"must be one of {names} for this metric source")
    if target_type is MetricTargetType.VALUE:
        milli = _quantity_milli(_required(fields, "value", path), f"{path}.value")
        return MetricTarget(target_type, value_milli=milli)
    if target_type is MetricTargetType.AVERAGE_VALUE:
        milli = _quantity_milli(_required(fields, "averageValue", path), f"{path}.averageValue")
        return MetricTarget(target_type, average_value_milli=milli)
    utilization = _integer(
        _required(fields, "averageUtilization", path), f"{path}.averageUtilization", low=1
    )
    return MetricTarget(target_type, average_utilization=utilization)


_VALUE_TARGETS = (MetricTargetType.VALUE, MetricTargetType.AVERAGE_VALUE)
_RESOURCE_TARGETS = (MetricTargetType.UTILIZATION, MetricTargetType.AVERAGE_VALUE)


def _metric(value: object, path: str) -> MetricSpec:
    fields = _mapping(value, path)
    raw_type = _required(fields, "type", path)
    try:
        source_type = MetricSourceType(str(raw_type))
    except ValueError as e:
        raise ManifestError(f"{path}.type", f"unsupported metric source type {raw_type!r}") from e
    member = {
        MetricSourceType.OBJECT: "object",
        MetricSourceType.PODS: "pods",
        MetricSourceType.RESOURCE: "resource",
        MetricSourceType.CONTAINER_RESOURCE: "containerResource",
        MetricSourceType.EXTERNAL: "external",
    }[source_type]
    _only(fields, ("type", member), path)
    here = f"{path}.{member}"
    body = _mapping(_required(fields, member, path), here)
    if source_type is MetricSourceType.OBJECT:
        _only(body, ("describedObject", "metric", "target"), here)
        return MetricSpec(
            source_type,
            ObjectMetricSource(
                _reference(_required(body, "describedObject", here), f"{here}.describedObject"),
                _identifier(_required(body, "metric", here), f"{here}.metric"),
                _target(_required(body, "target", here), f"{here}.target", _VALUE_TARGETS),
            ),
        )
    if source_type is MetricSourceType.PODS:
        _only(body, ("metric", "target"), here)
        return MetricSpec(
            source_type,
            PodsMetricSource(
                _identifier(_required(body, "metric", here), f"{here}.metric"),
                _target(
                    _required(body, "target", here),
                    f"{here}.target",
                    (MetricTargetType.AVERAGE_VALUE,),
                ),
            ),
        )
    if source_type is MetricSourceType.EXTERNAL:
        _only(body, ("metric", "target"), here)
        return MetricSpec(
            source_type,
            ExternalMetricSource(
                _identifier(_required(body, "metric", here), f"{here}.metric"),
                _target(_required(body, "target", here), f"{here}.target", _VALUE_TARGETS),
            ),
        )
    is_container = source_type is MetricSourceType.CONTAINER_RESOURCE
    _only(body, ("name", "target", "container") if is_container else ("name", "target"), here)
    container = (
        _string(_required(body, "container", here), f"{here}.container") if is_container else ""
    )
    return MetricSpec(
        source_type,
        ResourceMetricSource(
            _string(_required(body, "name", here), f"{here}.name"),
            _target(_required(body, "target", here), f"{here}.target", _RESOURCE_TARGETS),
            container,
        ),
    )


def _policy(value: object, path: str) -> ScalingPolicy:
    fields = _mapping(value, path)
    _only(fields, ("type", "value", "periodSeconds"), path)
    raw_type = _required(fields, "type", path)
    try:
        policy_type = PolicyType(str(raw_type))
    except ValueError as e:
        raise ManifestError(f"{path}.type", f"must be Pods or Percent, got {raw_type!r}") from e
    return ScalingPolicy(
        policy_type,
        _integer(_required(fields, "value", path), f"{path}.value", low=1),
        _integer(
            _required(fields, "periodSeconds", path),
            f"{path}.periodSeconds",
            low=1,
            high=MAX_PERIOD_SECONDS,
        ),
    )


def _rules(value: object, path: str) -> ScalingRules:
    fields = _mapping(value, path)
    _only(fields, ("stabilizationWindowSeconds", "selectPolicy", "policies", "tolerance"), path)
    window = fields.get("stabilizationWindowSeconds")
    if window is not None:
        window = _integer(window, f"{path}.stabilizationWindowSeconds", 0, MAX_WINDOW_SECONDS)
    select = fields.get("selectPolicy")
    select_policy: SelectPolicy | None = None
    if select is not None:
        try:
            select_policy = SelectPolicy(select)
        except ValueError as e:
            raise ManifestError(
                f"{path}.selectPolicy", f"must be Max, Min or Disabled, got {select!r}"
            ) from e
    policies: tuple[ScalingPolicy, ...] | None = None
    if "policies" in fields and fields["policies"] is not None:
        raw = fields["policies"]
        if not isinstance(raw, list):
            raise ManifestError(f"{path}.policies", "must be a list")
        if not raw:
            raise ManifestError(f"{path}.policies", "must specify at least one Policy")
        policies = tuple(_policy(p, f"{path}.policies[{i}]") for i, p in enumerate(raw))
    tolerance: Decimal | None = None
    if fields.get("tolerance") is not None:
        raw_tol = fields["tolerance"]
        try:
            tolerance = parse_quantity(raw_tol)
        except QuantityError as e:
            raise ManifestError(f"{path}.tolerance", str(e)) from e
        if tolerance < 0:
            raise ManifestError(f"{path}.tolerance", "must be greater than or equal to 0")
    return ScalingRules(window, select_policy, policies, tolerance)


def _behavior(value: object, path: str) -> Behavior:
    fields = _mapping(value, path)
    _only(fields, ("scaleUp", "scaleDown"), path)
    up = fields.get("scaleUp")
    down = fields.get("scaleDown")
    return Behavior(
        scale_up=None if up is None else _rules(up, f"{path}.scaleUp"),
        scale_down=None if down is None else _rules(down, f"{path}.scaleDown"),
    )


def parse_hpa(document: object) -> HorizontalPodAutoscaler:
    """Build a typed HPA from a decoded YAML/JSON document, or raise `ManifestError`."""
    top = _mapping(document, "manifest")
    api_version = top.get("apiVersion")
    if api_version != API_VERSION:
        raise ManifestError("apiVersion", f"must be {API_VERSION}, got {api_version!r}")
    if top.get("kind") != KIND:
        raise ManifestError("kind", f"must be {KIND}, got {top.get('kind')!r}")
    metadata = _mapping(_required(top, "metadata", ""), "metadata")
    name = _string(_required(metadata, "name", "metadata"), "metadata.name")
    namespace = metadata.get("namespace", "default")
    if not isinstance(namespace, str):
        raise ManifestError("metadata.namespace", "must be a string")
    spec = _mapping(_required(top, "spec", ""), "spec")
    _only(spec, ("scaleTargetRef", "minReplicas", "maxReplicas", "metrics", "behavior"), "spec")
    max_replicas = _integer(_required(spec, "maxReplicas", "spec"), "spec.maxReplicas", low=1)
    min_replicas: int | None = None
    if spec.get("minReplicas") is not None:
        min_replicas = _integer(spec["minReplicas"], "spec.minReplicas", low=1)
        if min_replicas > max_replicas:
            raise ManifestError(
                "spec.maxReplicas", f"must be greater than or equal to minReplicas {min_replicas}"
            )
    raw_metrics = spec.get("metrics") or []
    if not isinstance(raw_metrics, list):
        raise ManifestError("spec.metrics", "must be a list")
    metrics = tuple(_metric(m, f"spec.metrics[{i}]") for i, m in enumerate(raw_metrics))
    behavior = (
        None if spec.get("behavior") is None else _behavior(spec["behavior"], "spec.behavior")
    )
    return HorizontalPodAutoscaler(
        name=name,
        namespace=namespace,
        spec=HorizontalPodAutoscalerSpec(
            scale_target_ref=_reference(
                _required(spec, "scaleTargetRef", "spec"), "spec.scaleTargetRef"
            ),
            max_replicas=max_replicas,
            min_replicas=min_replicas,
            metrics=metrics,
            behavior=behavior,
        ),
        document=copy.deepcopy(dict(top)),
    )


def load_hpa(path: Path) -> HorizontalPodAutoscaler:
    """Read the first HorizontalPodAutoscaler of a YAML file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ManifestError("", f"cannot read {path}: {e.strerror or e}") from e
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or "invalid YAML"
        raise ManifestError("", f"{path}: bad YAML{where}: {problem}") from e
    if not documents:
        raise ManifestError("", f"{path}: no YAML document found")
    hpas = [d for d in documents if isinstance(d, Mapping) and d.get("kind") == KIND]
    return parse_hpa(hpas[0] if hpas else documents[0])


def rules_to_dict(rules: ScalingRules) -> dict[str, Any]:
    """Render scaling rules in manifest form (only the fields that are set)."""
    out: dict[str, Any] = {}
    if rules.stabilization_window_seconds is not None:
        out["stabilizationWindowSeconds"] = rules.stabilization_window_seconds
    if rules.select_policy is not None:
        out["selectPolicy"] = rules.select_policy.value
    if rules.policies is not None:
        out["policies"] = [
            {"type": p.type.value, "value": p.value, "periodSeconds": p.period_seconds}
            for p in rules.policies
        ]
    if rules.tolerance is not None:
        out["tolerance"] = str(rules.tolerance)
    return out


def behavior_to_dict(behavior: Behavior) -> dict[str, Any]:
    """Render a behavior in manifest form."""
    out: dict[str, Any] = {}
    if behavior.scale_up is not None:
        out["scaleUp"] = rules_to_dict(behavior.scale_up)
    if behavior.scale_down is not None:
        out["scaleDown"] = rules_to_dict(behavior.scale_down)
    return out


def manifest_with_behavior(hpa: HorizontalPodAutoscaler, behavior: Behavior) -> str:
    """The admin's own manifest with `spec.behavior` replaced, as YAML text."""
    document = copy.deepcopy(hpa.document)
    document.setdefault("spec", {})["behavior"] = behavior_to_dict(behavior)
    return yaml.safe_dump(document, sort_keys=False)
