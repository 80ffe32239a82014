"""From the metrics' proposal to the count the controller sets: windows, rate limits, bounds.

Two paths, as in `horizontal.go`: `normalize_legacy` for an HPA without `behavior`
(downscale stabilisation, then at most max(2 x current, 4) per sync) and
`normalize_with_behavior` (both stabilisation windows, then the Pods/Percent policies over
the scale-event history and selectPolicy). Each returns the count with the AbleToScale and
ScalingLimited conditions the controller would write.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from edl_sim.hpa.spec import Behavior, PolicyType, ScalingRules, SelectPolicy
from edl_sim.hpa.stabilization import Recommendation, ScalingHistory
from edl_sim.hpa.sync import ABLE_TO_SCALE, SCALING_LIMITED, Condition

MIN_INT32 = -(2**31)
MAX_INT32 = 2**31 - 1
_HIGHER = (
    "recent recommendations were higher than current one, "
    "applying the highest recent recommendation"
)
_LOWER = (
    "recent recommendations were lower than current one, applying the lowest recent recommendation"
)
_READY = Condition(ABLE_TO_SCALE, True, "ReadyForNewScale", "recommended size matches current size")
_WITHIN = ("DesiredWithinRange", "the desired count is within the acceptable range")
_SCALE_UP_LIMIT = (
    "ScaleUpLimit",
    "the desired replica count is increasing faster than the maximum scale rate",
)
_SCALE_DOWN_LIMIT = (
    "ScaleDownLimit",
    "the desired replica count is decreasing faster than the maximum scale rate",
)
_TOO_MANY = ("TooManyReplicas", "the desired replica count is more than the maximum replica count")
_TOO_FEW = ("TooFewReplicas", "the desired replica count is less than the minimum replica count")


@dataclass(frozen=True)
class Bounds:
    """Current count and the HPA's replica bounds for one sync."""

    current: int
    min_replicas: int
    max_replicas: int


@dataclass(frozen=True)
class Normalization:
    """The normalised count, the stabilised one before limits, and the conditions."""

    desired: int
    stabilized: int
    able_to_scale: Condition
    scaling_limited: Condition


def _limited(desired: int, stabilized: int, reason: tuple[str, str]) -> Condition:
    return Condition(SCALING_LIMITED, desired != stabilized, reason[0], reason[1])


def normalize_legacy(
    history: ScalingHistory, now: float, window: float, bounds: Bounds, prenormalized: int
) -> Normalization:
    """`normalizeDesiredReplicas`: the path of an HPA with no `behavior`."""
    cutoff = now - window
    stabilized = prenormalized
    for rec in history.recommendations:
        if rec.timestamp > cutoff and rec.replicas > stabilized:
            stabilized = rec.replicas
    history.record(Recommendation(prenormalized, now), lambda ts: ts <= cutoff)
    able = (
        Condition(ABLE_TO_SCALE, True, "ScaleDownStabilized", _HIGHER)
        if stabilized != prenormalized
        else _READY
    )
    scale_up_limit = int(max(2.0 * bounds.current, 4.0))
    if bounds.max_replicas > scale_up_limit:
        maximum, limit = scale_up_limit, _SCALE_UP_LIMIT
    else:
        maximum, limit = bounds.max_replicas, _TOO_MANY
    if stabilized < bounds.min_replicas:
        desired, limit = bounds.min_replicas, _TOO_FEW
    elif stabilized > maximum:
        desired = maximum
    else:
        desired, limit = stabilized, _WITHIN
    return Normalization(desired, stabilized, able, _limited(desired, stabilized, limit))


