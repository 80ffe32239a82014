"""Retiring a finished job's Deployment: one Event, the scale to 0 from everyone, and nothing
but the scale subresource touched."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from agent.elastic.failures import TrainerFailure, failed_message
from agent.elastic.finished_job import (
    EVENT_REASON,
    FAILED_REASON,
    DeploymentRetirement,
    RetirementFailed,
    event_name,
)
from agent.elastic.runner import options_from
from agent.errors import ConfigError


@dataclass
class FakeScale:
    """One Deployment seen through its scale subresource, and the namespace's Events by name."""

    uid: str = "u-1"
    replicas: int = 3
    events: dict[str, tuple[str, str]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    failures: list[Exception] = field(default_factory=list)
    scale_failures: list[Exception] = field(default_factory=list)

    def read_uid(self, name: str) -> str:
        if self.failures:
            raise self.failures.pop(0)
        return self.uid

    def scale_to_zero(self, name: str) -> None:
        if self.scale_failures:
            raise self.scale_failures.pop(0)
        self.replicas = 0

    def event(self, name: str, uid: str, reason: str, message: str, warning: bool = False) -> bool:
        key = event_name(name, uid, reason)
        if key in self.events:
            return False  # 409: the first agent's is there
        self.events[key] = (reason, message)
        if warning:
            self.warnings.append(reason)
        return True


def test_the_first_agent_announces_every_agent_scales_to_zero() -> None:
    api = FakeScale()
    assert DeploymentRetirement(api, "digits-trainer", "digits").retire(230) is True
    assert api.replicas == 0
    message = "job digits finished at step 230; scaled to 0 replicas to free its resources"
    assert list(api.events.values()) == [(EVENT_REASON, message)]
    api.replicas = 1  # say someone scaled it up again
    assert DeploymentRetirement(api, "digits-trainer", "digits").retire(230) is False
    assert api.replicas == 0 and len(api.events) == 1


def test_a_new_deployment_of_the_same_name_gets_its_own_event() -> None:
    api = FakeScale()
    assert DeploymentRetirement(api, "d", "digits").retire(None) is True
    api.uid = "u-2"  # deleted and created again (a new install of the job)
    assert DeploymentRetirement(api, "d", "digits").retire(None) is True
    assert len(api.events) == 2
    assert event_name("d", "u-2", EVENT_REASON) == "d.jobfinished.u-2"


def test_transient_errors_are_retried_and_a_lasting_one_keeps_its_cause() -> None:
    api = FakeScale(failures=[ConnectionError("reset")])
    assert DeploymentRetirement(api, "d", "digits").retire(1) is True
    # the Event was recorded, then the scale failed once: still this agent's announcement
    api = FakeScale(scale_failures=[ConnectionError("reset")])
    assert DeploymentRetirement(api, "d", "digits").retire(1) is True and api.replicas == 0
    forbidden = PermissionError("deployments.apps/scale is forbidden")
    api = FakeScale(failures=[forbidden] * 3)
    with pytest.raises(RetirementFailed, match="cannot scale Deployment d of finished job") as e:
        DeploymentRetirement(api, "d", "digits", attempts=3).retire(1)
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


def test_a_failed_job_scales_to_zero_with_a_warning_naming_its_last_failures() -> None:
    api = FakeScale()
    failures = (
        TrainerFailure("digits-0", 1, 10.0, ("Traceback", "ValueError: boom")),
        TrainerFailure("digits-1", 137, 11.0, ()),
    )
    assert DeploymentRetirement(api, "d", "digits").fail(failures) is True
    assert api.replicas == 0 and api.warnings == [FAILED_REASON]
    ((reason, message),) = api.events.values()
    assert reason == "JobFailed"
    assert message == (
        "job digits failed after 2 trainer failures over its budget; last: digits-1 status 137: "
        "no output; digits-0 status 1: ValueError: boom (scaled to 0 replicas)"
    )
    newest_tail = (TrainerFailure("digits-1", 1, 12.0, ("Traceback", "ValueError: bad")),)
    assert DeploymentRetirement(FakeScale(), "d", "digits").fail(newest_tail)
    assert failed_message("digits", failures + newest_tail).endswith(
        "last: digits-1 status 1: Traceback | ValueError: bad; digits-1 status 137: no output; "
        "digits-0 status 1: ValueError: boom"
    )
