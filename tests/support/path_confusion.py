"""Issue 25's path confusion: origin-form paths with a scheme inside, authorised for one
namespace and once routed by the adapter to another (RFC 9112 §3.2: a target that starts
with `/` is origin-form whatever it contains). Shared by the adapter's integration test and
the acceptance bench (`bench/attacks_apiserver.py path-confusion`)."""

from __future__ import annotations

API = "/apis/custom.metrics.k8s.io/v1beta2"


def confused_paths(allowed: str, other: str, pod: str) -> list[str]:
    """Paths in namespace `allowed` that name `other`'s `pod` after a scheme (issue 25's own
    `a://h` first), and two that start with a scheme-like segment or `//`."""
    target = f"{API}/namespaces/{other}/pods/{pod}/samples_per_second"
    return [
        f"{API}/namespaces/{allowed}/pods/a://h{target}",  # issue 25's example
        f"{API}/namespaces/{allowed}/pods/http://h{target}",
        f"{API}/namespaces/{allowed}/pods/a/https://h{API}/namespaces/{other}/pods/*/samples_per_second",
        f"/a://h{target}",
        f"//h{target}",
    ]
