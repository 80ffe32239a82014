"""`edl-adapter preflight`: refuse an install that would take over another adapter's APIService.

One APIService has one server. `kubectl apply -k manifests/base` over an
``v1beta1.external.metrics.k8s.io`` that KEDA, Datadog or prometheus-adapter serves reports
"configured" and silently points the HPA's external metrics at EDL. The preflight reads the
APIServices an install would write (the rendered manifests), compares each with the live one,
and names every one that another Service serves::

    kubectl kustomize manifests/base | edl-adapter preflight -f - && kubectl apply -k manifests/base

The Helm chart makes the same check with a `lookup` at install time (charts/edl).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from metrics_adapter.errors import ConfigError


@dataclass(frozen=True)
class ServiceRef:
    """The Service behind an APIService (namespace/name), or none (served locally)."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}" if self.name else "(kube-apiserver itself)"


@dataclass(frozen=True)
class Conflict:
    """An APIService the install would point at `planned` while `live` serves it."""

    apiservice: str
    planned: ServiceRef
    live: ServiceRef
    owner_hint: str = ""

    def describe(self) -> str:
        """One line for the user."""
        hint = f" ({self.owner_hint})" if self.owner_hint else ""
        return (
            f"APIService {self.apiservice} is served by Service {self.live}{hint}; "
            f"installing would switch it to {self.planned}"
        )


def service_of(apiservice: Mapping[str, Any]) -> ServiceRef:
    """The Service an APIService object names."""
    svc = (apiservice.get("spec") or {}).get("service") or {}
    return ServiceRef(str(svc.get("namespace") or ""), str(svc.get("name") or ""))


def _owner_hint(apiservice: Mapping[str, Any]) -> str:
    meta = apiservice.get("metadata") or {}
    release = (meta.get("annotations") or {}).get("meta.helm.sh/release-name")
    labels = meta.get("labels") or {}
    if release:
        return f"Helm release {release}"
    if labels.get("app.kubernetes.io/managed-by"):
        return f"managed by {labels['app.kubernetes.io/managed-by']}"
    return ""


def planned_apiservices(text: str) -> list[dict[str, Any]]:
    """The APIService objects in a multi-document YAML (rendered manifests).

    Raises:
        ConfigError: the text is not YAML, or holds no APIService.
    """
    try:
        docs = [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]
    except yaml.YAMLError as e:
        raise ConfigError(f"the manifests are not YAML: {e}") from e
    found = [d for d in docs if d.get("kind") == "APIService"]
    if not found:
        raise ConfigError("the manifests hold no APIService (nothing to check)")
    return found


def conflicts(
    planned: Iterable[Mapping[str, Any]], live: Callable[[str], Mapping[str, Any] | None]
) -> list[Conflict]:
    """Every planned APIService whose live one another Service serves (pure but `live`)."""
    out = []
    for obj in planned:
        name = str((obj.get("metadata") or {}).get("name") or "")
        current = live(name)
        if current is None:
            continue
        want, have = service_of(obj), service_of(current)
        if want != have:
            out.append(Conflict(name, want, have, _owner_hint(current)))
    return out


def live_apiservices(api_client: Any) -> Callable[[str], Mapping[str, Any] | None]:
    """Reads one APIService by name through `api_client` (None when there is none)."""
    from kubernetes import client as k8s

    api = k8s.ApiregistrationV1Api(api_client)

    def read(name: str) -> Mapping[str, Any] | None:
        try:
            obj = api.read_api_service(name, _request_timeout=15)
        except k8s.ApiException as e:
            if e.status == 404:
                return None
            raise ConfigError(f"reading APIService {name}: HTTP {e.status} {e.reason}") from e
        result: Mapping[str, Any] = api_client.sanitize_for_serialization(obj)
        return result

    return read


class Refused(Exception):
    """The install would take over an APIService another Service serves (exit status 1)."""


def check(
    text: str, live: Callable[[str], Mapping[str, Any] | None], take_over: bool
) -> tuple[str, list[str]]:
    """The preflight's result line, and a warning for each APIService taken over.

    Raises:
        Refused: without `take_over`, another Service serves one of the planned APIServices;
            its one line names each and what to do.
        ConfigError: the manifests are not YAML or hold no APIService.
    """
    planned = planned_apiservices(text)
    names = ", ".join(str((p.get("metadata") or {}).get("name")) for p in planned)
    found = conflicts(planned, live)
    if not found:
        return f"preflight: ok: no other Service serves {names}", []
    if not take_over:
        raise Refused(
            "; ".join(c.describe() for c in found) + "; leave "
            + ("that APIService" if len(found) == 1 else "those APIServices")
            + " out (manifests/overlays/custom-only for the external one) or pass --take-over"
        )  # fmt: skip
    taken = ", ".join(c.apiservice for c in found)
    return (
        f"preflight: ok: taking over {taken} (--take-over)",
        [f"{c.describe()} (--take-over)" for c in found],
    )
