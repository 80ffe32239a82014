"""AdapterSettings: what one adapter process was told, frozen and validated once.

The flags and ``EDL_ADAPTER_*`` variables that build it are the table in
`metrics_adapter.options`, which is also the one place of every default: the fields here have
none (`metrics_adapter.options.default_settings` gives the table's, with changes). Fields are
grouped by concern in the order ``--help`` shows them (serving, limits, sources, metrics,
sizing, security).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path

from edl_sizing.resources import Resources
from metrics_adapter.errors import ConfigError

STALE_AFTER_INTERVALS = 3
"""Without ``--stale-after``: a pod's value goes stale after this many scrape intervals..."""
STALE_AFTER_MIN_S = 15.0
"""...but never sooner than this many seconds."""
MAX_SAMPLES_PER_SERIES = 256
"""Without ``--samples-per-series``: enough for the longest window, at most this many."""
SELF_SIGNED_HOSTNAMES = ("localhost", "edl-metrics-adapter", "edl-metrics-adapter.edl-system.svc")
"""Without ``--tls-cert-file``: the DNS names of the generated serving certificate (and
127.0.0.1, ::1)."""


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

    host: str
    """Address to listen on."""
    port: int
    """Port to listen on."""
    tls: bool
    """Serve HTTPS (on by default); ``--no-tls`` serves plain HTTP for benchmarks only."""
    tls_cert_file: Path | None
    """Serving certificate (PEM). With no cert and key, a self-signed one is generated."""
    tls_private_key_file: Path | None
    """Serving private key (PEM)."""
    cert_dir: Path | None
    """Where a generated self-signed certificate is written (default: a temporary dir)."""
    source: str
    """Source of pods and samples."""
    static_file: Path | None
    """Static pods file (``--source static``; also the pod list for ``--source prometheus``)."""
    kubeconfig: Path | None
    """Kubeconfig for the Kubernetes source and delegated auth (default: in-cluster)."""
    pod_selector: str
    """Label selector of the trainer pods to discover (``--source kubernetes``)."""
    namespace: str | None
    """Namespace to watch (default: all namespaces)."""
    metrics_port: int
    """Port of the agent's /metrics on each pod (overridden per pod by the annotation)."""
    metrics_port_annotation: str
    """Pod annotation that overrides --metrics-port."""
    metrics_path: str
    """Path of the agent's metrics endpoint."""
    prometheus_url: str | None
    """Base URL of the Prometheus HTTP API (``--source prometheus``)."""
    prometheus_namespace_label: str
    """Prometheus label carrying the pod's namespace."""
    prometheus_pod_label: str
    """Prometheus label carrying the pod's name."""
    prometheus_owner_label: str
    """Prometheus label carrying the owner Deployment's name (when pods come from labels)."""
    scrape_interval: float
    """Seconds between scrapes (or Prometheus queries)."""
    scrape_timeout: float
    """Total deadline of one scrape, seconds."""
    scrape_concurrency: int
    """Scrapes in flight at once."""
    max_scrape_bytes: int
    """Largest /metrics body accepted."""
    stale_after: float | None
    """Seconds after which a pod's newest sample is stale (default: `STALE_AFTER_INTERVALS` x
    interval, at least `STALE_AFTER_MIN_S`)."""
    expire_after: float | None
    """Seconds after which a silent pod's data is dropped (default: 2 x window + stale)."""
    samples_per_series: int | None
    """Samples kept per series (default: enough for the longest window, at most
    `MAX_SAMPLES_PER_SERIES`)."""
    metrics_config: Path | None
    """Metric catalogue YAML (default: EDL's built-in catalogue); reloaded on change."""
    reload_interval: float
    """Seconds between checks of the catalogue and static files for changes."""
    authentication: AuthMode
    """``delegated``: requestheader mTLS, client certs, TokenReview. ``none``: off."""
    authorization: AuthMode
    """``delegated``: SubjectAccessReview (cached). ``none``: allow everything."""
    requestheader_client_ca_file: Path | None
    """CA of the front-proxy client cert (default: from extension-apiserver-authentication)."""
    requestheader_allowed_names: list[str]
    """Allowed front-proxy CNs (empty: any cert of the CA)."""
    requestheader_username_headers: list[str]
    """Headers carrying the user name."""
    requestheader_group_headers: list[str]
    """Headers carrying the groups."""
    requestheader_extra_headers_prefix: list[str]
    """Header prefixes carrying extra user info."""
    client_ca_file: Path | None
    """CA of x509 client certificates (user = CN, groups = O)."""
    authentication_kubeconfig: Path | None
    """Kubeconfig for TokenReview and the auth ConfigMap (default: --kubeconfig/in-cluster)."""
    authorization_kubeconfig: Path | None
    """Kubeconfig for SubjectAccessReview (default: --kubeconfig/in-cluster)."""
    authentication_skip_lookup: bool
    """Do not read kube-system/extension-apiserver-authentication."""
    auth_config_refresh: float
    """Seconds between re-reads of the auth ConfigMap (rotated CAs apply without restart)."""
    auth_cache_ttl: float
    """Seconds TokenReview and SubjectAccessReview decisions are cached."""
    threads: int
    """Threads running the app (one process; connections wait on the event loop, not here)."""
    log_level: str
    """Log level."""
    access_log: bool
    """Log every request (one line on stderr, with the authenticated user)."""
    tls_handshake_timeout: float
    """Seconds a TLS handshake may take; slower connections are closed."""
    request_header_timeout: float
    """Seconds from a request's first byte to the end of its headers; slower gets 408."""
    idle_timeout: float
    """Seconds a keep-alive connection may wait for its next request."""
    write_timeout: float
    """Seconds a client may take to read a response before the connection is dropped."""
    max_connections: int
    """Open connections at most; a new one beyond closes the one idle longest (else it is
    closed at accept)."""
    reserved_connections: int
    """Of ``max_connections``, room only front-proxy (verified client certificate)
    connections may use."""
    max_connections_per_peer: int
    """Connections without a verified client certificate from one address at most."""
    unauthenticated_idle_timeout: float
    """Seconds a keep-alive connection without a verified client certificate may idle."""
    max_requests_inflight: int
    """Requests queued or running at most; more are answered 429 TooManyRequests."""
    max_header_bytes: int
    """Largest request head (request line and headers); larger is 431 (a longer line 414)."""
    memory_budget: int | None
    """Bytes the process may use (None: the container's memory limit; 0: no budget).
    Past 70 % of it new connections and request bodies of clients without a verified client
    certificate are refused (``edl_common.http.memory``)."""
    max_series_per_pod: int
    """Label sets of the catalogue's series kept per pod; new ones beyond are refused."""
    series_prune_after: float | None
    """Seconds after which a label set a pod no longer exposes is dropped (default: the
    longest window, at least --stale-after)."""
    sizing: bool
    """Run the sizer and serve the External metric ``desired_replicas`` (docs/sizing.md)."""
    sizing_capacity: str
    """Capacity source by name (``kubernetes``: watch the cluster; ``static``: a file)."""
    sizing_capacity_file: Path | None
    """YAML cluster description for ``--sizing-capacity static``."""
    sizing_history: str
    """History store by name (``configmap``: shared by replicas; ``memory``: this process)."""
    sizing_history_configmap: str
    """Name of the history ConfigMap."""
    sizing_history_namespace: str | None
    """Its namespace (default: the adapter's own, from its service account, else edl-system)."""
    sizing_interval: float
    """Seconds between sizing decisions."""
    sizing_history_interval: float
    """Seconds between this replica's writes of new observations to the history."""
    sizing_headroom: Resources
    """Room kept free on every node (``--sizing-headroom cpu=250m,memory=512Mi``)."""
    sizing_hold_off: float
    """Seconds after a job grew before it may grow again."""
    sizing_payback: float
    """Seconds within which a growth must make up for the job's measured rescale pause."""
    sizing_exploration: float
    """Never grow a job beyond this multiple of the largest size measured."""
    sizing_default_max_workers: int
    """Max workers of a job without the ``edl.paddlepaddle.org/max-workers`` annotation."""
    sizing_kueue: bool = False
    """Read Kueue's queues (docs/sizing.md#with-kueue): plan no worker a queue would hold."""

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
