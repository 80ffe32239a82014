"""The sizer in the adapter: observations from scraped agents, rounds, serving, events, safety."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import replace

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from edl_sizing import (
    ClusterSnapshot,
    Job,
    MemoryHistoryStore,
    Node,
    Pod,
    Resources,
    SizeHistory,
    SizingPolicy,
    StaticCapacitySource,
)
from edl_sizing.events import JobEvent
from metrics_adapter.errors import NotFoundError, SourceError
from metrics_adapter.kube.selectors import LabelSelector
from metrics_adapter.providers.protocol import CustomMetricInfo, ExternalMetricInfo
from metrics_adapter.providers.sizing import DESIRED_REPLICAS, SizingProvider
from metrics_adapter.scraping.pod_registry import PodKey
from metrics_adapter.scraping.store import MetricStore, Sample
from metrics_adapter.sizing.kube_objects import JOB_LABEL, DeploymentRecord
from metrics_adapter.sizing.metrics import SizingMetrics
from metrics_adapter.sizing.observation import ThroughputObserver
from metrics_adapter.sizing.sizer import Sizer
from tests.support.waiting import wait_for

T0 = 1_800_000_000.0
GI = 2**30


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> float:
        return self.t


class Events:
    def __init__(self) -> None:
        self.seen: list[JobEvent] = []

    def record(self, event: JobEvent) -> None:
        self.seen.append(event)


def snapshot(replicas: int = 2, bound: int = 2, cpu: float = 4, **job: object) -> ClusterSnapshot:
    j = Job("ml", "trainer", Resources(cpu=1, memory=GI), replicas=replicas, max_replicas=4,
            **job)  # type: ignore[arg-type]  # fmt: skip
    pods = tuple(Pod("ml", f"trainer-{i}", j.worker, node="n1", job=j.key) for i in range(bound))
    nodes = (Node("n1", Resources(cpu=cpu, memory=64 * GI)),)
    return ClusterSnapshot(nodes, pods, (j,), job_names={j.key: "digits"})


def agents(store: MetricStore, clock: Clock, size: int, generation: int, rate: float,
           seconds: float = 12.0, pauses: tuple[float, float] = (0.0, 0.0)) -> None:  # fmt: skip
    """`size` agents of one world, scraped every second for `seconds`."""
    for step in range(int(seconds) + 1):
        for i in range(size):
            store.ingest(
                PodKey("ml", f"trainer-{i}"),
                [
                    Sample("edl_trainer_samples_total", {}, 1000 + rate / size * step),
                    Sample("edl_trainer_world_size", {}, size),
                    Sample("edl_trainer_generation", {}, generation),
                    Sample("edl_trainer_rescale_pause_seconds_count", {}, pauses[0]),
                    Sample("edl_trainer_rescale_pause_seconds_sum", {}, pauses[1]),
                ],
            )
        clock.t += 1.0
    clock.t -= 1.0


def build(source: StaticCapacitySource, clock: Clock, store: MetricStore | None = None,
          history: MemoryHistoryStore | None = None) -> tuple[Sizer, SizingProvider, Events,
                                                             CollectorRegistry]:  # fmt: skip
    events = Events()
    registry = CollectorRegistry()
    sizer = Sizer(
        source,
        history or MemoryHistoryStore(),
        SizingPolicy(hold_off_s=30.0),
        SizingMetrics(registry),
        events,
        clock,
        interval=1.0,
        history_interval=0.0,
        observer=ThroughputObserver(store, 10.0) if store is not None else None,
    )
    return sizer, SizingProvider(sizer, clock, max_age_s=30.0), events, registry


def served(provider: SizingProvider, selector: str = f"{JOB_LABEL}=digits") -> list[float]:
    items = provider.get_external_metric(
        "ml", LabelSelector.parse(selector), ExternalMetricInfo(DESIRED_REPLICAS)
    )
    return [p.value for p in items]


def test_serves_one_item_per_job_with_the_job_label() -> None:
    clock = Clock()
    measured = snapshot(observed={2: 180.0})
    sizer, provider, events, registry = build(StaticCapacitySource(measured), clock)
    assert served(provider) == []  # before the first round: no item (the HPA holds)
    sizer.run_once()
    items = provider.get_external_metric(
        "ml", LabelSelector.parse(f"{JOB_LABEL}=digits"), ExternalMetricInfo(DESIRED_REPLICAS)
    )
    assert [(p.metric, p.labels, p.value) for p in items] == [
        (DESIRED_REPLICAS, {JOB_LABEL: "digits"}, 4.0)
    ]
    assert served(provider, f"{JOB_LABEL}=other") == []
    assert (
        provider.get_external_metric(
            "other-ns",
            LabelSelector.parse(f"{JOB_LABEL}=digits"),
            ExternalMetricInfo(DESIRED_REPLICAS),
        )
        == []
    )
    text = generate_latest(registry).decode()
    assert (
        'edl_adapter_sizing_desired_replicas{deployment="trainer",job="digits",namespace="ml"} 4.0'
        in text
    )
    assert 'reason="at_max"} 1.0' in text and 'reason="hold_off"} 0.0' in text
    assert "edl_adapter_sizing_decisions_total 1.0" in text
    assert [e.reason for e in events.seen] == ["SizingGrow"]
    assert events.seen[0].message.startswith("grew to 4 (+2): 2 CPUs free on n1")


def test_a_stale_plan_is_not_served() -> None:
    clock = Clock()
    sizer, provider, _, _ = build(StaticCapacitySource(snapshot()), clock)
    sizer.run_once()
    clock.t += 31.0
    assert served(provider) == []
    assert provider.debug_page()["stale"] is True


def observing() -> tuple[Clock, MetricStore, MemoryHistoryStore, Sizer, SizingProvider]:
    """A sizer observing a scraped store, with its clock and the history it writes."""
    clock = Clock()
    store = MetricStore(64, 600.0, clock)
    history = MemoryHistoryStore()
    sizer, provider, _, _ = build(StaticCapacitySource(snapshot()), clock, store, history)
    return clock, store, history, sizer, provider


def scrape_two(store: MetricStore, samples_each: float, generation: int) -> None:
    """Both members of a world of 2 scraped once (no pause histogram)."""
    for i in range(2):
        store.ingest(
            PodKey("ml", f"trainer-{i}"),
            [
                Sample("edl_trainer_samples_total", {}, samples_each),
                Sample("edl_trainer_world_size", {}, 2),
                Sample("edl_trainer_generation", {}, generation),
            ],
        )


def test_throughput_is_observed_only_for_a_steady_world() -> None:
    clock, store, history, sizer, provider = observing()
    agents(store, clock, size=2, generation=3, rate=180.0, seconds=5)
    sizer.run_once()
    assert history.load().observed("ml/trainer") == {}  # 5 s of a 10 s window: not yet
    agents(store, clock, size=2, generation=3, rate=180.0, seconds=12)
    sizer.run_once()
    (x,) = history.load().observed("ml/trainer").values()
    assert abs(x - 180.0) < 1e-6
    assert provider.debug_page()["plan"]["jobs"][0]["curve"]["largestMeasured"] == 2


def test_the_new_worlds_start_up_is_not_measured_as_slow_training() -> None:
    """A rescale's start-up (the new world formed, no step yet) stays out of the rate."""
    clock, store, history, sizer, _ = observing()
    agents(store, clock, size=2, generation=3, rate=180.0, seconds=12)
    sizer.run_once()
    assert history.load().observed("ml/trainer") == {2: 180.0}
    # Generation 4 (still 2 workers) starts up for 6 s, then trains at 300 samples/s.
    done = 1000 + 90.0 * 12
    for _ in range(6):
        clock.t += 1.0
        scrape_two(store, done, generation=4)
    for step in range(1, 13):
        clock.t += 1.0
        scrape_two(store, done + 150.0 * step, generation=4)
        sizer.run_once()
        measured = history.load().observed("ml/trainer")[2]
        # Until it has trained a whole 10 s window the old figure stands; then only 300 counts
        # (a window from the generation's change would have folded in ~130-240 first).
        assert measured == 180.0 if step <= 10 else measured > 180.0, (step, measured)
    observed = history.load().observed("ml/trainer")[2]
    only_300 = [180.0 + 120.0 * (1 - 0.7**k) for k in (1, 2)]  # the history's mean, alpha 0.3
    assert any(observed == pytest.approx(x) for x in only_300), observed


