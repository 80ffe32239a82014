"""What the agents' metrics say about each job: throughput, placement, pauses, progress.

Its throughput at its world size and placement, its rescale pauses, its progress.

Read from the adapter's scraped store (the sources keep these series for the sizer:
:data:`SERIES`). A throughput observation at size n is taken only when every scraped pod of
the job reports the same world (``edl_trainer_world_size`` n, one
``edl_trainer_generation``), that world has n members reporting, and it has *trained* during
the whole window: the window starts no earlier than the first step seen in that generation
(the first scrape at which ``edl_trainer_samples_total`` moved after the generation
appeared). A rate measured across a rescale would mix two sizes and the pause; one measured
from the generation's change would count the new world's start-up (seconds idle, tens of
seconds on a loaded node) as slow training, and a size measured so looks slower than it is:
the sizer would then not grow back to it. The job's throughput is the sum over its pods of
the rate of ``edl_trainer_samples_total``; the nodes its world spans are those of the job's
bound pods in the cluster snapshot (two workers on one node and two across two nodes are
different measurements to the sizer).

The job's progress is ``edl_job_progress_ratio`` (samples trained over its planned total,
exported by agents whose script has a planned total; the largest of its pods' values), and
while its throughput is measured, its planned samples are that throughput over the rate of
progress in the same window. Both feed the sizer's finish-time fairness; a job whose agents
do not export the gauge has neither.

A pause observation is the largest new ``edl_trainer_rescale_pause_seconds`` (mean of the
rescales a pod counted since the last look) among the job's pods: every member waits
through the same pause.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from edl_sizing.capacity import ClusterSnapshot
from edl_sizing.sizing_round import Observation, job_class_key
from metrics_adapter.scraping.pod_registry import PodKey
from metrics_adapter.scraping.store import MetricStore
from metrics_adapter.scraping.window import MetricWindow

SAMPLES = "edl_trainer_samples_total"
WORLD_SIZE = "edl_trainer_world_size"
GENERATION = "edl_trainer_generation"
PAUSE_SUM = "edl_trainer_rescale_pause_seconds_sum"
PAUSE_COUNT = "edl_trainer_rescale_pause_seconds_count"
PROGRESS = "edl_job_progress_ratio"
SERIES = frozenset({SAMPLES, WORLD_SIZE, GENERATION, PAUSE_SUM, PAUSE_COUNT, PROGRESS})
"""The series the sizer reads from the agents (docs/metrics-contract.md)."""


def _one(windows: Sequence[tuple[object, MetricWindow]]) -> MetricWindow | None:
    return windows[0][1] if len(windows) == 1 else None


class ThroughputObserver:
    """Turns the store's windows into observations (keeps pause counters between rounds)."""

    def __init__(self, store: MetricStore, window_s: float) -> None:
        self._store = store
        self._window = window_s
        self._pauses: dict[PodKey, tuple[float, float]] = {}

    def collect(self, snapshot: ClusterSnapshot) -> list[Observation]:
        """This round's observations, one per job that has any."""
        members: dict[str, list[PodKey]] = {}
        nodes: dict[str, set[str]] = {}
        for pod in snapshot.pods:
            if pod.job is not None and pod.node is not None:
                members.setdefault(pod.job, []).append(PodKey(pod.namespace, pod.name))
                nodes.setdefault(pod.job, set()).add(pod.node)
        classes = {j.key: job_class_key(j) for j in snapshot.jobs}
        out = []
        seen: set[PodKey] = set()
        for job in sorted(members):
            keys = members[job]
            seen.update(keys)
            size, rate = self._throughput(keys)
            pause, rescales = self._pause(keys)
            progress, progress_rate = self._progress(keys)
            planned = rate / progress_rate if rate is not None and progress_rate else None
            if rate is not None or pause is not None or progress is not None:
                out.append(
                    Observation(
                        job, size, rate, pause, rescales, classes.get(job),
                        len(nodes[job]) if rate is not None else 0, progress, planned,
                    )
                )  # fmt: skip
        for gone in set(self._pauses) - seen:
            del self._pauses[gone]
        return out

    def _throughput(self, pods: Iterable[PodKey]) -> tuple[int | None, float | None]:
        worlds: set[tuple[float, float]] = set()
        total, reporting = 0.0, 0
        for key in pods:
            size_w = _one(self._store.windows(key, WORLD_SIZE))
            gen_w = _one(self._store.windows(key, GENERATION))
            samples_w = _one(self._store.windows(key, SAMPLES))
            if size_w is None or gen_w is None or samples_w is None:
                continue
            size, generation = size_w.latest(), self._trained(gen_w, samples_w)
            rate = samples_w.rate(self._window)
            if size is None or generation is None or rate is None or size.value < 1:
                return None, None
            worlds.add((size.value, generation))
            total += rate.value
            reporting += 1
        if len(worlds) != 1:
            return None, None
        ((world_size, _),) = worlds
        if reporting != int(world_size):
            return None, None
        return int(world_size), total

    def _progress(self, pods: Iterable[PodKey]) -> tuple[float | None, float | None]:
        """The job's progress (the largest of its pods') and its rate per second.

        The rate is over the window (None: not exported, or not moving).
        """
        progress: float | None = None
        per_second: float | None = None
        for key in pods:
            window = _one(self._store.windows(key, PROGRESS))
            if window is None or (latest := window.latest()) is None:
                continue
            if 0.0 <= latest.value <= 1.0 and (progress is None or latest.value > progress):
                progress = latest.value
                rate = window.rate(self._window)
                per_second = rate.value if rate is not None and rate.value > 0 else None
        return progress, per_second

    def _trained(self, gen_w: MetricWindow, samples_w: MetricWindow) -> float | None:
        """The generation if it trained over the whole window (None: changed, or not yet).

        The generation's start is the first of the trailing run of its value (the oldest kept
        sample when no change is kept); its training starts at the first later scrape at which
        the samples counter moved. Late by up to one scrape, never early: the pause stays out.
        """
        generations = gen_w.samples()
        if not generations:
            return None
        value = generations[-1][1]
        since = generations[-1][0]
        for t, v in reversed(generations):
            if v != value:
                break
            since = t
        counts = [(t, v) for t, v in samples_w.samples() if t >= since]
        if not counts:
            return None
        first = counts[0][1]
        started = next((t for t, v in counts if v != first), None)
        if started is None or started > counts[-1][0] - self._window:
            return None
        return value

    def _pause(self, pods: Iterable[PodKey]) -> tuple[float | None, int]:
        """The newest mean pause over the job's pods, and how many rescales that counts."""
        newest: float | None = None
        rescales = 0
        for key in pods:
            total_w = _one(self._store.windows(key, PAUSE_SUM))
            count_w = _one(self._store.windows(key, PAUSE_COUNT))
            if total_w is None or count_w is None:
                continue
            total, count = total_w.latest(), count_w.latest()
            if total is None or count is None:
                continue
            before = self._pauses.get(key)
            self._pauses[key] = (count.value, total.value)
            if before is not None and count.value > before[0]:
                pause = (total.value - before[1]) / (count.value - before[0])
                newest = pause if newest is None else max(newest, pause)
                rescales = max(rescales, int(count.value - before[0]))
        return newest, rescales
