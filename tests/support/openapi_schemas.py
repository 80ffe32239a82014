"""The Kubernetes API's OpenAPI schemas of the minors EDL claims, and a strict check against them.

docs/install.md states one supported range of Kubernetes minors; every manifest and chart
output must be valid on each. kube-apiserver refuses an unknown field under strict field
validation (kubectl's default since 1.27), so a field added in a newer minor (the HPA's
``behavior.*.tolerance``, 1.33) breaks an install on an older one. :class:`ApiSchema` checks
a rendered object the same way, offline, against the ``swagger.json`` of that minor
(``api/openapi-spec/swagger.json`` of ``k8s.io/kubernetes``, from the Go module proxy, cached
under ``~/.cache/edl/openapi/<version>/``): the kind must be served, every field must exist
there with the right type, required fields must be present.

``python -m tests.support.openapi_schemas`` fetches the schemas (``make openapi-schemas``;
``make test`` runs it).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

SUPPORTED = ("1.30.14", "1.35.4")
"""The oldest and the newest Kubernetes release claimed (docs/install.md): the oldest is the
first minor with ValidatingAdmissionPolicy GA, the newest the e2e control plane's."""
QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
_CACHE = Path(os.environ.get("EDL_CACHE_DIR", Path.home() / ".cache" / "edl")) / "openapi"


class SchemaUnavailable(RuntimeError):
    """The schema of a version could not be fetched (the message says why)."""


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def swagger_path(version: str) -> Path:
    """The cached ``swagger.json`` of Kubernetes ``version`` (fetched on first use).

    Raises:
        SchemaUnavailable: the Go module could not be downloaded or holds no swagger.json.
    """
    target = _CACHE / f"v{version}" / "swagger.json"
    if target.exists():
        return target
    with _locked(_CACHE / ".lock"):
        if target.exists():
            return target
        done = subprocess.run(
            ["go", "mod", "download", "-json", f"k8s.io/kubernetes@v{version}"],
            capture_output=True,
            text=True,
            timeout=1800,
            check=False,
            cwd=_CACHE,
            env={**os.environ, "GOFLAGS": "-mod=mod"},
        )
        if done.returncode != 0:
            raise SchemaUnavailable(
                f"go mod download k8s.io/kubernetes@v{version}: {done.stderr.strip()[-500:]}"
            )
        archive = json.loads(done.stdout)["Zip"]
        member = f"k8s.io/kubernetes@v{version}/api/openapi-spec/swagger.json"
        try:
            with zipfile.ZipFile(archive) as z:
                data = z.read(member)
        except (KeyError, OSError, zipfile.BadZipFile) as e:
            raise SchemaUnavailable(f"{archive}: no {member}: {e}") from e
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".tmp")
        partial.write_bytes(data)
        partial.replace(target)
    return target


class ApiSchema:
    """One Kubernetes release's API objects, checked as kube-apiserver's strict validation does."""

    def __init__(self, version: str, swagger: Mapping[str, Any]) -> None:
        self.version = version
        self._definitions: Mapping[str, Any] = swagger["definitions"]
        self._kinds: dict[tuple[str, str, str], str] = {}
        for name, definition in self._definitions.items():
            for gvk in definition.get("x-kubernetes-group-version-kind", ()):
                self._kinds[(gvk["group"], gvk["version"], gvk["kind"])] = name

    @classmethod
    @functools.cache
    def of(cls, version: str) -> ApiSchema:
        """The schema of ``version`` (fetched and parsed once per process)."""
        return cls(version, json.loads(swagger_path(version).read_text()))

    def serves(self, api_version: str, kind: str) -> bool:
        """Whether this release has the kind at that API version."""
        group, _, version = api_version.rpartition("/")
        return (group, version, kind) in self._kinds

    def errors(self, obj: Mapping[str, Any]) -> list[str]:
        """What this release refuses in ``obj`` (empty: valid), one line each."""
        api_version, kind = str(obj.get("apiVersion", "")), str(obj.get("kind", ""))
        group, _, version = api_version.rpartition("/")
        name = self._kinds.get((group, version, kind))
        where = f"{kind} {obj.get('metadata', {}).get('name', '?')}"
        if name is None:
            return [f"{where}: {api_version} {kind} is not served by Kubernetes {self.version}"]
        found: list[str] = []
        self._check(obj, {"$ref": f"#/definitions/{name}"}, where, found)
        return found

    def _check(self, value: Any, schema: Mapping[str, Any], path: str, found: list[str]) -> None:
        ref = schema.get("$ref")
        if ref is not None:
            name = ref.rsplit("/", 1)[-1]
            if name == QUANTITY:  # a string, but its decoder takes numbers too
                if not isinstance(value, str | int | float) or isinstance(value, bool):
                    found.append(f"{path}: a quantity, not {type(value).__name__}")
                return
            schema = self._definitions[name]
        kind = schema.get("type")
        if schema.get("format") == "int-or-string":
            if not isinstance(value, str | int) or isinstance(value, bool):
                found.append(f"{path}: an integer or a string, not {type(value).__name__}")
            return
        if kind == "object" or "properties" in schema:
            if not isinstance(value, dict):
                found.append(f"{path}: an object, not {type(value).__name__}")
                return
            properties = schema.get("properties")
            if properties is not None:
                for key, item in value.items():
                    if key not in properties:
                        found.append(f"{path}: unknown field {key!r}")
                    elif item is not None:
                        self._check(item, properties[key], f"{path}.{key}", found)
                for key in schema.get("required", ()):
                    if key not in value:
                        found.append(f"{path}: missing required field {key!r}")
            elif isinstance(schema.get("additionalProperties"), dict):
                for key, item in value.items():
                    if item is not None:
                        self._check(item, schema["additionalProperties"], f"{path}.{key}", found)
            return
        if kind == "array":
            if not isinstance(value, list):
                found.append(f"{path}: a list, not {type(value).__name__}")
                return
            for i, item in enumerate(value):
                self._check(item, schema.get("items", {}), f"{path}[{i}]", found)
            return
        expected = {"string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,)}
        types = expected.get(str(kind))
        if types is None:
            return  # no type: free-form (RawExtension, JSON)
        if not isinstance(value, types) or (kind != "boolean" and isinstance(value, bool)):
            found.append(f"{path}: {kind}, not {type(value).__name__} ({value!r})")


def main() -> int:
    """Fetch every supported release's schema; print where each is."""
    for version in SUPPORTED:
        try:
            print(swagger_path(version))
        except SchemaUnavailable as e:
            print(f"openapi schemas: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