def test_the_nodes_a_world_spans_are_observed_with_its_throughput() -> None:
    """Two workers on two nodes are recorded as such, not as "size 2" (the snapshot's nodes)."""
    clock = Clock()
    store = MetricStore(64, 600.0, clock)
    history = MemoryHistoryStore()
    two_nodes = snapshot()
    spread = tuple(replace(pod, node=f"n{i + 1}") for i, pod in enumerate(two_nodes.pods))
    nodes = (*two_nodes.nodes, Node("n2", Resources(cpu=4, memory=64 * GI)))
    source = StaticCapacitySource(replace(two_nodes, nodes=nodes, pods=spread))
    sizer, _, _, _ = build(source, clock, store, history)
    agents(store, clock, size=2, generation=3, rate=90.0, seconds=12)
    sizer.run_once()
    assert history.load().placed("ml/trainer") == {(2, 2): pytest.approx(90.0)}
    assert sizer.last_round is not None
    (job,) = sizer.last_round.jobs
    assert job.placed == {(2, 2): pytest.approx(90.0)} and job.observed == {}


def test_progress_and_planned_samples_reach_the_sizer() -> None:
    """``edl_job_progress_ratio``: the job's share trained; with its throughput over the same
    window, its planned samples (180 samples/s at 0.0009 of the job per second: 200,000)."""
    clock, store, history, sizer, _ = observing()
    for step in range(13):
        for i in range(2):
            store.ingest(
                PodKey("ml", f"trainer-{i}"),
                [
                    Sample("edl_trainer_samples_total", {}, 1000 + 90.0 * step),
                    Sample("edl_trainer_world_size", {}, 2),
                    Sample("edl_trainer_generation", {}, 3),
                    Sample("edl_job_progress_ratio", {}, 0.25 + 0.0009 * step),
                ],
            )
        clock.t += 1.0
    clock.t -= 1.0
    sizer.run_once()
    progress, planned = history.load().progress("ml/trainer")
    assert progress == pytest.approx(0.25 + 0.0009 * 12)
    assert planned == pytest.approx(200_000.0)
    assert sizer.last_round is not None
    (job,) = sizer.last_round.jobs
    assert job.progress == pytest.approx(progress) and job.planned_samples == pytest.approx(planned)


