"""``edl-adapter``: the EDL custom/external metrics API server.

Every option of ``serve`` also reads an environment variable ``EDL_ADAPTER_<OPTION>``
(upper case, dashes as underscores), e.g. ``EDL_ADAPTER_SCRAPE_INTERVAL=2s``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import metrics_adapter
from metrics_adapter.auth.trust import ClientTrust, TlsClientTrust, trust_from_configmap
from metrics_adapter.durations import parse_duration
from metrics_adapter.errors import ConfigError, SourceError
from metrics_adapter.kube_client import make_api_client
from metrics_adapter.settings import AdapterSettings, AuthMode, SourceKind
from metrics_adapter.sizing.resources import RESOURCE_NAMES, Resources

ENV_PREFIX = "EDL_ADAPTER_"
log = logging.getLogger("metrics_adapter")


def _env(dest: str) -> str:
    return ENV_PREFIX + dest.upper()


def _add(group: Any, flag: str, help_text: str, default: Any = None, **kwargs: Any) -> None:
    dest = flag.lstrip("-").replace("-", "_")
    env = os.environ.get(_env(dest))
    action = kwargs.get("action")
    if env is not None:
        if action == "store_true":
            default = env.lower() in ("1", "true", "yes", "on")
        elif action == "append":
            default = [v for v in env.split(",") if v]
        else:
            default = env
    shown = f" (env {_env(dest)}" + (
        f"; default {default!r})" if default not in (None, False, []) else ")"
    )
    group.add_argument(flag, dest=dest, default=default, help=help_text + shown, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    """The ``edl-adapter`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="edl-adapter",
        description="EDL metrics adapter: serves training metrics to the Kubernetes HPA "
        "through custom.metrics.k8s.io (v1beta1, v1beta2) and external.metrics.k8s.io.",
    )
    parser.add_argument(
        "--version", action="version", version=f"edl-adapter {metrics_adapter.__version__}"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser(
        "serve",
        help="run the API server",
        description="Run the aggregated metrics API server (HTTPS by default). Every option "
        f"can also be set with an environment variable {ENV_PREFIX}<OPTION>.",
    )
    d = AdapterSettings()
    net = serve.add_argument_group("serving")
    _add(net, "--host", "address to listen on", d.host)
    _add(net, "--port", "port to listen on", d.port, type=int)
    _add(
        net,
        "--tls-cert-file",
        "serving certificate (PEM); without cert and key a self-signed one is generated",
    )
    _add(net, "--tls-private-key-file", "serving private key (PEM)")
    _add(
        net,
        "--cert-dir",
        "directory for the generated self-signed certificate (default: a temp dir)",
    )
    _add(
        net,
        "--no-tls",
        "serve plain HTTP (benchmarks only: the aggregator requires TLS)",
        False,
        action="store_true",
    )
    _add(net, "--threads", "threads running the app (one process)", d.threads, type=int)
    _add(net, "--log-level", "log level (debug, info, warning, error)", d.log_level)
    _add(net, "--access-log", "log every request to stderr", False, action="store_true")
    limits = serve.add_argument_group(
        "limits", "Deadlines and sizes against slow or hostile clients (docs/metrics-api.md)."
    )
    _add(limits, "--tls-handshake-timeout", "deadline of a TLS handshake", "10s")
    _add(limits, "--request-header-timeout", "deadline of a request's headers (then 408)", "10s")
    _add(limits, "--idle-timeout", "how long a keep-alive connection may idle", "90s")
    _add(limits, "--write-timeout", "how long a client may take to read a response", "30s")
    _add(
        limits,
        "--max-connections",
        "open connections at most (more are closed at accept)",
        d.max_connections,
        type=int,
    )
    _add(
        limits,
        "--max-requests-inflight",
        "requests queued or running at most (more get 429)",
        d.max_requests_inflight,
        type=int,
    )
    _add(
        limits,
        "--max-header-bytes",
        "largest request head (then 431; a longer request line 414)",
        d.max_header_bytes,
        type=int,
    )

    src = serve.add_argument_group("sources")
    _add(
        src,
        "--source",
        "where pods and samples come from",
        d.source.value,
        choices=[k.value for k in SourceKind],
    )
    _add(
        src,
        "--static-file",
        "YAML list of pods (for --source static; with --source prometheus it replaces "
        "label-derived pods)",
    )
    _add(
        src,
        "--kubeconfig",
        "kubeconfig for the Kubernetes source and delegated auth (default: in-cluster)",
    )
    _add(src, "--pod-selector", "label selector of the trainer pods to watch", d.pod_selector)
    _add(src, "--namespace", "namespace to watch (default: all namespaces)")
    _add(src, "--metrics-port", "port of each pod's agent /metrics", d.metrics_port, type=int)
    _add(
        src,
        "--metrics-port-annotation",
        "pod annotation overriding --metrics-port",
        d.metrics_port_annotation,
    )
    _add(src, "--metrics-path", "path of the agent's metrics endpoint", d.metrics_path)
    _add(src, "--prometheus-url", "base URL of the Prometheus HTTP API (for --source prometheus)")
    _add(
        src,
        "--prometheus-namespace-label",
        "Prometheus label holding the pod namespace",
        d.prometheus_namespace_label,
    )
    _add(
        src,
        "--prometheus-pod-label",
        "Prometheus label holding the pod name",
        d.prometheus_pod_label,
    )
    _add(
        src,
        "--prometheus-owner-label",
        "Prometheus label holding the owner Deployment",
        d.prometheus_owner_label,
    )
    _add(
        src, "--scrape-interval", "time between scrapes / Prometheus queries (e.g. 1s, 500ms)", "5s"
    )
    _add(src, "--scrape-timeout", "total deadline of one scrape", "3s")
    _add(src, "--scrape-concurrency", "scrapes in flight at once", d.scrape_concurrency, type=int)
    _add(src, "--max-scrape-bytes", "largest /metrics body accepted", d.max_scrape_bytes, type=int)

    store = serve.add_argument_group("metrics")
    _add(
        store,
        "--metrics-config",
        "metric catalogue YAML (default: built-in EDL catalogue); reloaded when it changes",
    )
    _add(
        store,
        "--reload-interval",
        "how often the catalogue and static files are checked for changes",
        "2s",
    )
    _add(
        store,
        "--stale-after",
        "age after which a pod's value is no longer served (default: 3 x interval, min 15s)",
    )
    _add(
        store,
        "--expire-after",
        "age after which a silent pod's samples are dropped (default: 2 x window + stale)",
    )
    _add(
        store,
        "--samples-per-series",
        "samples kept per series (default: enough for the longest window)",
        type=int,
    )
    _add(
        store,
        "--max-series-per-pod",
        "label sets kept per pod (new ones beyond are refused, counted and logged)",
        d.max_series_per_pod,
        type=int,
    )
    _add(
        store,
        "--series-prune-after",
        "drop a label set a pod stopped exposing after this (default: the longest window)",
    )

    _add_sizing_options(serve, d)

    auth = serve.add_argument_group(
        "security",
        "Delegated auth (default) follows kube-apiserver: requestheader mTLS from the aggregator, "
        "x509 client certs, bearer tokens by TokenReview, SubjectAccessReview for every request "
        "(cached). Use '--authentication none --authorization none' ONLY for local demos/tests: "
        "anyone who can reach the port can then read every metric.",
    )
    _add(
        auth,
        "--authentication",
        "none or delegated",
        d.authentication.value,
        choices=[m.value for m in AuthMode],
    )
    _add(
        auth,
        "--authorization",
        "none or delegated",
        d.authorization.value,
        choices=[m.value for m in AuthMode],
    )
    _add(
        auth,
        "--requestheader-client-ca-file",
        "CA of the front-proxy client cert "
        "(default: from kube-system/extension-apiserver-authentication)",
    )
    _add(
        auth,
        "--requestheader-allowed-names",
        "allowed front-proxy CN (repeatable or comma list; none = any CN of the CA)",
        [],
        action="append",
    )
    _add(
        auth,
        "--requestheader-username-headers",
        "user name headers (repeatable)",
        [],
        action="append",
    )
    _add(auth, "--requestheader-group-headers", "group headers (repeatable)", [], action="append")
    _add(
        auth,
        "--requestheader-extra-headers-prefix",
        "extra header prefixes (repeatable)",
        [],
        action="append",
    )
    _add(auth, "--client-ca-file", "CA for x509 client certificates (user = CN, groups = O)")
    _add(
        auth,
        "--authentication-kubeconfig",
        "kubeconfig for TokenReview and the auth ConfigMap (default: --kubeconfig / in-cluster)",
    )
    _add(
        auth,
        "--authorization-kubeconfig",
        "kubeconfig for SubjectAccessReview (default: --kubeconfig / in-cluster)",
    )
    _add(
        auth,
        "--authentication-skip-lookup",
        "do not read the auth ConfigMap from the cluster",
        False,
        action="store_true",
    )
    _add(
        auth,
        "--authentication-config-refresh",
        "how often the auth ConfigMap is re-read (rotated CAs apply without a restart)",
        "60s",
    )
    _add(
        auth,
        "--auth-cache-ttl",
        "how long TokenReview/SubjectAccessReview answers are cached",
        "10s",
    )
    return parser


def _add_sizing_options(serve: Any, d: AdapterSettings) -> None:
    from metrics_adapter.sizing.backends import CAPACITY_SOURCES, HISTORY_STORES

    g = serve.add_argument_group(
        "sizing",
        "Resource-aware sizing (docs/sizing.md): decide every job's size from the cluster's "
        "free capacity and serve it as the External metric desired_replicas.",
    )
    _add(g, "--sizing", "run the sizer and serve desired_replicas", False, action="store_true")
    _add(
        g,
        "--sizing-capacity",
        "capacity source",
        d.sizing_capacity,
        choices=sorted(CAPACITY_SOURCES),
    )
    _add(
        g,
        "--sizing-capacity-file",
        "cluster description YAML (for --sizing-capacity static; re-read when it changes)",
    )
    _add(g, "--sizing-history", "history store", d.sizing_history, choices=sorted(HISTORY_STORES))
    _add(g, "--sizing-history-configmap", "history ConfigMap name", d.sizing_history_configmap)
    _add(
        g,
        "--sizing-history-namespace",
        "history ConfigMap namespace (default: the adapter's own, else edl-system)",
    )
    _add(g, "--sizing-interval", "time between sizing decisions", "10s")
    _add(g, "--sizing-history-interval", "time between writes of new observations", "30s")
    _add(g, "--sizing-headroom", "room kept free on every node, e.g. cpu=250m,memory=512Mi", "")
    _add(g, "--sizing-hold-off", "no growth within this time of a job's last growth", "60s")
    _add(g, "--sizing-payback", "a growth must pay back its rescale pause within this", "5m")
    _add(
        g,
        "--sizing-exploration",
        "never grow beyond this multiple of the largest size measured",
        d.sizing_exploration,
        type=float,
    )
    _add(
        g,
        "--sizing-default-max-workers",
        "max workers of a job without the max-workers annotation",
        d.sizing_default_max_workers,
        type=int,
    )


def _headroom(text: str) -> Resources:
    """``cpu=250m,memory=512Mi`` -> Resources."""
    pairs: dict[str, str] = {}
    for part in (p.strip() for p in str(text or "").split(",")):
        if not part:
            continue
        name, sep, value = part.partition("=")
        if not sep or name.strip() not in RESOURCE_NAMES:
            raise ConfigError(
                f"--sizing-headroom: {part!r} is not <resource>=<quantity> "
                f"(resources: {', '.join(RESOURCE_NAMES)})"
            )
        pairs[name.strip()] = value.strip()
    try:
        return Resources.parse(pairs)
    except ValueError as e:
        raise ConfigError(f"--sizing-headroom: {e}") from e


def _path(value: Any) -> Path | None:
    return Path(value) if value else None


def _list(values: list[str], default: list[str]) -> list[str]:
    flat = [v.strip() for item in values for v in str(item).split(",") if v.strip()]
    return flat or default


def settings_from_args(args: argparse.Namespace) -> AdapterSettings:
    """Turn parsed arguments into settings.

    Raises:
        ConfigError: on invalid values.
    """
    try:
        return AdapterSettings(
            host=args.host,
            port=int(args.port),
            tls=not args.no_tls,
            tls_cert_file=_path(args.tls_cert_file),
            tls_private_key_file=_path(args.tls_private_key_file),
            cert_dir=_path(args.cert_dir),
            source=SourceKind(args.source),
            static_file=_path(args.static_file),
            kubeconfig=_path(args.kubeconfig),
            pod_selector=args.pod_selector,
            namespace=args.namespace or None,
            metrics_port=int(args.metrics_port),
            metrics_port_annotation=args.metrics_port_annotation,
            metrics_path=args.metrics_path,
            prometheus_url=args.prometheus_url,
            prometheus_namespace_label=args.prometheus_namespace_label,
            prometheus_pod_label=args.prometheus_pod_label,
            prometheus_owner_label=args.prometheus_owner_label,
            scrape_interval=parse_duration(args.scrape_interval),
            scrape_timeout=parse_duration(args.scrape_timeout),
            scrape_concurrency=int(args.scrape_concurrency),
            max_scrape_bytes=int(args.max_scrape_bytes),
            stale_after=parse_duration(args.stale_after) if args.stale_after else None,
            expire_after=parse_duration(args.expire_after) if args.expire_after else None,
            samples_per_series=int(args.samples_per_series) if args.samples_per_series else None,
            metrics_config=_path(args.metrics_config),
            reload_interval=parse_duration(args.reload_interval),
            authentication=AuthMode(args.authentication),
            authorization=AuthMode(args.authorization),
            requestheader_client_ca_file=_path(args.requestheader_client_ca_file),
            requestheader_allowed_names=_list(args.requestheader_allowed_names, []),
            requestheader_username_headers=_list(
                args.requestheader_username_headers, ["X-Remote-User"]
            ),
            requestheader_group_headers=_list(args.requestheader_group_headers, ["X-Remote-Group"]),
            requestheader_extra_headers_prefix=_list(
                args.requestheader_extra_headers_prefix, ["X-Remote-Extra-"]
            ),
            client_ca_file=_path(args.client_ca_file),
            authentication_kubeconfig=_path(args.authentication_kubeconfig),
            authorization_kubeconfig=_path(args.authorization_kubeconfig),
            authentication_skip_lookup=bool(args.authentication_skip_lookup),
            auth_cache_ttl=parse_duration(args.auth_cache_ttl),
            auth_config_refresh=parse_duration(args.authentication_config_refresh),
            threads=int(args.threads),
            log_level=str(args.log_level).lower(),
            access_log=bool(args.access_log),
            tls_handshake_timeout=parse_duration(args.tls_handshake_timeout),
            request_header_timeout=parse_duration(args.request_header_timeout),
            idle_timeout=parse_duration(args.idle_timeout),
            write_timeout=parse_duration(args.write_timeout),
            max_connections=int(args.max_connections),
            max_requests_inflight=int(args.max_requests_inflight),
            max_header_bytes=int(args.max_header_bytes),
            max_series_per_pod=int(args.max_series_per_pod),
            series_prune_after=(
                parse_duration(args.series_prune_after) if args.series_prune_after else None
            ),
            sizing=bool(args.sizing),
            sizing_capacity=str(args.sizing_capacity),
            sizing_capacity_file=_path(args.sizing_capacity_file),
            sizing_history=str(args.sizing_history),
            sizing_history_configmap=str(args.sizing_history_configmap),
            sizing_history_namespace=args.sizing_history_namespace or None,
            sizing_interval=parse_duration(args.sizing_interval),
            sizing_history_interval=parse_duration(args.sizing_history_interval),
            sizing_headroom=_headroom(args.sizing_headroom),
            sizing_hold_off=parse_duration(args.sizing_hold_off),
            sizing_payback=parse_duration(args.sizing_payback),
            sizing_exploration=float(args.sizing_exploration),
            sizing_default_max_workers=int(args.sizing_default_max_workers),
        )
    except (ValueError, TypeError) as e:
        raise ConfigError(str(e)) from e


def resolve_trust(settings: AdapterSettings) -> ClientTrust:
    """Client-certificate trust: files first, else the cluster's auth ConfigMap."""
    trust = ClientTrust(
        allowed_names=settings.requestheader_allowed_names,
        username_headers=settings.requestheader_username_headers,
        group_headers=settings.requestheader_group_headers,
        extra_prefixes=settings.requestheader_extra_headers_prefix,
    )
    if settings.authentication is AuthMode.NONE:
        return trust
    try:
        if settings.requestheader_client_ca_file:
            trust.requestheader_ca_pem = settings.requestheader_client_ca_file.read_bytes()
        if settings.client_ca_file:
            trust.client_ca_pem = settings.client_ca_file.read_bytes()
    except OSError as e:
        raise ConfigError(f"cannot read a client CA file: {e}") from e
    if trust.requestheader_ca_pem or trust.client_ca_pem or settings.authentication_skip_lookup:
        return trust
    try:
        client = make_api_client(settings.authentication_kubeconfig or settings.kubeconfig)
        found = trust_from_configmap(client)
    except SourceError as e:
        log.warning("no requestheader CA (%s): front-proxy requests will be anonymous", e)
        return trust
    if settings.requestheader_allowed_names:
        found.allowed_names = settings.requestheader_allowed_names
    return found


def serve(settings: AdapterSettings) -> int:
    """Validate, prepare TLS, and run the server until terminated."""
    from metrics_adapter.runtime import AdapterRuntime, load_catalogue
    from metrics_adapter.server import AdapterServer
    from metrics_adapter.sources.static import load_static_pods
    from metrics_adapter.tls import ensure_serving_cert, server_context

    load_catalogue(settings)  # fail fast, before forking a worker
    if settings.source is SourceKind.STATIC and settings.static_file is None:
        raise ConfigError("--source static needs --static-file")
    if settings.source is SourceKind.PROMETHEUS and not settings.prometheus_url:
        raise ConfigError("--source prometheus needs --prometheus-url")
    if settings.static_file is not None:
        load_static_pods(settings.static_file)
    if settings.sizing:
        from metrics_adapter.sizing import backends

        backends.check(settings)
        needs_cluster = {settings.sizing_capacity, settings.sizing_history} & {
            "kubernetes",
            "configmap",
        }
        if needs_cluster:
            try:
                make_api_client(settings.kubeconfig)
            except SourceError as e:
                raise ConfigError(
                    f"--sizing with {' and '.join(sorted(needs_cluster))} needs a cluster: {e} "
                    "(without one: --sizing-capacity static --sizing-history memory)"
                ) from e
    if settings.source is SourceKind.KUBERNETES:
        try:
            make_api_client(settings.kubeconfig)
        except SourceError as e:
            raise ConfigError(f"--source kubernetes needs a cluster: {e}") from e
    if settings.authorization is AuthMode.DELEGATED:
        try:
            make_api_client(settings.authorization_kubeconfig or settings.kubeconfig)
        except SourceError as e:
            raise ConfigError(
                f"--authorization delegated needs a cluster: {e} "
                "(for a local demo or test use --authentication none --authorization none)"
            ) from e
    if settings.authentication is AuthMode.NONE:
        log.warning("--authentication none: every caller is anonymous (local demos/tests only)")
    if settings.authorization is AuthMode.NONE:
        log.warning(
            "--authorization none: every request is allowed; anyone who can reach the port "
            "reads every metric (local demos/tests only)"
        )
    trust = resolve_trust(settings)
    tls_trust = TlsClientTrust()
    cert = None
    context_factory = None
    if settings.tls:
        try:
            cert = ensure_serving_cert(
                settings.tls_cert_file, settings.tls_private_key_file, settings.cert_dir
            )
        except ValueError as e:
            raise ConfigError(str(e)) from e
        ca_bundle = trust.ca_bundle()

        def context_factory() -> Any:
            context = server_context(cert, ca_bundle)
            tls_trust.attach(context)
            return context

        context_factory()  # fail fast on unreadable cert/key
    else:
        log.warning("serving plain HTTP: the Kubernetes aggregator cannot use this server")

    def app_factory() -> Any:
        runtime = AdapterRuntime(settings, trust, tls_trust=tls_trust)
        runtime.start()
        return runtime.app

    AdapterServer(settings, app_factory, cert, context_factory).run()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``edl-adapter``."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        settings = settings_from_args(args)
        return serve(settings)
    except (ConfigError, SourceError) as e:
        print(f"edl-adapter: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
