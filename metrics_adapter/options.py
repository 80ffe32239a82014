"""The option table of ``edl-adapter serve``.

Every flag with its ``EDL_ADAPTER_*`` variable, type, default and help: argparse, the
environment defaults and docs/metrics-api.md's table are generated from it
(`edl_common.options`); `settings_from` turns the values into the frozen `AdapterSettings`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from edl_common.durations import format_duration
from edl_common.errors import ConfigError
from edl_common.options import (
    LIST,
    PATH,
    SWITCH,
    TEXT,
    Kind,
    Option,
    byte_size,
    choice,
    duration,
    integer,
    number,
    read,
)
from edl_sizing import defaults
from edl_sizing.decision import SizingPolicy
from edl_sizing.resources import RESOURCE_NAMES, Resources
from metrics_adapter.scraping.sources.registry import SOURCES
from metrics_adapter.settings import (
    MAX_SAMPLES_PER_SERIES,
    SELF_SIGNED_HOSTNAMES,
    STALE_AFTER_INTERVALS,
    STALE_AFTER_MIN_S,
    AdapterSettings,
    AuthMode,
)
from metrics_adapter.sizing.backends import (
    CAPACITY_SOURCES,
    FALLBACK_HISTORY_NAMESPACE,
    HISTORY_STORES,
)

ENV_PREFIX = "EDL_ADAPTER_"

GROUPS = {
    "limits": "Deadlines and sizes against slow or hostile clients (docs/metrics-api.md).",
    "sizing": "Resource-aware sizing (docs/sizing.md): decide every job's size from the "
    "cluster's free capacity and serve it as the External metric desired_replicas.",
    "security": "Delegated auth (default) follows kube-apiserver: requestheader mTLS from the "
    "aggregator, x509 client certs, bearer tokens by TokenReview, SubjectAccessReview for "
    "every request (cached). Use '--authentication none --authorization none' ONLY for local "
    "demos/tests: anyone who can reach the port can then read every metric.",
}


def _headroom(text: str) -> Resources:
    """``cpu=250m,memory=512Mi`` -> Resources."""
    pairs: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, sep, value = part.partition("=")
        if not sep or name.strip() not in RESOURCE_NAMES:
            raise ConfigError(
                f"{part!r}: expected <resource>=<quantity> (resources: {', '.join(RESOURCE_NAMES)})"
            )
        pairs[name.strip()] = value.strip()
    try:
        return Resources.parse(pairs)
    except ValueError as e:
        raise ConfigError(str(e)) from e


RESOURCES = Kind("resources", _headroom, "disk=1Gi")
"""``cpu=250m,memory=512Mi``: Kubernetes quantities by resource name."""


def _opt(name: str, kind: Kind, default: str | None, help: str, group: str, **more: Any) -> Option:
    """A row whose flag and variable follow the name (``--a-b``, ``EDL_ADAPTER_A_B``)."""
    flag = more.pop("flag", "--" + name.replace("_", "-"))
    env = ENV_PREFIX + flag.removeprefix("--").replace("-", "_").upper()
    return Option(name, flag, env, kind, default, help, group, **more)


_AUTH_MODES = choice(*(m.value for m in AuthMode))
_POLICY = SizingPolicy()
"""The sizer's own knobs: the ``--sizing-*`` defaults are its field defaults, written there."""

