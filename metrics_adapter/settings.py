"""AdapterSettings: what one adapter process was told, frozen and validated once.

The flags and ``EDL_ADAPTER_*`` variables that build it are the table in
`metrics_adapter.options`; fields are grouped by concern in the order ``--help`` shows them
(serving, limits, sources, metrics, sizing, security).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path

from edl_sizing import defaults
from edl_sizing.decision import SizingPolicy
from edl_sizing.resources import Resources
from metrics_adapter.errors import ConfigError

_POLICY = SizingPolicy()


class SourceKind(enum.Enum):
    """Where pods and samples come from."""

    STATIC = "static"
    KUBERNETES = "kubernetes"
    PROMETHEUS = "prometheus"


class AuthMode(enum.Enum):
    """``none`` (local demos/tests: everyone is allowed) or ``delegated``.

    Delegated is kube-apiserver's: requestheader and client certificates, TokenReview,
    SubjectAccessReview.
    """

    NONE = "none"
    DELEGATED = "delegated"


@dataclass(frozen=True)
class AdapterSettings:
    """Settings of one adapter process."""

    host: str = "0.0.0.0"
    """Address to listen on."""
    port: int = 6443
    """Port to listen on."""
    tls: bool = True
    """Serve HTTPS (on by default); ``--no-tls`` serves plain HTTP for benchmarks only."""
    tls_cert_file: Path | None = None
    """Serving certificate (PEM). With no cert and key, a self-signed one is generated."""
    tls_private_key_file: Path | None = None
    """Serving private key (PEM)."""
    cert_dir: Path | None = None
    """Where a generated self-signed certificate is written (default: a temporary dir)."""
    source: SourceKind = SourceKind.STATIC
    """Source of pods and samples."""
    static_file: Path | None = None
    """Static pods file (``--source static``; also the pod list for ``--source prometheus``)."""
    kubeconfig: Path | None = None
    """Kubeconfig for the Kubernetes source and delegated auth (default: in-cluster)."""
    pod_selector: str = "app=trainer"
    """Label selector of the trainer pods to discover (``--source kubernetes``)."""
    namespace: str | None = None
    """Namespace to watch (default: all namespaces)."""
    metrics_port: int = 9400
    """Port of the agent's /metrics on each pod (overridden per pod by the annotation)."""
    metrics_port_annotation: str = "edl.paddlepaddle.org/metrics-port"
    """Pod annotation that overrides --metrics-port."""
    metrics_path: str = "/metrics"
    """Path of the agent's metrics endpoint."""
    prometheus_url: str | None = None
    """Base URL of the Prometheus HTTP API (``--source prometheus``)."""
    prometheus_namespace_label: str = "namespace"
    """Prometheus label carrying the pod's namespace."""
    prometheus_pod_label: str = "pod"
    """Prometheus label carrying the pod's name."""
    prometheus_owner_label: str = "deployment"
    """Prometheus label carrying the owner Deployment's name (when pods come from labels)."""
    scrape_interval: float = 5.0
    """Seconds between scrapes (or Prometheus queries)."""
    scrape_timeout: float = 3.0
    """Total deadline of one scrape, seconds."""
    scrape_concurrency: int = 32
    """Scrapes in flight at once."""
    max_scrape_bytes: int = 8 << 20
    """Largest /metrics body accepted."""
    stale_after: float | None = None
    """Seconds after which a pod's newest sample is stale (default: 3 x interval, >= 15 s)."""
    expire_after: float | None = None
    """Seconds after which a silent pod's data is dropped (default: 2 x window + stale)."""
    samples_per_series: int | None = None
    """Samples kept per series (default: enough for the longest window, at most 256)."""
    metrics_config: Path | None = None
    """Metric catalogue YAML (default: EDL's built-in catalogue); reloaded on change."""
    reload_interval: float = 2.0
    """Seconds between checks of the catalogue and static files for changes."""
    authentication: AuthMode = AuthMode.DELEGATED
    """``delegated``: requestheader mTLS, client certs, TokenReview. ``none``: off."""
    authorization: AuthMode = AuthMode.DELEGATED
    """``delegated``: SubjectAccessReview (cached). ``none``: allow everything."""
    requestheader_client_ca_file: Path | None = None
    """CA of the front-proxy client cert (default: from extension-apiserver-authentication)."""
    requestheader_allowed_names: list[str] = field(default_factory=list)
    """Allowed front-proxy CNs (empty: any cert of the CA)."""
    requestheader_username_headers: list[str] = field(default_factory=lambda: ["X-Remote-User"])
    """Headers carrying the user name."""
    requestheader_group_headers: list[str] = field(default_factory=lambda: ["X-Remote-Group"])
    """Headers carrying the groups."""
    requestheader_extra_headers_prefix: list[str] = field(
        default_factory=lambda: ["X-Remote-Extra-"]
    )
    """Header prefixes carrying extra user info."""
    client_ca_file: Path | None = None
    """CA of x509 client certificates (user = CN, groups = O)."""
    authentication_kubeconfig: Path | None = None
    """Kubeconfig for TokenReview and the auth ConfigMap (default: --kubeconfig/in-cluster)."""
    authorization_kubeconfig: Path | None = None
    """Kubeconfig for SubjectAccessReview (default: --kubeconfig/in-cluster)."""
    authentication_skip_lookup: bool = False
    """Do not read kube-system/extension-apiserver-authentication."""
    auth_config_refresh: float = 60.0
    """Seconds between re-reads of the auth ConfigMap (rotated CAs apply without restart)."""
    auth_cache_ttl: float = 10.0
    """Seconds TokenReview and SubjectAccessReview decisions are cached."""
    threads: int = 8
    """Threads running the app (one process; connections wait on the event loop, not here)."""
    log_level: str = "info"
    """Log level."""
    access_log: bool = False
    """Log every request (one line on stderr, with the authenticated user)."""
    tls_handshake_timeout: float = 10.0
    """Seconds a TLS handshake may take; slower connections are closed."""
    request_header_timeout: float = 10.0
    """Seconds from a request's first byte to the end of its headers; slower gets 408."""
    idle_timeout: float = 90.0
    """Seconds a keep-alive connection may wait for its next request."""
    write_timeout: float = 30.0
    """Seconds a client may take to read a response before the connection is dropped."""
    max_connections: int = 1024
    """Open connections at most; a new one beyond closes the one idle longest (else it is
    closed at accept)."""
    reserved_connections: int = 256
    """Of ``max_connections``, room only front-proxy (verified client certificate)
    connections may use."""
    max_connections_per_peer: int = 256
    """Connections without a verified client certificate from one address at most."""
    unauthenticated_idle_timeout: float = 5.0
    """Seconds a keep-alive connection without a verified client certificate may idle."""
    max_requests_inflight: int = 128
    """Requests queued or running at most; more are answered 429 TooManyRequests."""
    max_header_bytes: int = 65536
    """Largest request head (request line and headers); larger is 431 (a longer line 414)."""
    max_series_per_pod: int = 500
    """Label sets of the catalogue's series kept per pod; new ones beyond are refused."""
    series_prune_after: float | None = None
    """Seconds after which a label set a pod no longer exposes is dropped (default: the
    longest window, at least --stale-after)."""
    sizing: bool = False
    """Run the sizer and serve the External metric ``desired_replicas`` (docs/sizing.md)."""
    sizing_capacity: str = "kubernetes"
    """Capacity source by name (``kubernetes``: watch the cluster; ``static``: a file)."""
    sizing_capacity_file: Path | None = None
    """YAML cluster description for ``--sizing-capacity static``."""
    sizing_history: str = "configmap"
    """History store by name (``configmap``: shared by replicas; ``memory``: this process)."""
    sizing_history_configmap: str = "edl-sizing-history"
    """Name of the history ConfigMap."""
    sizing_history_namespace: str | None = None
    """Its namespace (default: the adapter's own, from its service account, else edl-system)."""
    sizing_interval: float = defaults.ROUND_INTERVAL_S
    """Seconds between sizing decisions."""
    sizing_history_interval: float = defaults.HISTORY_INTERVAL_S
    """Seconds between this replica's writes of new observations to the history."""
    sizing_headroom: Resources = field(default_factory=Resources)
    """Room kept free on every node (``--sizing-headroom cpu=250m,memory=512Mi``)."""
    sizing_hold_off: float = _POLICY.hold_off_s
    """Seconds after a job grew before it may grow again."""
    sizing_payback: float = _POLICY.payback_s
    """Seconds within which a growth must make up for the job's measured rescale pause."""
    sizing_exploration: float = _POLICY.exploration
    """Never grow a job beyond this multiple of the largest size measured."""
    sizing_default_max_workers: int = defaults.DEFAULT_MAX_WORKERS
    """Max workers of a job without the ``edl.paddlepaddle.org/max-workers`` annotation."""

    def __post_init__(self) -> None:
        for name in ("port", "metrics_port"):
            if not 0 <= getattr(self, name) <= 65535:
                raise ConfigError(f"--{name.replace('_', '-')} {getattr(self, name)}: not a port")
        if self.sizing_exploration < 1:
            raise ConfigError(f"--sizing-exploration {self.sizing_exploration} must be >= 1")
        if self.sizing_default_max_workers < 1:
            raise ConfigError(
                f"--sizing-default-max-workers {self.sizing_default_max_workers} must be >= 1"
            )
