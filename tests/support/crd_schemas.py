"""prometheus-operator's custom resources checked offline against the CRDs that define them.

The CRDs come as prometheus-operator's Go module ships them (scripts/fetch-prometheus-operator-
crds.sh, cached under ``~/.cache/edl/prometheus-operator-crds/<version>/``; ``make
monitoring-crds``). Each served version's structural schema is read the way
:class:`tests.support.openapi_schemas.ApiSchema` reads the built-in kinds: an unknown field, a
wrong type or a missing required field is refused, as kube-apiserver's strict validation does.
"""

from __future__ import annotations

import functools
from typing import Any

import yaml

from tests.support.cached_scripts import cached_path
from tests.support.openapi_schemas import ApiSchema


@functools.cache
def prometheus_operator_schema() -> ApiSchema:
    """PodMonitor, ServiceMonitor and PrometheusRule as the pinned CRDs define them.

    Raises:
        ScriptFailed: the CRDs could not be fetched.
    """
    definitions: dict[str, Any] = {}
    for path in sorted(cached_path("fetch-prometheus-operator-crds.sh").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            if not version.get("served"):
                continue
            schema = dict(version["schema"]["openAPIV3Schema"])
            schema["x-kubernetes-group-version-kind"] = [
                {"group": group, "version": version["name"], "kind": kind}
            ]
            definitions[f"{group}.{version['name']}.{kind}"] = schema
    return ApiSchema("prometheus-operator", {"definitions": definitions})
