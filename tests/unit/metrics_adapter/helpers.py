"""Builds a real adapter app around an in-memory pod registry and store with a manual clock."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from flask import Flask
from prometheus_client import CollectorRegistry

from metrics_adapter.api.flask_app import create_app
from metrics_adapter.auth.authn import Authenticator, DelegatingAuthenticator
from metrics_adapter.auth.authz import AlwaysAllowAuthorizer, Authorizer
from metrics_adapter.auth.identity import Credentials, UserInfo
from metrics_adapter.errors import AuthError
from metrics_adapter.options import default_settings
from metrics_adapter.providers.scraped_pods import ScrapedPodsProvider
from metrics_adapter.scraping.catalogue import CatalogueHolder, MetricCatalogue
from metrics_adapter.scraping.evaluator import MetricEvaluator
from metrics_adapter.scraping.pod_registry import OwnerRef, PodRegistry, PodTarget
from metrics_adapter.scraping.store import MetricStore, Sample
from metrics_adapter.selfmetrics import AdapterMetrics

T0 = 1_800_000_000.0


class ManualClock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def trainer(name: str, ns: str = "ml", deployment: str = "trainer", **labels: str) -> PodTarget:
    return PodTarget(
        namespace=ns,
        name=name,
        labels={"app": deployment, **labels},
        owners=(
            OwnerRef("ReplicaSet", "apps", f"{deployment}-7d9f"),
            OwnerRef("Deployment", "apps", deployment),
        ),
        node="node-1",
    )


def agent_samples(
    samples: float, steps: float, util: tuple[float, ...] = (0.8, 0.6)
) -> list[Sample]:
    out = [
        Sample("edl_trainer_samples_total", {}, samples),
        Sample("edl_trainer_steps_total", {}, steps),
        Sample("edl_trainer_step_duration_seconds_sum", {}, steps * 0.25),
        Sample("edl_trainer_step_duration_seconds_count", {}, steps),
        Sample("edl_trainer_comm_seconds_total", {}, steps * 0.05),
        Sample("edl_trainer_process_cpu_seconds_total", {}, steps * 0.5),
    ]
    out += [Sample("edl_gpu_utilization_ratio", {"gpu": str(i)}, u) for i, u in enumerate(util)]
    return out


@dataclass
class Harness:
    app: Flask
    clock: ManualClock
    pods: PodRegistry
    store: MetricStore
    catalogue: CatalogueHolder
    metrics: AdapterMetrics
    provider: ScrapedPodsProvider

    def feed(self, pod: PodTarget, samples: list[Sample]) -> None:
        self.store.ingest(pod.key, samples)


def build(
    pods: list[PodTarget],
    authenticator: DelegatingAuthenticator | None = None,
    authorizer: Authorizer | None = None,
    catalogue: MetricCatalogue | None = None,
) -> Harness:
    clock = ManualClock()
    registry = PodRegistry()
    registry.replace_all(pods)
    store = MetricStore(capacity=16, expire_after=120.0, clock=clock)
    holder = CatalogueHolder(catalogue or MetricCatalogue.default())
    service = ScrapedPodsProvider(registry, MetricEvaluator(store, 30.0, clock), holder)
    metrics = AdapterMetrics(CollectorRegistry())
    chain: list[Authenticator] = []
    app = create_app(
        default_settings(),
        service,
        metrics,
        authenticator or DelegatingAuthenticator(chain),
        authorizer or AlwaysAllowAuthorizer(),
        ready=lambda: registry.synced,
        clock=clock,
    )
    return Harness(app, clock, registry, store, holder, metrics, service)


def trainers_at_ten_samples(count: int, authorizer: Authorizer | None = None) -> Harness:
    """``count`` trainer pods of ``ml/trainer``, each scraped twice 10 s apart: 10 samples/s."""
    pods = [trainer(f"trainer-{i}") for i in range(count)]
    h = build(pods, authorizer=authorizer)
    for p in pods:
        h.feed(p, agent_samples(0, 0))
    h.clock.t += 10
    for p in pods:
        h.feed(p, agent_samples(100, 10))
    return h


def standard() -> Harness:
    """Three trainer pods of Deployment `trainer` in `ml` (two with data) and one of `other`."""
    pods = [
        trainer("trainer-0"),
        trainer("trainer-1"),
        trainer("trainer-2"),
        trainer("other-0", deployment="other"),
    ]
    h = build(pods)
    # two scrapes 10 s apart: trainer-0 100 samples/s, 4 steps/s; trainer-1 50 samples/s.
    h.feed(pods[0], agent_samples(1000, 40))
    h.feed(pods[1], agent_samples(500, 20))
    h.feed(pods[3], agent_samples(0, 0))
    h.clock.t += 10
    h.feed(pods[0], agent_samples(2000, 80))
    h.feed(pods[1], agent_samples(1000, 40, util=(0.4, 0.2)))
    h.feed(pods[3], agent_samples(300, 10))
    return h


def creds(der: bytes | None = None, **headers: str | Sequence[str]) -> Credentials:
    lists = {
        k.replace("_", "-").lower(): (v,) if isinstance(v, str) else tuple(v)
        for k, v in headers.items()
    }
    return Credentials({k: v[0] for k, v in lists.items()}, lists, der)


class FakeTokenReviewer:
    """The TokenReview seam (the real one calls the cluster)."""

    def __init__(self) -> None:
        self.calls = 0
        self.fail = False

    def review(self, token: str) -> UserInfo | None:
        self.calls += 1
        if self.fail:
            raise AuthError("apiserver down")
        return UserInfo("bob", ("devs",)) if token == "good" else None