OPTIONS: tuple[Option, ...] = (
    _opt("host", TEXT, "0.0.0.0", "address to listen on", "serving"),
    _opt("port", integer(0, 65535), "6443", "port to listen on", "serving"),
    _opt(
        "tls_cert_file",
        PATH,
        None,
        "serving certificate (PEM); without cert and key a self-signed ECDSA one for "
        f"{', '.join(SELF_SIGNED_HOSTNAMES)}, 127.0.0.1 and ::1 is generated at start",
        "serving",
    ),
    _opt("tls_private_key_file", PATH, None, "serving private key (PEM)", "serving"),
    _opt(
        "cert_dir",
        PATH,
        None,
        "directory for the generated self-signed certificate (default: a temp dir)",
        "serving",
    ),
    _opt(
        "no_tls",
        SWITCH,
        None,
        "serve plain HTTP (benchmarks only: the aggregator requires TLS)",
        "serving",
    ),
    _opt(
        "threads",
        integer(1),
        "8",
        "app threads for the requests that wait on the network (a TokenReview or "
        "SubjectAccessReview not in the cache) and for streaming answers too large to buffer; "
        "every other request is answered on the event loop (one process)",
        "serving",
    ),
    _opt(
        "log_level",
        choice("debug", "info", "warning", "error", fold=True),
        "info",
        "log level",
        "serving",
    ),
    _opt("access_log", SWITCH, None, "log every request to stderr", "serving"),
    _opt("tls_handshake_timeout", duration(), "10s", "deadline of a TLS handshake", "limits"),
    _opt(
        "request_header_timeout",
        duration(),
        "10s",
        "deadline of a request's headers (then 408)",
        "limits",
    ),
    _opt("idle_timeout", duration(), "90s", "how long a keep-alive connection may idle", "limits"),
    _opt(
        "write_timeout",
        duration(),
        "30s",
        "how long a client may take to read a response",
        "limits",
    ),
    _opt(
        "max_connections",
        integer(1),
        "1024",
        "open connections at most (a new one beyond closes the one idle longest)",
        "limits",
    ),
    _opt(
        "reserved_connections",
        integer(0),
        "256",
        "of --max-connections, room kept for the aggregator's front-proxy connections "
        "(a verified client certificate)",
        "limits",
    ),
    _opt(
        "max_connections_per_peer",
        integer(1),
        "256",
        "connections without a verified client certificate from one address at most",
        "limits",
    ),
    _opt(
        "unauthenticated_idle_timeout",
        duration(),
        "5s",
        "how long a keep-alive connection without a verified client certificate may idle",
        "limits",
    ),
    _opt(
        "max_requests_inflight",
        integer(1),
        "128",
        "requests queued or running at most (more get 429)",
        "limits",
    ),
    _opt(
        "max_header_bytes",
        integer(1),
        "65536",
        "largest request head (then 431; a longer request line 414)",
        "limits",
    ),
    _opt(
        "memory_budget",
        byte_size(0),
        None,
        "memory the process may use (a quantity: 512Mi); past 70 % of it new connections "
        "and request bodies without a verified client certificate are refused (default: the "
        "container's memory limit, read from its cgroup; 0: no budget)",
        "limits",
    ),
    _opt(
        "source",
        choice(*SOURCES),
        "static",
        "where pods and samples come from",
        "sources",
    ),
    _opt(
        "static_file",
        PATH,
        None,
        "YAML list of pods (for --source static; with --source prometheus it replaces "
        "label-derived pods)",
        "sources",
    ),
    _opt(
        "kubeconfig",
        PATH,
        None,
        "kubeconfig for the Kubernetes source and delegated auth (default: in-cluster)",
        "sources",
    ),
    _opt(
        "pod_selector",
        TEXT,
        "app=trainer",
        "label selector of the trainer pods to watch",
        "sources",
    ),
    _opt("namespace", TEXT, None, "namespace to watch (default: all namespaces)", "sources"),
    _opt("metrics_port", integer(1, 65535), "9400", "port of each pod's agent /metrics", "sources"),
    _opt(
        "metrics_port_annotation",
        TEXT,
        "edl.paddlepaddle.org/metrics-port",
        "pod annotation overriding --metrics-port",
        "sources",
    ),
    _opt("metrics_path", TEXT, "/metrics", "path of the agent's metrics endpoint", "sources"),
    _opt(
        "prometheus_url",
        TEXT,
        None,
        "base URL of the Prometheus HTTP API (for --source prometheus)",
        "sources",
    ),
    _opt(
        "prometheus_namespace_label",
        TEXT,
        "namespace",
        "Prometheus label holding the pod namespace",
        "sources",
    ),
    _opt("prometheus_pod_label", TEXT, "pod", "Prometheus label holding the pod name", "sources"),
    _opt(
        "prometheus_owner_label",
        TEXT,
        "deployment",
        "Prometheus label holding the owner Deployment",
        "sources",
    ),
    _opt(
        "scrape_interval",
        duration(),
        "5s",
        "time between scrapes / Prometheus queries",
        "sources",
    ),
    _opt(
        "scrape_timeout",
        duration(),
        "3s",
        "total deadline of one scrape (connect, headers and body)",
        "sources",
    ),
    _opt("scrape_concurrency", integer(1), "32", "scrapes in flight at once", "sources"),
    _opt("max_scrape_bytes", integer(1), str(8 << 20), "largest /metrics body accepted", "sources"),
    _opt(
        "metrics_config",
        PATH,
        None,
        "metric catalogue YAML (default: built-in EDL catalogue); reloaded when it changes",
        "metrics",
    ),
    _opt(
        "reload_interval",
        duration(),
        "2s",
        "how often the catalogue, static files and the serving certificate are checked for changes",
        "metrics",
    ),
    _opt(
        "stale_after",
        duration(),
        None,
        "age after which a pod's value is no longer served (default: "
        f"{STALE_AFTER_INTERVALS} x interval, min {format_duration(STALE_AFTER_MIN_S)})",
        "metrics",
    ),
    _opt(
        "expire_after",
        duration(),
        None,
        "age after which a silent pod's samples are dropped (default: 2 x window + stale)",
        "metrics",
    ),
    _opt(
        "samples_per_series",
        integer(1),
        None,
        "samples kept per series (default: longest window / interval + 2, at most "
        f"{MAX_SAMPLES_PER_SERIES})",
        "metrics",
    ),
    _opt(
        "max_series_per_pod",
        integer(1),
        "500",
        "label sets kept per pod (new ones beyond are refused, counted and logged)",
        "metrics",
    ),
    _opt(
        "series_prune_after",
        duration(),
        None,
        "drop a label set a pod stopped exposing after this (default: the longest window)",
        "metrics",
    ),
    _opt("sizing", SWITCH, None, "run the sizer and serve desired_replicas", "sizing"),
    _opt(
        "sizing_capacity",
        choice(*sorted(CAPACITY_SOURCES)),
        "kubernetes",
        "capacity source: kubernetes (watch Nodes, Pods, PriorityClasses, trainer "
        "Deployments) or static (a file)",
        "sizing",
    ),
    _opt(
        "sizing_capacity_file",
        PATH,
        None,
        "cluster description YAML (for --sizing-capacity static; re-read when it changes)",
        "sizing",
    ),
    _opt(
        "sizing_history",
        choice(*sorted(HISTORY_STORES)),
        "configmap",
        "where the per-size history lives: configmap (shared by replicas, survives restarts) "
        "or memory",
        "sizing",
    ),
    _opt(
        "sizing_history_configmap",
        TEXT,
        "edl-sizing-history",
        "history ConfigMap name",
        "sizing",
    ),
    _opt(
        "sizing_history_namespace",
        TEXT,
        None,
        "history ConfigMap namespace (default: the adapter's own, else "
        f"{FALLBACK_HISTORY_NAMESPACE})",
        "sizing",
    ),
    _opt(
        "sizing_interval",
        duration(),
        format_duration(defaults.ROUND_INTERVAL_S),
        "time between sizing decisions",
        "sizing",
    ),
    _opt(
        "sizing_history_interval",
        duration(),
        format_duration(defaults.HISTORY_INTERVAL_S),
        "time between writes of new observations",
        "sizing",
    ),
    _opt(
        "sizing_headroom",
        RESOURCES,
        None,
        "room kept free on every node, e.g. cpu=250m,memory=512Mi",
        "sizing",
    ),
    _opt(
        "sizing_hold_off",
        duration(),
        format_duration(_POLICY.hold_off_s),
        "no growth within this time of a job's last growth",
        "sizing",
    ),
    _opt(
        "sizing_payback",
        duration(),
        format_duration(_POLICY.payback_s),
        "a growth must pay back its rescale pause within this",
        "sizing",
    ),
    _opt(
        "sizing_exploration",
        number(1),
        f"{_POLICY.exploration:g}",
        "never grow beyond this multiple of the largest size measured",
        "sizing",
    ),
    _opt(
        "sizing_default_max_workers",
        integer(1),
        str(defaults.DEFAULT_MAX_WORKERS),
        "max workers of a job without the max-workers annotation",
        "sizing",
    ),
    _opt(
        "sizing_kueue",
        SWITCH,
        None,
        "read Kueue's ClusterQueues and LocalQueues: a job labelled kueue.x-k8s.io/queue-name "
        "is never planned a worker its ClusterQueue would leave waiting",
        "sizing",
    ),
    _opt("authentication", _AUTH_MODES, "delegated", "none or delegated", "security"),
    _opt("authorization", _AUTH_MODES, "delegated", "none or delegated", "security"),
    _opt(
        "requestheader_client_ca_file",
        PATH,
        None,
        "CA of the front-proxy client cert "
        "(default: from kube-system/extension-apiserver-authentication)",
        "security",
    ),
    _opt(
        "requestheader_allowed_names",
        LIST,
        None,
        "allowed front-proxy CN (repeatable or comma list; none = any CN of the CA)",
        "security",
    ),
    _opt(
        "requestheader_username_headers",
        LIST,
        "X-Remote-User",
        "user name headers (repeatable)",
        "security",
    ),
    _opt(
        "requestheader_group_headers",
        LIST,
        "X-Remote-Group",
        "group headers (repeatable)",
        "security",
    ),
    _opt(
        "requestheader_extra_headers_prefix",
        LIST,
        "X-Remote-Extra-",
        "extra header prefixes (repeatable)",
        "security",
    ),
    _opt(
        "client_ca_file",
        PATH,
        None,
        "CA for x509 client certificates (user = CN, groups = O)",
        "security",
    ),
    _opt(
        "authentication_kubeconfig",
        PATH,
        None,
        "kubeconfig for TokenReview and the auth ConfigMap (default: --kubeconfig / in-cluster)",
        "security",
    ),
    _opt(
        "authorization_kubeconfig",
        PATH,
        None,
        "kubeconfig for SubjectAccessReview (default: --kubeconfig / in-cluster)",
        "security",
    ),
    _opt(
        "authentication_skip_lookup",
        SWITCH,
        None,
        "do not read the auth ConfigMap from the cluster",
        "security",
    ),
    _opt(
        "auth_config_refresh",
        duration(),
        "60s",
        "how often the auth ConfigMap is re-read (rotated CAs and allowed names apply without a "
        "restart)",
        "security",
        flag="--authentication-config-refresh",
    ),
    _opt(
        "auth_cache_ttl",
        duration(),
        "10s",
        "how long TokenReview/SubjectAccessReview answers are cached",
        "security",
    ),
)
"""Every option of ``edl-adapter serve``, in the order ``--help`` shows them."""


def settings_from(values: Mapping[str, Any]) -> AdapterSettings:
    """`AdapterSettings` from `edl_common.options.read(OPTIONS, ...)` values."""
    fields = dict(values)
    fields["tls"] = not fields.pop("no_tls")
    fields["authentication"] = AuthMode(fields["authentication"])
    fields["authorization"] = AuthMode(fields["authorization"])
    fields["sizing_headroom"] = fields["sizing_headroom"] or Resources()
    for name, value in values.items():
        if isinstance(value, tuple):
            fields[name] = list(value)
        elif value is None and name in ("requestheader_allowed_names",):
            fields[name] = []
    for name in ("access_log", "sizing", "authentication_skip_lookup"):
        fields[name] = bool(fields[name])
    return AdapterSettings(**fields)


def default_settings(**changes: Any) -> AdapterSettings:
    """The table's defaults (no flag, no variable read) with `changes` to fields.

    For code that builds settings itself (tests, benchmarks): the defaults stay written once,
    in `OPTIONS`.

    Raises:
        ConfigError: a change breaks a rule of `AdapterSettings`.
    """
    return dataclasses.replace(settings_from(read(OPTIONS, {}, {})), **changes)
