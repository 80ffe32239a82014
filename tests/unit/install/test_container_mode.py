"""The e2e pod runner's container mode turns a pod spec into `podman run` as a kubelet would."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from tests.e2e.harness.containers import RunSpec, _merged_security, _user, run_argv
from tests.e2e.harness.podrunner import StartFailure


def pod(container: dict[str, Any], pod_security: dict[str, Any] | None = None) -> Any:
    spec = {"containers": [container], "securityContext": pod_security}
    raw = {"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": spec}
    return client.ApiClient()._ApiClient__deserialize(raw, "V1Pod")  # type: ignore[attr-defined]


ADAPTER = {
    "name": "adapter",
    "image": "localhost/edl:0.1.0",
    "command": ["edl-adapter"],
    "args": ["serve"],
    "securityContext": {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    },
}


def test_security_context_maps_to_podman_flags() -> None:
    p = pod(ADAPTER, {"runAsNonRoot": True, "runAsUser": 65532})
    c = p.spec.containers[0]
    security = _merged_security(p, c)
    spec = RunSpec(
        name="x",
        image=c.image,
        entrypoint=c.command,
        args=c.args,
        env={"A": "1"},
        user=_user(security, "65532:65532", p, c),
        read_only=bool(security["read_only_root_filesystem"]),
        no_new_privileges=security["allow_privilege_escalation"] is False,
        cap_drop=security["drop"],
    )
    argv = run_argv(spec)
    assert argv[:2] == ["podman", "run"]
    assert argv[argv.index("--network") + 1] == "host"
    assert argv[argv.index("--user") + 1] == "65532"
    assert "--read-only" in argv and "--read-only-tmpfs=false" in argv
    assert "no-new-privileges" in argv and "--cap-drop=ALL" in argv
    # command replaces ENTRYPOINT, args come after the image (replacing CMD)
    assert argv[argv.index("--entrypoint") + 1] == '["edl-adapter"]'
    assert argv[-2:] == ["localhost/edl:0.1.0", "serve"]


@pytest.mark.parametrize("image_user", ["", "0", "root", "root:root"])
def test_run_as_non_root_refuses_an_image_that_runs_as_root(image_user: str) -> None:
    p = pod({"name": "c", "image": "i"}, {"runAsNonRoot": True})
    c = p.spec.containers[0]
    with pytest.raises(StartFailure) as failed:
        _user(_merged_security(p, c), image_user, p, c)
    assert failed.value.reason == "CreateContainerConfigError"
    assert "runAsNonRoot" in failed.value.message


def test_container_security_context_wins_over_the_pods() -> None:
    container = {"name": "c", "image": "i", "securityContext": {"runAsUser": 1000}}
    p = pod(container, {"runAsUser": 65532, "runAsGroup": 65532})
    c = p.spec.containers[0]
    assert _user(_merged_security(p, c), "", p, c) == "1000:65532"