def test_a_job_without_the_progress_gauge_has_no_progress() -> None:
    clock, store, history, sizer, _ = observing()
    agents(store, clock, size=2, generation=3, rate=180.0)
    sizer.run_once()
    assert history.load().progress("ml/trainer") == (None, 0.0)
    assert sizer.last_round is not None and sizer.last_round.jobs[0].progress is None


def test_a_world_in_flux_is_not_observed() -> None:
    clock, store, history, sizer, _ = observing()
    agents(store, clock, size=2, generation=3, rate=180.0, seconds=6)
    agents(store, clock, size=2, generation=4, rate=180.0, seconds=6)  # a rescale in the window
    sizer.run_once()
    assert history.load().observed("ml/trainer") == {}
    # Only one of the two members reports: not observed either.
    clock2 = Clock()
    store2 = MetricStore(64, 600.0, clock2)
    history2 = MemoryHistoryStore()
    sizer2, _, _, _ = build(StaticCapacitySource(snapshot()), clock2, store2, history2)
    for _ in range(12):
        samples = [
            Sample("edl_trainer_samples_total", {}, 1000 + clock2.t - T0),
            Sample("edl_trainer_world_size", {}, 2),
            Sample("edl_trainer_generation", {}, 1),
        ]
        store2.ingest(PodKey("ml", "trainer-0"), samples)
        clock2.t += 1
    sizer2.run_once()
    assert history2.load().observed("ml/trainer") == {}


def test_rescale_pauses_are_measured_from_the_histogram_deltas() -> None:
    clock, store, history, sizer, _ = observing()
    agents(store, clock, size=2, generation=3, rate=100.0, seconds=2, pauses=(2.0, 5.0))
    sizer.run_once()  # baseline: what happened before the adapter looked is not counted
    assert history.load().pause("ml/trainer") == 0.0
    agents(store, clock, size=2, generation=4, rate=100.0, seconds=2, pauses=(3.0, 9.0))
    sizer.run_once()
    assert history.load().pause("ml/trainer") == 4.0


def test_replicas_sharing_a_history_decide_the_same() -> None:
    shared = MemoryHistoryStore()
    clock = Clock()
    store = MetricStore(64, 600.0, clock)
    agents(store, clock, size=2, generation=3, rate=180.0)
    one, p1, _, _ = build(StaticCapacitySource(snapshot()), clock, store, shared)
    two, p2, _, _ = build(StaticCapacitySource(snapshot()), clock, None, shared)
    one.run_once()  # observes and writes
    two.run_once()  # only reads
    assert served(p1) == served(p2) == [4.0]
    a, b = one.plan, two.plan
    assert a is not None and b is not None
    assert a.plan.to_dict() == b.plan.to_dict()