def normalize_with_behavior(
    history: ScalingHistory,
    now: float,
    behavior: Behavior,
    default_down_window: float,
    bounds: Bounds,
    prenormalized: int,
) -> Normalization:
    """`normalizeDesiredReplicasWithBehaviors`: windows, then policies, then min/max."""
    up_rules, down_rules = behavior.scale_up, behavior.scale_down
    assert up_rules is not None and down_rules is not None, "behavior must be defaulted"
    up_window = up_rules.stabilization_window_seconds or 0
    down_window = (
        down_rules.stabilization_window_seconds
        if down_rules.stabilization_window_seconds is not None
        else int(default_down_window)
    )
    stabilized = _stabilize(history, now, bounds.current, prenormalized, up_window, down_window)
    if stabilized == prenormalized:
        able = _READY
    elif prenormalized >= bounds.current:
        able = Condition(ABLE_TO_SCALE, True, "ScaleUpStabilized", _LOWER)
    else:
        able = Condition(ABLE_TO_SCALE, True, "ScaleDownStabilized", _HIGHER)
    desired, limit = _rate_limit(history, now, up_rules, down_rules, bounds, stabilized)
    return Normalization(desired, stabilized, able, _limited(desired, stabilized, limit))


def _stabilize(
    history: ScalingHistory, now: float, current: int, desired: int, up: int, down: int
) -> int:
    up_cutoff = now - up
    down_cutoff = now - down
    up_rec = desired
    down_rec = desired
    for rec in history.recommendations:
        if rec.timestamp > up_cutoff:
            up_rec = min(rec.replicas, up_rec)
        if rec.timestamp > down_cutoff:
            down_rec = max(rec.replicas, down_rec)
    recommendation = current
    if recommendation < up_rec:
        recommendation = up_rec
    if recommendation > down_rec:
        recommendation = down_rec
    history.record(Recommendation(desired, now), lambda ts: ts <= up_cutoff and ts <= down_cutoff)
    return recommendation


def _period_start(history: ScalingHistory, now: float, current: int, period: int) -> int:
    added, deleted = history.changed_within(now, period)
    return current - added + deleted


def scale_up_limit(history: ScalingHistory, now: float, current: int, rules: ScalingRules) -> int:
    """`calculateScaleUpLimitWithScalingRules`: the most replicas the policies allow now."""
    if rules.select_policy is SelectPolicy.DISABLED:
        return current
    use_min = rules.select_policy is SelectPolicy.MIN
    result = MAX_INT32 if use_min else MIN_INT32
    for policy in rules.policies or ():
        start = _period_start(history, now, current, policy.period_seconds)
        if policy.type is PolicyType.PODS:
            proposed = start + policy.value
        else:  # rounded up, or a small percentage could never add a pod
            proposed = math.ceil(float(start) * (1 + float(policy.value) / 100))
        result = min(result, proposed) if use_min else max(result, proposed)
    return result


def scale_down_limit(history: ScalingHistory, now: float, current: int, rules: ScalingRules) -> int:
    """`calculateScaleDownLimitWithBehaviors`: the fewest replicas the policies allow now."""
    if rules.select_policy is SelectPolicy.DISABLED:
        return current
    use_min = rules.select_policy is SelectPolicy.MIN
    result = MIN_INT32 if use_min else MAX_INT32
    for policy in rules.policies or ():
        start = _period_start(history, now, current, policy.period_seconds)
        if policy.type is PolicyType.PODS:
            proposed = start - policy.value
        else:  # int32() truncates
            proposed = int(float(start) * (1 - float(policy.value) / 100))
        result = max(result, proposed) if use_min else min(result, proposed)
    return result


def _rate_limit(
    history: ScalingHistory,
    now: float,
    up_rules: ScalingRules,
    down_rules: ScalingRules,
    bounds: Bounds,
    desired: int,
) -> tuple[int, tuple[str, str]]:
    current = bounds.current
    if desired > current:
        limit = max(scale_up_limit(history, now, current, up_rules), current)
        if bounds.max_replicas > limit:
            maximum, reason = limit, _SCALE_UP_LIMIT
        else:
            maximum, reason = bounds.max_replicas, _TOO_MANY
        if desired > maximum:
            return maximum, reason
    elif desired < current:
        limit = min(scale_down_limit(history, now, current, down_rules), current)
        if bounds.min_replicas < limit:
            minimum, reason = limit, _SCALE_DOWN_LIMIT
        else:
            minimum, reason = bounds.min_replicas, _TOO_FEW
        if desired < minimum:
            return minimum, reason
    return desired, _WITHIN
