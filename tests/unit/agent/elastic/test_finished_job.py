"""Retiring a finished job's Deployment: one mark and one Event, the scale to 0 from everyone."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

import pytest

from agent.elastic.finished_job import (
    EVENT_REASON,
    FINISHED_STEP,
    STATE_LABEL,
    DeploymentRetirement,
    RetirementFailed,
)
from agent.elastic.runner import options_from
from agent.errors import ConfigError

NOW = dt.datetime(2026, 5, 1, 12, 0, tzinfo=dt.UTC)


@dataclass
class FakeDeployments:
    """One Deployment whose resourceVersion moves on every write, as the API server's does."""

    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    version: int = 1
    replicas: int = 3
    events: list[tuple[str, str]] = field(default_factory=list)
    failures: list[Exception] = field(default_factory=list)

    def read(self, name: str) -> dict[str, Any]:
        if self.failures:
            raise self.failures.pop(0)
        return {"labels": dict(self.labels), "uid": "u-1", "resourceVersion": str(self.version)}

    def mark(self, name: str, resource_version: str, labels: dict[str, str],
             annotations: dict[str, str]) -> bool:  # fmt: skip
        if resource_version != str(self.version):
            return False
        self.labels.update(labels)
        self.annotations.update(annotations)
        self.version += 1
        return True

    def scale_to_zero(self, name: str) -> None:
        self.replicas = 0
        self.version += 1

    def event(self, name: str, uid: str, reason: str, message: str) -> None:
        self.events.append((reason, message))


def test_the_first_agent_marks_and_announces_every_agent_scales_to_zero() -> None:
    api = FakeDeployments()
    first = DeploymentRetirement(api, "digits-trainer", "digits")
    assert first.retire(230, NOW) is True
    assert api.replicas == 0 and api.labels == {STATE_LABEL: "finished"}
    assert api.annotations[FINISHED_STEP] == "230"
    assert api.events == [(EVENT_REASON, "job digits finished at step 230; scaled to 0 "
                           "replicas to free its resources")]  # fmt: skip
    api.replicas = 1  # say someone scaled it up again
    assert DeploymentRetirement(api, "digits-trainer", "digits").retire(230, NOW) is False
    assert api.replicas == 0 and len(api.events) == 1


def test_an_agent_that_loses_the_race_to_mark_records_no_second_event() -> None:
    api = FakeDeployments()
    stale = api.read("digits-trainer")
    api.version += 1  # another agent wrote in between
    assert not api.mark("digits-trainer", stale["resourceVersion"], {STATE_LABEL: "finished"}, {})
    assert DeploymentRetirement(api, "digits-trainer", "digits").retire(None, NOW) is True
    assert len(api.events) == 1 and FINISHED_STEP not in api.annotations


def test_transient_errors_are_retried_and_a_lasting_one_keeps_its_cause() -> None:
    api = FakeDeployments(failures=[ConnectionError("reset")])
    assert DeploymentRetirement(api, "d", "digits").retire(1, NOW) is True
    forbidden = PermissionError("deployments.apps/scale is forbidden")
    api = FakeDeployments(failures=[forbidden] * 3)
    with pytest.raises(RetirementFailed, match="cannot scale Deployment d of finished job") as e:
        DeploymentRetirement(api, "d", "digits", attempts=3).retire(1, NOW)
    assert e.value.__cause__ is forbidden and api.replicas == 3


def test_scale_to_zero_needs_kubernetes_membership_and_a_deployment() -> None:
    flags = {"elastic": True, "job": "digits", "membership": "kubernetes",
             "on_finished": "scale-to-zero"}  # fmt: skip
    with pytest.raises(ConfigError, match="--deployment NAME"):
        options_from(flags, {})
    options = options_from(flags, {"EDL_DEPLOYMENT": "digits-trainer"})
    assert options is not None and options.deployment == "digits-trainer"
    with pytest.raises(ConfigError, match="--membership kubernetes"):
        options_from({**flags, "membership": "local:/tmp/x"}, {"EDL_DEPLOYMENT": "d"})