def test_bad_input_serves_the_current_count_and_says_why_once() -> None:
    clock = Clock()
    bad = snapshot(
        replicas=3, bound=3, error="annotation edl.paddlepaddle.org/weight: 'x' is not a number"
    )
    sizer, provider, events, registry = build(StaticCapacitySource(bad), clock)
    for _ in range(3):
        sizer.run_once()
        clock.t += 1
    assert served(provider) == [3.0]
    assert [(e.reason, e.warning) for e in events.seen] == [("SizingFallback", True)]
    assert (
        'edl_adapter_sizing_errors_total{reason="annotation"} 1.0'
        in generate_latest(registry).decode()
    )


def test_a_failing_decision_serves_current_counts() -> None:
    clock = Clock()
    weird = snapshot()
    broken = replace(weird, jobs=(replace(weird.jobs[0], observed={1: "fast"}),))  # type: ignore[dict-item]
    sizer, provider, _, _ = build(StaticCapacitySource(broken), clock)
    sizer.run_once()
    assert served(provider) == [2.0]
    assert provider.debug_page()["plan"]["jobs"][0]["limitedBy"] == "fallback"


def test_history_store_failure_keeps_the_last_copy() -> None:
    class Failing(MemoryHistoryStore):
        fail = False

        def load(self) -> SizeHistory:
            if self.fail:
                raise SourceError("apiserver down")
            return super().load()

    store = Failing()

    def observed(h: SizeHistory) -> bool:
        h.observe("ml/trainer", 4, 400.0, T0)
        return True

    store.update(observed)
    clock = Clock()
    sizer, provider, _, _ = build(StaticCapacitySource(snapshot()), clock, None, store)
    sizer.run_once()
    store.fail = True
    clock.t += 1
    sizer.run_once()
    page = provider.debug_page()["plan"]["jobs"][0]
    assert page["curve"]["largestMeasured"] == 4


def test_ambiguous_job_names_are_not_served() -> None:
    clock = Clock()
    snap = snapshot()
    twin = replace(snap.jobs[0], name="twin")
    both = replace(
        snap, jobs=(*snap.jobs, twin), job_names={snap.jobs[0].key: "digits", twin.key: "digits"}
    )
    sizer, provider, _, _ = build(StaticCapacitySource(both), clock)
    sizer.run_once()
    assert served(provider) == []
    assert [j["served"] for j in provider.debug_page()["plan"]["jobs"]] == [False, False]


def test_jobs_that_leave_lose_their_series() -> None:
    clock = Clock()
    source = StaticCapacitySource(snapshot())
    sizer, _, _, registry = build(source, clock)
    sizer.run_once()
    source.replace(ClusterSnapshot(snapshot().nodes))
    sizer.run_once()
    text = generate_latest(registry).decode()
    assert 'job="digits"' not in text


def test_event_names_are_deterministic() -> None:
    a = JobEvent("ml", "trainer", "SizingGrow", "grew to 3: ...", generation=7, desired=3)
    b = JobEvent("ml", "trainer", "SizingGrow", "grew to 3: other digits", generation=7, desired=3)
    c = replace(a, generation=8)
    assert a.name == b.name != c.name
    assert a.name.startswith("trainer.edl-sizing.")


def test_a_waiting_job_is_told_so_once() -> None:
    clock = Clock()
    gpu_job = snapshot(replicas=0, bound=0)
    job = replace(gpu_job.jobs[0], worker=Resources(cpu=1, gpu=1))
    sizer, provider, events, _ = build(StaticCapacitySource(replace(gpu_job, jobs=(job,))), clock)
    sizer.run_once()
    sizer.run_once()
    assert served(provider) == [1.0]  # its minimum, though nothing fits: the pod waits
    assert [e.reason for e in events.seen] == ["SizingWaiting"]
    assert "1 GPU" in events.seen[0].message


