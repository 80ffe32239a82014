"""``edl-adapter``: the EDL custom/external metrics API server.

Every option of ``serve`` also reads an environment variable ``EDL_ADAPTER_<OPTION>``
(upper case, dashes as underscores), e.g. ``EDL_ADAPTER_SCRAPE_INTERVAL=2s``; the table is
`metrics_adapter.options`. A bad value, flag or variable, is one ``edl-adapter: error:`` line
and exit status 2.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import metrics_adapter
from edl_common.environment import unknown_variables
from edl_common.error_boundary import EXIT_FAILURE, EXIT_USAGE, ErrorExit, run_command
from edl_common.http.memory import MemoryBudget, container_memory_limit
from edl_common.logs import (
    add_log_format_argument,
    configure_logging,
    json_chosen,
    log_format,
    tool_logger,
)
from edl_common.options import Parser, add_arguments, read
from metrics_adapter.auth.trust import ClientTrust, TlsClientTrust, trust_from_configmap
from metrics_adapter.errors import ConfigError, SourceError
from metrics_adapter.kube.client import make_api_client
from metrics_adapter.options import ENV_PREFIX, GROUPS, OPTIONS, settings_from
from metrics_adapter.preflight import Refused
from metrics_adapter.settings import AdapterSettings, AuthMode

log = logging.getLogger("metrics_adapter")


def build_parser() -> argparse.ArgumentParser:
    """The ``edl-adapter`` argument parser (every option from `metrics_adapter.options`)."""
    parser = Parser(
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
    add_arguments(serve, OPTIONS, GROUPS)
    add_log_format_argument(serve)
    preflight = sub.add_parser(
        "preflight",
        help="check that an install takes over no other adapter's APIService",
        description="Reads rendered manifests (e.g. `kubectl kustomize manifests/base`) and "
        "exits 1 when one of their APIServices is served by another Service in the cluster.",
    )
    preflight.add_argument("-f", "--filename", required=True, help="manifests file, - for stdin")
    preflight.add_argument("--kubeconfig", type=Path, help="default: $KUBECONFIG, ~/.kube/config")
    preflight.add_argument("--take-over", action="store_true", help="warn instead of refusing")
    add_log_format_argument(preflight)
    return parser


def run_preflight(args: argparse.Namespace) -> int:
    """`edl-adapter preflight`: its result on stdout, its warnings logged; 0 when it passes.

    Raises:
        Refused: the install would take over another Service's APIService.
    """
    from metrics_adapter import preflight

    try:
        logger = tool_logger("edl-adapter", args.log_format, os.environ, _known(), sys.stderr)
    except ValueError as e:
        raise ConfigError(str(e)) from e
    source = sys.stdin if args.filename == "-" else None
    try:
        text = source.read() if source else Path(args.filename).read_text()
    except OSError as e:
        raise ConfigError(f"cannot read {args.filename}: {e.strerror}") from e
    kubeconfig: Path | None = args.kubeconfig or Path(
        os.environ.get("KUBECONFIG") or Path.home() / ".kube" / "config"
    )
    if not args.kubeconfig and kubeconfig is not None and not kubeconfig.is_file():
        kubeconfig = None  # in a pod: its ServiceAccount
    result, warnings = preflight.check(
        text, preflight.live_apiservices(make_api_client(kubeconfig)), args.take_over
    )
    for line in warnings:
        logger.warning("%s", line)
    print(result)
    return 0


def _known() -> set[str]:
    """The ``EDL_*`` variables `edl-adapter` reads (+ edl_common.environment's own)."""
    return {o.env for o in OPTIONS if o.env}


def settings_from_args(
    args: argparse.Namespace, env: Mapping[str, str] | None = None
) -> AdapterSettings:
    """Settings from parsed flags over ``EDL_ADAPTER_*`` variables (`env`, else os.environ).

    Raises:
        ConfigError: one line naming the flag or variable and what is wrong.
    """
    return settings_from(read(OPTIONS, vars(args), os.environ if env is None else env))


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
    from metrics_adapter.assembly import AdapterRuntime, load_catalogue
    from metrics_adapter.http.server import AdapterServer
    from metrics_adapter.http.tls import ensure_serving_cert, server_context
    from metrics_adapter.process_memory import tune_process_memory
    from metrics_adapter.scraping.sources.registry import source
    from metrics_adapter.scraping.sources.static import load_static_pods

    load_catalogue(settings)  # fail fast, before forking a worker
    source(settings.source).check(settings)
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
        except OSError as e:  # a read-only root with no writable /tmp or --cert-dir
            where = settings.cert_dir or "a temporary folder (TMPDIR, /tmp)"
            raise ConfigError(
                f"cannot write the self-signed serving certificate to {where}: {e.strerror}; "
                "mount a writable --cert-dir (an emptyDir) or pass --tls-cert-file and "
                "--tls-private-key-file"
            ) from e
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

    AdapterServer(
        settings,
        app_factory,
        cert,
        context_factory,
        tune_process_memory,
        memory=memory_budget(settings),
    ).run()
    return 0


def memory_budget(settings: AdapterSettings) -> MemoryBudget | None:
    """The budget admission keeps to: ``--memory-budget``, else the container's limit."""
    from metrics_adapter.process_memory import release_free_memory

    given = settings.memory_budget
    limit = given if given is not None else container_memory_limit()
    if not limit:
        log.info(
            "no memory budget (%s): connections are capped by count only",
            "--memory-budget 0" if given == 0 else "no container memory limit found",
        )
        return None
    budget = MemoryBudget(limit, reclaim=release_free_memory)
    log.info(
        "memory budget %d MiB (%s): new connections and request bodies without a verified "
        "client certificate are refused past %d MiB",
        limit >> 20,
        "--memory-budget" if given is not None else "the container's limit",
        budget.high_water >> 20,
    )
    return budget


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``edl-adapter``."""
    debug = False

    def command_line() -> int:
        nonlocal debug
        args = build_parser().parse_args(argv)
        if args.command == "preflight":
            return run_preflight(args)
        settings = settings_from_args(args)
        debug = settings.log_level.lower() == "debug"
        try:
            fmt = log_format(args.log_format, os.environ)
        except ValueError as e:
            raise ConfigError(str(e)) from e
        configure_logging(
            settings.log_level, fmt, "%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
        for line in unknown_variables(os.environ, _known()):
            log.warning("%s", line)
        return serve(settings)

    return run_command(
        "edl-adapter",
        command_line,
        [ErrorExit((SourceError,), EXIT_USAGE), ErrorExit((Refused,), EXIT_FAILURE)],
        debug=lambda: debug,
        json_logs=lambda: json_chosen(sys.argv[1:] if argv is None else argv, os.environ),
    )


if __name__ == "__main__":
    sys.exit(main())
