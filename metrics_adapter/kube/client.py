"""Kubernetes API clients from a kubeconfig or the in-cluster service account."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from metrics_adapter.errors import SourceError


def make_api_client(kubeconfig: Path | None) -> Any:
    """An ``ApiClient`` for ``kubeconfig``, or in-cluster when None.

    Raises:
        SourceError: when no configuration can be loaded.
    """
    from kubernetes import client as k8s  # imported on demand: ~30 MB resident
    from kubernetes import config as k8s_config

    try:
        if kubeconfig is not None:
            return k8s_config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
        configuration = k8s.Configuration()
        k8s_config.load_incluster_config(  # type: ignore[no-untyped-call]
            client_configuration=configuration
        )
        return k8s.ApiClient(configuration)
    except Exception as e:
        where = kubeconfig or "in-cluster service account"
        raise SourceError(f"cannot configure a Kubernetes client from {where}: {e}") from e