def test_desired_replicas_is_also_the_object_metric_of_the_jobs_deployment() -> None:
    """For clusters whose External API belongs to KEDA: same value, through custom metrics."""
    clock = Clock()
    sizer, provider, _, _ = build(StaticCapacitySource(snapshot(observed={2: 180.0})), clock)
    info = CustomMetricInfo("deployments.apps", True, DESIRED_REPLICAS)
    assert provider.list_all_metrics() == [info]
    with pytest.raises(NotFoundError, match="no fresh sizing plan"):
        provider.get_metric_by_name("ml", "trainer", info, LabelSelector(), LabelSelector())
    sizer.run_once()
    point = provider.get_metric_by_name("ml", "trainer", info, LabelSelector(), LabelSelector())
    assert point.value == served(provider)[0] == 4.0
    assert (point.described.kind, point.described.name, point.described.namespace) == (
        "Deployment", "trainer", "ml")  # fmt: skip
    with pytest.raises(NotFoundError):
        provider.get_metric_by_name("other", "trainer", info, LabelSelector(), LabelSelector())
    with pytest.raises(NotFoundError):
        pods = CustomMetricInfo("pods", True, DESIRED_REPLICAS)
        provider.get_metric_by_name("ml", "trainer", pods, LabelSelector(), LabelSelector())
    every = provider.get_metric_by_selector("ml", LabelSelector(), info, LabelSelector())
    assert [p.described.name for p in every] == ["trainer"]
    clock.t += 31.0  # a stale plan is served neither way
    assert provider.get_metric_by_selector("ml", LabelSelector(), info, LabelSelector()) == []


class _MovingDeployment:
    """The watch cache's Deployment, moved on by the HPA while a round does its I/O."""

    def __init__(self, replicas: int, generation: int) -> None:
        self.record = DeploymentRecord(
            "ml", "trainer", "digits", LabelSelector.parse(f"{JOB_LABEL}=digits"), replicas,
            T0, {}, None, Resources(cpu=1, memory=GI), (), {}, uid="u1", generation=generation,
        )  # fmt: skip
        self.lookups = 0

    def __call__(self) -> dict[str, DeploymentRecord]:
        self.lookups += 1
        return {"ml/trainer": self.record}

    def scale(self, replicas: int) -> None:
        self.record = replace(self.record, replicas=replicas, generation=self.record.generation + 1)


class _HistoryWhileTheHpaActs(MemoryHistoryStore):
    """Reading the shared history takes a round trip, during which the HPA scales the job."""

    def __init__(self, act: Callable[[], None]) -> None:
        super().__init__()
        self._act = act

    def load(self) -> SizeHistory:
        self._act()
        return super().load()


def _sizer_with_owner(
    source: StaticCapacitySource, history: MemoryHistoryStore, owner: _MovingDeployment
) -> tuple[Sizer, Events]:
    events = Events()
    sizer = Sizer(
        source, history, SizingPolicy(hold_off_s=30.0), SizingMetrics(CollectorRegistry()),
        events, Clock(), interval=1.0, history_interval=0.0, owners=owner,
    )  # fmt: skip
    return sizer, events


def test_an_event_names_the_generation_its_decision_was_made_on() -> None:
    # Two adapter replicas decide the same grow; one of them reads the Deployment after the
    # HPA already acted on the other's plan (generation + 1). Both must name the Event alike:
    # the generation as of the snapshot the decision was made on, not the cache's newer one.
    names = []
    for hpa_acts_during_the_round in (False, True):
        owner = _MovingDeployment(replicas=2, generation=7)
        act = functools.partial(owner.scale, 4) if hpa_acts_during_the_round else (lambda: None)
        sizer, events = _sizer_with_owner(
            StaticCapacitySource(snapshot(observed={2: 180.0})), _HistoryWhileTheHpaActs(act),
            owner,
        )  # fmt: skip
        sizer.run_once()
        assert [(e.reason, e.generation, e.desired) for e in events.seen] == [("SizingGrow", 7, 4)]
        assert owner.lookups == 1  # one table per round, not one search per job
        names.append(events.seen[0].name)
    assert names[0] == names[1]


def test_a_deployment_that_moved_before_its_lookup_gets_no_event_that_round() -> None:
    # The cache already holds a newer Deployment than the snapshot (its replicas differ from
    # the decision's current count): that generation would name another decision, so this
    # round says nothing; the next round decides on the new view.
    owner = _MovingDeployment(replicas=3, generation=8)  # the snapshot still says 2
    source = StaticCapacitySource(snapshot(observed={2: 180.0}))
    sizer, events = _sizer_with_owner(source, MemoryHistoryStore(), owner)
    sizer.run_once()
    assert events.seen == []
    source.replace(snapshot(replicas=3, bound=3, observed={2: 180.0}))
    sizer.run_once()
    assert [(e.reason, e.generation, e.desired) for e in events.seen] == [("SizingGrow", 8, 4)]


