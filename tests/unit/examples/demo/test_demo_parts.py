"""The demo's simulated cluster, story and summary: the Kubernetes rules they stand in for."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from agent.protocol.control import Timings
from edl_sizing import snapshot_from_dict
from examples.demo.cluster import ClusterFiles, JobSpec, SimulatedCluster
from examples.demo.on_cluster import URGENT, ClusterDemo, Kube, KubeStage, trainer_deployment
from examples.demo.pod_logs import PodLogCopies
from examples.demo.report import Summary, TimelinePoint, turning_points
from examples.demo.run import DemoOptions, EmbeddedDemo
from examples.demo.story import SERVICE, Story
from examples.demo.telemetry import JobTelemetry, Training, World, local_world
from examples.demo.view import ClusterState, Status, cluster_state, panel, progress_bar
from tests.e2e.harness.kubelet_node import reserved_cpu
from tests.e2e.harness.processes import HarnessError


def _training(members: int, steps: int) -> Training:
    return Training(World(1, members), 0.0, None, steps, None, None)


def test_the_replicaset_follows_replicas_and_deletes_pending_then_newest() -> None:
    c = SimulatedCluster(JobSpec(), slots=3)
    c.replicas = 2
    c.reconcile()
    assert [(p.name, p.node) for p in c.workers()] == [
        ("digits-trainer-0", "laptop"),
        ("digits-trainer-1", "laptop"),
    ]
    c.add_workload("web", 2, 1, 1000)  # only one fits: the other stays Pending
    c.replicas = 3
    c.reconcile()
    assert c.free_slots() == 0 and c.workers()[-1].node is None
    c.replicas = 1
    c.reconcile()
    assert [p.name for p in c.workers()] == ["digits-trainer-0", "digits-trainer-1"]
    assert [p.terminating for p in c.workers()] == [False, True]
    c.reconcile()  # a terminating pod keeps its slot until its process is gone
    assert [p.node for p in c.pods if p.workload] == ["laptop", None]
    c.remove("digits-trainer-1")
    c.reconcile()
    assert [p.node for p in c.pods if p.workload] == ["laptop", "laptop"]


def test_the_scheduler_binds_higher_priority_first_and_never_preempts() -> None:
    c = SimulatedCluster(JobSpec(), slots=2)
    c.reconcile()
    c.add_workload("low", 1, 1, 0)
    c.add_workload("high", 1, 1, 1000)
    c.reconcile()
    assert {p.name: p.node for p in c.pods} == {
        "digits-trainer-0": "laptop",
        "low-0": None,
        "high-0": "laptop",
    }


def test_the_files_are_what_the_adapter_parses(tmp_path: Path) -> None:
    c = SimulatedCluster(JobSpec(), slots=3)
    c.replicas = 2
    c.add_workload(SERVICE, 2, 1, 1000)
    c.reconcile()
    c.workers()[0].address = "127.0.0.1:9400"
    files = ClusterFiles(tmp_path / "capacity.yaml", tmp_path / "pods.yaml")
    files.write(c)
    snapshot = snapshot_from_dict(yaml.safe_load(files.capacity.read_text()))
    (job,) = snapshot.jobs
    assert (job.key, job.replicas, job.min_replicas, job.max_replicas) == ("ml/digits", 2, 1, 3)
    bound = {p.name: (p.node, p.job, p.priority) for p in snapshot.pods}
    assert bound["serving-0"] == ("laptop", None, 1000)  # the service went first
    assert bound["digits-trainer-0"] == ("laptop", "ml/digits", 0)
    assert bound["digits-trainer-1"] == (None, "ml/digits", 0)  # Pending: no slot left
    (pod,) = yaml.safe_load(files.pods.read_text())["pods"]
    assert pod["labels"]["edl.paddlepaddle.org/job"] == "digits"
    assert pod["deployment"] == "digits-trainer" and pod["address"] == "127.0.0.1:9400"


def test_the_story_waits_for_what_the_job_did() -> None:
    c = SimulatedCluster(JobSpec(), slots=3)
    story = Story(c, dwell_steps=10)
    c.reconcile()
    assert c.free_slots() == 0 and "2 of the 3" in story.headline
    assert story.advance(_training(1, 9), c) is None
    assert story.advance(_training(1, 10), c) is not None and c.free_slots() == 2
    assert story.advance(_training(1, 50), c) is None  # waits for the world of 3
    assert story.advance(_training(3, 10), c) is not None
    assert [p.priority for p in c.pods if p.workload == SERVICE] == [1000, 1000]
    assert story.advance(_training(1, 10), c) is None  # the service is not running yet
    c.replicas = 0
    c.reconcile()
    assert story.advance(_training(1, 10), c) is not None and story.done
    assert not [p for p in c.pods if p.workload]


@pytest.mark.parametrize(
    ("sizes", "turns"),
    [
        ([1, 3, 1, 3], [1, 3, 1, 3]),
        ([1, 2, 3, 1, 3], [1, 3, 1, 3]),
        ([1, 3, 2, 1, 2, 3], [1, 3, 1, 3]),
        ([1, 2], [1, 2]),
        ([], []),
    ],
)
def test_turning_points(sizes: list[int], turns: list[int]) -> None:
    assert turning_points(sizes) == turns


def test_the_summary_says_no_when_a_sample_was_missed(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    ledger.mkdir()
    (ledger / "ledger-a-g1-r0-1.jsonl").write_text(
        '{"g": 1, "restore": 0}\n{"g": 1, "r": 0, "s": 0, "e": 0, "ids": [0, 1]}\n'
    )
    summary = Summary.build(ledger, 1, 3, [1], [], 0.9, 0.9)
    assert not summary.ok
    assert any("exactly once: NO; epoch 0: 1 missing" in line for line in summary.lines())
    summary = Summary.build(ledger, 1, 2, [1], [], 0.9, 0.95)
    assert summary.ledger_problems == [] and not summary.ok  # accuracy 0.05 apart
    assert any("(MISMATCH)" in line for line in summary.lines())


def test_telemetry_counts_the_worlds_the_job_trained_in(tmp_path: Path) -> None:
    (tmp_path / "digits").mkdir()
    record = tmp_path / "digits" / "world.json"
    t = JobTelemetry(local_world(tmp_path, "digits"), global_batch=64)
    assert t.observe(0.0, {}).world == World()
    record.write_text('{"generation": 2, "members": [{}, {}]}')
    t.observe(1.0, {})
    t.samples += 64  # what a scrape adds
    t.observe(1.5, {})
    record.write_text('{"generation": 3, "members": [{}]}')
    assert t.observe(2.0, {}).world == World(3, 1)
    assert [(r.generation, r.before, r.after, r.trained) for r in t.changes] == [(3, 2, 1, False)]
    assert t.sizes == [2] and t.rescales == []  # generation 3 has not trained yet
    t.samples += 64
    assert t.observe(2.5, {}).steps_in_world == 1
    assert t.sizes == [2, 1] and [r.generation for r in t.rescales] == [3]
    # 1 -> 3 -> 2 with no step at 3 (a member lost while forming): one rescale 1 -> 2
    record.write_text('{"generation": 4, "members": [{}, {}, {}]}')
    t.observe(3.0, {})
    record.write_text('{"generation": 5, "members": [{}, {}]}')
    t.observe(3.5, {})
    t.samples += 64
    t.observe(4.0, {})
    assert t.sizes == [2, 1, 2]
    assert [(r.generation, r.before, r.after) for r in t.rescales][-1] == (5, 1, 2)
    assert [r.generation for r in t.untrained] == [4]


def test_the_panel_shows_every_figure() -> None:
    cluster = ClusterState(
        replicas=3, workers="3 running", slots="[T T T]", free_slots=0, trainer_slots=3,
        other_slots=0, pending_priority=0, hpa_read="3", hpa_desired=3,
    )  # fmt: skip
    status = Status(
        t=12.0, title="on a test", headline="the service leaves", act=3, acts=3,
        training=_training(3, 5), progress=0.5, cluster=cluster, sizer=None, last_pause=None,
        events=["e1"],
    )  # fmt: skip
    assert TimelinePoint.of(status).trainer_slots == 3
    text = "\n".join(panel(status))
    for needle in ("3/3", "[T T T]", "reads desired_replicas 3 -> sets replicas 3", "e1"):
        assert needle in text
    assert progress_bar(0.5, 10) == "[#####.....]  50 %"


def test_the_frame_counts_the_pods_of_the_node() -> None:
    c = SimulatedCluster(JobSpec(), slots=3)
    c.replicas = 3
    c.reconcile()
    c.add_workload(SERVICE, 2, 1, 1000)
    c.replicas = 1
    c.reconcile()
    state = cluster_state(c.pod_views(), c.slots, c.replicas, "1", 1)
    assert state.slots == "[T t t] waiting: 2 serving pod(s)"
    assert state.workers == "1 running, 2 stopping"
    assert (state.free_slots, state.trainer_slots, state.pending_priority) == (0, 3, 2)


def test_the_cluster_demo_mounts_its_own_folders_into_the_trainers(tmp_path: Path) -> None:
    # The checkpoints go to the demo's work folder (new each run), mounted from the host at the
    # same path as the ledger and the step gate: the example's checkpoints component mounts a
    # volume where a later run would find the job finished and train nothing.
    folders = [tmp_path / "job", tmp_path / "ledger", tmp_path / "checkpoints"]
    doc = trainer_deployment(["--epochs", "3"], {"EDL_X": "1"}, "localhost/t:1", folders,
                             tmp_path / "checkpoints")  # fmt: skip
    pod = doc["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    command = container["command"]
    assert command[command.index("--checkpoint-url") + 1] == str(tmp_path / "checkpoints")
    hosts = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert sorted(hosts.values()) == sorted(map(str, folders))
    assert all(mounts[name] == path for name, path in hosts.items())
    assert {"edl-run", "tmp"} <= set(mounts)  # the example's own volumes stay
    assert command[command.index("--max") + 1] == "3"
    assert "--host=$(POD_IP)" in command and pod["hostNetwork"] is True
    assert (container["image"], container["imagePullPolicy"]) == ("localhost/t:1", "Never")
    assert {"name": "EDL_X", "value": "1"} in container["env"]
    assert container["resources"]["requests"]["cpu"] == "1"  # one node's allocatable CPU


@pytest.mark.parametrize(
    ("allocatable", "cpus", "reserved"),
    [("1", 2, "1000m"), ("1", 16, "15000m"), ("500m", 1, "500m")],
)
def test_a_kubelet_node_reserves_what_is_not_allocatable(
    allocatable: str, cpus: int, reserved: str
) -> None:
    assert reserved_cpu(allocatable, cpus) == reserved


@pytest.mark.parametrize("allocatable", ["3", "0", "-1", "1.0005", "lots"])
def test_a_kubelet_node_cannot_allocate_what_the_machine_lacks(allocatable: str) -> None:
    with pytest.raises(HarnessError, match="allocatable_cpu"):
        reserved_cpu(allocatable, 2)


def test_the_loss_is_read_from_a_kubelet_log_too(tmp_path: Path) -> None:
    log = tmp_path / "0.log"
    log.write_text(
        "2026-12-07T15:00:00.1Z stdout F step 5 loss 2.25\n"
        "2026-12-07T15:00:01.1Z stderr F agent: generation 2\n"
        "2026-12-07T15:00:02.1Z stdout F step 10 loss 1.5\n"
        "2026-12-07T15:00:02.2Z stdout P step 15 loss 9"  # a partial line: not yet
    )
    t = JobTelemetry(lambda: World(1, 1), global_batch=64)
    training = t.observe(0.0, {"p": ("127.0.0.1", 1, log)})
    assert (training.loss_step, training.loss) == (10, 1.5)


def test_the_other_work_is_1_cpu_pods_of_edls_image_on_the_host_network() -> None:
    created: list[dict[str, Any]] = []

    class Recorder:
        def create(self, doc: dict[str, Any]) -> dict[str, Any]:
            created.append(doc)
            return doc

    stage = KubeStage(cast(Kube, Recorder()), "localhost/edl-trainer:9")
    stage.add_workload("serving", 2, 1, 1000)
    (doc,) = created
    pod = doc["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert doc["spec"]["replicas"] == 2 and pod["hostNetwork"] is True
    assert (c["image"], c["imagePullPolicy"]) == ("localhost/edl-trainer:9", "Never")
    assert c["resources"]["requests"]["cpu"] == "1" and pod["priorityClassName"] == URGENT
    assert stage.slots == 3


def test_the_cluster_demos_title_says_what_each_kubelet_reserves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    demo = ClusterDemo(DemoOptions(out=tmp_path))
    assert demo.title == "on 3 kubelets of 1 CPU (15 of 16 reserved each)"
    assert reserved_cpu("1", 16) == "15000m"  # what each kubelet is told


def test_a_trainers_log_outlives_its_pod(tmp_path: Path) -> None:
    source = tmp_path / "pod-logs" / "ml_p-1_uid" / "trainer" / "0.log"
    source.parent.mkdir(parents=True)
    source.write_text("t stdout F step 5 loss 2\n")
    copies = PodLogCopies(tmp_path / "pods")
    copies.watch("p-1", source)
    copies.watch("p-1", source)  # every tick: copied once
    copies.copy()
    with source.open("a") as f:
        f.write("t stderr F agent: drained\n")
    copies.copy()
    source.unlink()  # the kubelet removed the pod
    copies.copy()
    assert (tmp_path / "pods" / "p-1.log").read_text() == (
        "t stdout F step 5 loss 2\nt stderr F agent: drained\n"
    )


def test_the_story_gate_never_holds_a_step_an_act_needs_nor_lets_the_job_end_early(
    tmp_path: Path,
) -> None:
    from agent.trainer.step_gate import UNLIMITED, StepGate
    from examples.demo.run import StoryGate

    gate = StepGate(tmp_path / "gate")
    story_gate = StoryGate(gate, total_steps=200, dwell_steps=20, batch=10)
    assert gate.allowed() == 180  # the job's last tenth waits for the ending

    def trained(steps: int) -> Training:
        return Training(World(2, 1), steps * 10.0, None, 0, None, None)

    # a slow rescale: the job is at the gate while an act still waits for 20 steps in its world
    story_gate.update(trained(100), ending=False, story_done=False)
    assert gate.allowed() == 180  # far from the gate: nothing changes
    story_gate.update(trained(170), ending=False, story_done=False)
    assert gate.allowed() == 170 + 20 + 1
    story_gate.update(trained(250), ending=False, story_done=False)
    assert gate.allowed() == 199  # never the last step before the ending
    story_gate.update(trained(199), ending=False, story_done=True)
    assert gate.allowed() == 199  # the story has played: the job waits until it has grown back
    story_gate.update(trained(199), ending=True, story_done=True)
    assert gate.allowed() == UNLIMITED


def test_the_timeline_runs_to_the_first_step_at_the_new_size(tmp_path: Path) -> None:
    demo = EmbeddedDemo(DemoOptions(out=tmp_path))
    for pod, first in (("digits-0", 1000.7), ("digits-1", 1000.5), ("digits-2", None)):
        control = demo.work / "pods" / pod / "control"
        control.mkdir(parents=True)
        (control / "timings-g2.json").write_text(Timings(started=999.0, first_step=first).to_json())
    (demo.work / "pods" / "digits-2" / "control" / "timings-g3.json").write_text("{broken")
    assert demo.first_step(2) == 1000.5  # the earliest rank's
    assert demo.first_step(3) is None and demo.first_step(4) is None
    demo._t0_wall = 990.0
    demo._awaiting_step = (2, 3)  # as the tick that saw generation 2 leaves it
    demo._note_first_step()
    assert demo.log.take() == ["  10.5 s  agents: first step at generation 2 (3 worker(s))"]
    demo._note_first_step()  # logged once
    assert demo.log.take() == []
