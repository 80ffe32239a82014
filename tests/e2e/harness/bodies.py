"""Plain manifests as request bodies of the kubernetes client."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def as_body(manifest: Mapping[str, Any]) -> Any:
    """`manifest` as the body of a `create_*` call.

    The client serialises a dict as it is (`ApiClient.sanitize_for_serialization`), but its
    annotations name only the generated model (`V1Deployment`, ...); the tests write the
    manifests a user would, so they pass dicts through this one documented cast.
    """
    return manifest