class _SlowView(StaticCapacitySource):
    """A capacity source whose snapshot takes 0.25 s of the round's timer."""

    def __init__(self, snapshot: ClusterSnapshot, timer: Clock) -> None:
        super().__init__(snapshot)
        self._timer = timer

    def snapshot(self) -> ClusterSnapshot:
        self._timer.t += 0.25
        return super().snapshot()


def test_each_round_reports_how_long_its_view_its_decision_and_all_of_it_took() -> None:
    # An admin sizes the adapter by these (docs/install.md): a round must stay far below the
    # interval. The timer is injected: the figures are the round's parts, whatever the machine.
    timer = Clock()
    timer.t = 0.0
    registry = CollectorRegistry()
    sizer = Sizer(
        _SlowView(snapshot(), timer), MemoryHistoryStore(), SizingPolicy(),
        SizingMetrics(registry), Events(), Clock(), timer=timer, cpu_timer=lambda: 0.0,
    )  # fmt: skip
    sizer.run_once()
    sizer.run_once()
    text = generate_latest(registry).decode()
    assert 'edl_adapter_sizing_round_seconds_count{part="round"} 2.0' in text
    assert 'edl_adapter_sizing_round_seconds_sum{part="snapshot"} 0.5' in text
    assert 'edl_adapter_sizing_round_seconds_sum{part="round"} 0.5' in text
    assert 'edl_adapter_sizing_round_seconds_bucket{le="0.25",part="snapshot"} 2.0' in text
    assert "edl_adapter_sizing_round_cpu_seconds_count 2.0" in text


class _ListingFor(StaticCapacitySource):
    """A capacity source whose watches complete their first list after ``calls`` looks."""

    def __init__(self, snapshot: ClusterSnapshot, calls: int) -> None:
        super().__init__(snapshot)
        self.looks = 0
        self._calls = calls

    def snapshot(self) -> ClusterSnapshot | None:  # type: ignore[override]
        self.looks += 1
        return super().snapshot() if self.looks > self._calls else None


def test_the_first_plan_follows_the_first_complete_view_not_a_whole_interval_later() -> None:
    # A round that finds no view yet (the watches still list 150,000 pods) looks again soon:
    # with an interval of an hour, the plan still comes once the view is there.
    source = _ListingFor(snapshot(), calls=3)
    sizer = Sizer(
        source, MemoryHistoryStore(), SizingPolicy(), SizingMetrics(CollectorRegistry()),
        Events(), Clock(), interval=3600.0,
    )  # fmt: skip
    sizer.start()
    try:
        wait_for(lambda: sizer.plan is not None, timeout_s=60, what="the first plan")
    finally:
        sizer.stop()
    assert source.looks == 4


class _CountingSelector(LabelSelector):
    """A selector that counts the jobs it was asked about."""

    asked = 0

    def matches(self, labels: Mapping[str, str]) -> bool:
        type(self).asked += 1
        return super().matches(labels)


def test_an_hpa_read_looks_at_its_own_job_not_at_every_job_of_the_cluster() -> None:
    # 1,000 HPAs each read desired_replicas every sync: a read that went through every job
    # made the adapter's work grow with the square of the jobs.
    jobs = tuple(
        Job(f"ns-{i % 10}", f"job-{i}", Resources(cpu=1, memory=GI), replicas=1, max_replicas=2)
        for i in range(1000)
    )
    nodes = (Node("n1", Resources(cpu=4, memory=64 * GI)),)
    names = {j.key: j.name for j in jobs}
    source = StaticCapacitySource(ClusterSnapshot(nodes, (), jobs, job_names=names))
    clock = Clock()
    sizer, provider, _, _ = build(source, clock)
    sizer.run_once()
    wanted = LabelSelector.parse(f"{JOB_LABEL}=job-437")
    counting = _CountingSelector(wanted.requirements)
    items = provider.get_external_metric("ns-7", counting, ExternalMetricInfo(DESIRED_REPLICAS))
    assert [i.labels for i in items] == [{JOB_LABEL: "job-437"}]
    assert _CountingSelector.asked == 1
    _CountingSelector.asked = 0
    every = _CountingSelector(())
    assert (
        len(provider.get_external_metric("ns-7", every, ExternalMetricInfo(DESIRED_REPLICAS)))
        == 100
    )
    assert _CountingSelector.asked == 100  # the namespace's jobs only
