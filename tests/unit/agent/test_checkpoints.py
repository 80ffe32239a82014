"""Durable checkpoints: the directory store, the catalogue (checksums, fallback, pruning), the
settings, the trainer's checkpointer and the metrics the agent exports from them."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from prometheus_client.core import CollectorRegistry
from prometheus_client.exposition import generate_latest

from agent.checkpoints import local
from agent.checkpoints.catalogue import Checkpoints, Manifest, finished_at
from agent.checkpoints.errors import (
    CheckpointError,
    CheckpointInvalid,
    CheckpointMissing,
    CheckpointStoreError,
)
from agent.checkpoints.settings import CheckpointSettings
from agent.checkpoints.stats import CheckpointStats, read_stats, stats_path
from agent.checkpoints.store import job_url, open_store
from agent.collectors.checkpoints import CheckpointCollector
from agent.collectors.health import CollectorHealth
from agent.errors import ConfigError
from agent.trainer.checkpointer import Checkpointer
from agent.trainer.state import TrainingState


def catalogue(tmp_path: Path, invalid: list[str] | None = None) -> Checkpoints:
    on_invalid = None if invalid is None else (lambda name, why: invalid.append(name))
    return Checkpoints(local.LocalDirectory(tmp_path / "ckpt"), on_invalid=on_invalid)


def write(c: Checkpoints, step: int, payload: bytes | None = None, **kw: object) -> Manifest:
    fields = {"generation": 1, "epoch": 0, "consumed": step, "framework": "paddle", **kw}
    return c.write(payload or f"state {step}".encode(), step=step, **fields)  # type: ignore[arg-type]


def as_is(manifest: Manifest, payload: bytes) -> bytes:
    return payload


# -- the directory store --------------------------------------------------------------------------


def test_directory_store_puts_atomically_and_lists_only_whole_objects(tmp_path: Path) -> None:
    store = local.LocalDirectory(tmp_path / "d")
    assert store.names() == []  # absent directory: nothing stored yet
    store.put("a", b"1")
    store.put("a", b"22")
    (tmp_path / "d" / ".b.tmp-1-x").write_bytes(b"half")  # a write that died
    assert store.names() == ["a"] and store.get("a") == b"22"
    with pytest.raises(CheckpointMissing):
        store.get("b")
    store.delete("a")
    store.delete("a")  # already gone: no error
    assert store.names() == []
    with pytest.raises(ValueError):
        store.put("../x", b"")


def test_directory_store_sweeps_temporary_files_of_dead_writes(tmp_path: Path) -> None:
    store = local.LocalDirectory(tmp_path)
    old, fresh = tmp_path / ".x.tmp-1-a", tmp_path / ".y.tmp-2-b"
    old.write_bytes(b"")
    fresh.write_bytes(b"")
    stale = time.time() - local.STALE_SECONDS - 60
    os.utime(old, (stale, stale))
    store.put("z", b"z")
    assert not old.exists() and fresh.exists()


def test_an_unusable_directory_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    store = local.LocalDirectory(tmp_path / "file" / "ckpt")
    with pytest.raises(CheckpointStoreError, match="is not usable"):
        store.probe()
    with pytest.raises(CheckpointStoreError, match="cannot write"):
        store.put("a", b"1")
    local.LocalDirectory(tmp_path / "ok").probe()


def test_urls_name_a_backend_by_scheme(tmp_path: Path) -> None:
    assert open_store(str(tmp_path)).url == str(tmp_path)
    assert open_store(f"file://{tmp_path}").url == str(tmp_path)
    assert open_store(f"file://localhost{tmp_path}").url == str(tmp_path)
    assert job_url("file:///v/", "digits") == "file:///v/digits"
    with pytest.raises(ConfigError, match=r"unknown scheme 'nosuch' \(a path, file://, s3://, "):
        open_store("nosuch://bucket/x")
    with pytest.raises(ConfigError, match="names host"):
        open_store("file://elsewhere/x")


# -- the catalogue --------------------------------------------------------------------------------


def test_the_newest_checkpoint_reads_back_verified(tmp_path: Path) -> None:
    c = catalogue(tmp_path)
    assert c.latest() is None and c.newest_usable(as_is) is None
    write(c, 10)
    m = write(c, 20, epoch=1, consumed=64, finished=True, writer="pod-a")
    assert (m.seq, m.step, m.epoch, m.consumed, m.finished, m.writer) == (
        2,
        20,
        1,
        64,
        True,
        "pod-a",
    )
    assert c.latest() == m and Manifest.from_json(m.to_json()) == m
    assert c.newest_usable(as_is) == (m, b"state 20")
    assert c.newest_usable(as_is, newer_than=19) == (m, b"state 20")
    assert c.newest_usable(as_is, newer_than=20) is None  # a member's state is as new
    assert finished_at(c) == 20


@pytest.mark.parametrize("damage", ["flip", "truncate", "no payload", "bad manifest"])
def test_an_unusable_newest_checkpoint_falls_back_to_the_previous(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    invalid: list[str] = []
    c = catalogue(tmp_path, invalid)
    good = write(c, 10)
    bad = write(c, 20, payload=b"x" * 1000)
    payload, manifest = tmp_path / "ckpt" / bad.payload_name, tmp_path / "ckpt" / bad.manifest_name
    if damage == "flip":
        blob = bytearray(payload.read_bytes())
        blob[500] ^= 0xFF
        payload.write_bytes(bytes(blob))
    elif damage == "truncate":
        payload.write_bytes(payload.read_bytes()[:600])
    elif damage == "no payload":
        payload.unlink()
    else:
        manifest.write_text('{"format": 1, "seq": "x"')
    assert c.newest_usable(as_is) == (good, b"state 10")
    assert invalid == [bad.name]
    assert f"checkpoint {bad.name}" in caplog.text and "trying the previous one" in caplog.text


def test_a_payload_without_its_manifest_is_not_a_checkpoint(tmp_path: Path) -> None:
    c = catalogue(tmp_path)
    good = write(c, 10)
    c.store.put(Manifest(2, 20, 1, 0, 0, "0", 1, "paddle", 0.0).payload_name, b"x")  # died here
    assert c.latest() == good and c.newest_usable(as_is) == (good, b"state 10")


def test_a_rejected_payload_falls_back_and_another_error_stops(tmp_path: Path) -> None:
    c = catalogue(tmp_path)
    write(c, 10)
    write(c, 20)

    def reject_20(manifest: Manifest, payload: bytes) -> int:
        if manifest.step == 20:
            raise CheckpointInvalid("not a training state")
        return manifest.step

    assert c.newest_usable(reject_20) is not None
    assert c.newest_usable(reject_20)[1] == 10  # type: ignore[index]

    def foreign(manifest: Manifest, payload: bytes) -> int:
        raise CheckpointError("written by another framework")

    with pytest.raises(CheckpointError, match="another framework"):
        c.newest_usable(foreign)


def test_newest_means_written_last_whatever_the_step(tmp_path: Path) -> None:
    """After restoring from step 10 (the one at 20 corrupt), the job moves on from there."""
    c = catalogue(tmp_path)
    write(c, 10)
    write(c, 20)
    again = write(c, 15, generation=2)
    assert again.seq == 3 and c.latest() == again
    assert [m.step for m in c.manifests()] == [15, 20, 10]


def test_pruning_keeps_the_newest_k_and_removes_dead_writes(tmp_path: Path) -> None:
    c = catalogue(tmp_path)
    for step in (10, 20, 30):
        write(c, step)
    orphan = Manifest(2, 99, 7, 0, 0, "0", 1, "paddle", 0.0)  # an older write that died
    c.store.put(orphan.payload_name.replace("g000007", "g000001"), b"x")
    inflight = Manifest(9, 40, 1, 0, 0, "0", 1, "paddle", 0.0)  # still being written
    c.store.put(inflight.payload_name, b"x")
    removed = c.prune(keep=2)
    assert len(removed) == 2
    left = c.store.names()
    assert [m.step for m in c.manifests()] == [30, 20]
    assert inflight.payload_name in left
    assert sum(n.endswith(".state") for n in left) == 3  # the kept two and the one in flight
    older = c.manifests()[1]
    assert c.prune(keep=0) == [older.name]  # at least one is always kept
    assert [m.step for m in c.manifests()] == [30]


def test_finished_at_is_only_the_newest_checkpoints_word(tmp_path: Path) -> None:
    c = catalogue(tmp_path)
    write(c, 10, finished=True)
    write(c, 20)
    assert finished_at(c) is None
    broken = Checkpoints(local.LocalDirectory(tmp_path / "file" / "x"))
    (tmp_path / "file").write_text("")
    assert finished_at(broken) is None  # unreadable: not known to be finished (logged)


# -- settings -------------------------------------------------------------------------------------


def test_settings_flags_override_the_environment(tmp_path: Path) -> None:
    env = {
        "EDL_CHECKPOINT_URL": str(tmp_path),
        "EDL_CHECKPOINT_EVERY_STEPS": "50",
        "EDL_CHECKPOINT_KEEP": "2",
    }
    s = CheckpointSettings.from_env(env, {"checkpoint_every_seconds": "30", "checkpoint_keep": ""})
    assert (s.url, s.every_steps, s.every_seconds, s.keep) == (str(tmp_path), 50, 30.0, 2)
    assert CheckpointSettings.from_env(s.to_env()) == s
    assert not CheckpointSettings.from_env({}).enabled and CheckpointSettings().to_env() == {}


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"EDL_CHECKPOINT_URL": "ckpt"}, "absolute path"),
        ({"EDL_CHECKPOINT_URL": "nosuch://b/x"}, "unknown scheme"),
        ({"EDL_CHECKPOINT_KEEP": "0"}, "EDL_CHECKPOINT_KEEP='0': must be >= 1"),
        ({"EDL_CHECKPOINT_EVERY_STEPS": "ten"}, "EDL_CHECKPOINT_EVERY_STEPS='ten': not an integer"),
        ({"EDL_CHECKPOINT_EVERY_SECONDS": "-1"}, ">= 0"),
    ],
)
def test_bad_settings_are_one_line_errors(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        CheckpointSettings.from_env(env)


# -- the trainer's checkpointer -------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def state(step: int, size: int = 10) -> TrainingState:
    model = {"w": np.full(size, step, dtype=np.float32)}
    return TrainingState(step, 3, model, {}, {"epoch": 1, "consumed": 64 * step}, {})


def checkpointer(
    tmp_path: Path, every_steps: int = 0, every_seconds: float = 0.0, keep: int = 3
) -> tuple[Checkpointer, Clock, Path]:
    clock = Clock()
    path = stats_path(tmp_path, 7)
    stats = CheckpointStats(path)
    settings = CheckpointSettings(str(tmp_path / "ckpt"), every_steps, every_seconds, keep)
    c = Checkpoints(settings.store(""), on_invalid=lambda _n, _w: stats.invalid())
    return Checkpointer(c, settings, "paddle", stats, "pod-a", clock), clock, path


def test_a_checkpoint_is_due_every_n_steps_or_t_seconds_whichever_first(tmp_path: Path) -> None:
    cp, clock, _ = checkpointer(tmp_path, every_steps=10, every_seconds=60)
    assert not cp.due(9) and cp.due(10)
    clock.now += 61
    assert cp.due(3)  # by time, long before 10 steps
    cp.submit(lambda: state(3))
    assert cp.wait(10)
    assert not cp.due(12) and cp.due(13)  # the cadence counts from the last checkpoint
    cp.restart_cadence(40)  # a restore
    assert not cp.due(45) and cp.due(50)


def test_the_writer_thread_commits_and_counts_what_it_wrote(tmp_path: Path) -> None:
    cp, _, path = checkpointer(tmp_path, every_steps=1, keep=2)
    for step in (1, 2, 3):
        cp.submit(lambda step=step: state(step))  # type: ignore[misc]
        assert cp.wait(10)
    manifests = cp.checkpoints.manifests()
    assert [(m.step, m.generation, m.epoch, m.consumed) for m in manifests] == [
        (3, 3, 1, 192),
        (2, 3, 1, 128),
    ]
    assert manifests[0].framework == "paddle" and manifests[0].writer == "pod-a"
    (counts,), errors = read_stats(tmp_path)
    assert errors == [] and path.exists()
    assert counts.writes == 3 and counts.last_step == 3 and counts.failures == 0
    assert counts.bytes > 3 * manifests[0].size and sum(counts.bucket_counts) == 3
    assert 0 < counts.stall_seconds <= counts.seconds_sum


def test_the_last_checkpoint_is_written_once_and_the_finish_always(tmp_path: Path) -> None:
    cp, _, _ = checkpointer(tmp_path)
    assert cp.write_now(lambda: state(5)) is not None
    assert cp.write_now(lambda: state(5)) is None  # nothing new to write
    done = cp.write_now(lambda: state(5), finished=True)
    assert done is not None and done.finished and finished_at(cp.checkpoints) == 5


def test_a_failed_write_is_counted_and_training_goes_on(tmp_path: Path) -> None:
    cp, _, _ = checkpointer(tmp_path)
    (tmp_path / "ckpt").write_text("a file where the directory should be")
    assert cp.write_now(lambda: state(5)) is None
    (counts,), _ = read_stats(tmp_path)
    assert counts.failures == 1 and counts.writes == 0


def test_restore_takes_the_newest_verified_state_and_counts_the_corrupt(tmp_path: Path) -> None:
    cp, _, _ = checkpointer(tmp_path)
    assert cp.newest_step() == -1 and cp.newest_after(-1) is None
    cp.write_now(lambda: state(10))
    newest = cp.write_now(lambda: state(20))
    assert newest is not None
    (tmp_path / "ckpt" / newest.payload_name).write_bytes(b"garbage")
    assert cp.newest_step() == 20  # the hint reads manifests only
    found = cp.newest_after(5)
    assert found is not None and found.state.step == 10 and found.manifest.step == 10
    np.testing.assert_array_equal(found.state.model["w"], np.full(10, 10, dtype=np.float32))
    assert cp.newest_after(10) is None
    (counts,), _ = read_stats(tmp_path)
    assert counts.invalid == 2 and counts.last_step == 10  # checked twice, restored from 10


def test_a_checkpoint_of_another_framework_is_refused(tmp_path: Path) -> None:
    cp, _, _ = checkpointer(tmp_path)
    cp.write_now(lambda: state(10))
    other = Checkpointer(cp.checkpoints, cp.settings, "torch", cp.stats)
    with pytest.raises(CheckpointError, match="holds paddle state; this trainer trains with torch"):
        other.newest_after(-1)


# -- metrics --------------------------------------------------------------------------------------


def scrape(metrics_dir: Path, now: float) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(CheckpointCollector(metrics_dir, CollectorHealth(), wall=lambda: now))
    return generate_latest(registry).decode()


def test_the_agent_exports_checkpoint_metrics_over_every_incarnation(tmp_path: Path) -> None:
    assert scrape(tmp_path, 0.0) == ""  # no checkpointing trainer: no series
    first, second = (
        CheckpointStats(stats_path(tmp_path, 1)),
        CheckpointStats(stats_path(tmp_path, 2)),
    )
    first.wrote(50, 1000.0, 4096, 0.2, 0.01)
    first.invalid()
    second.restored(50, 1000.0)
    second.wrote(100, 1030.0, 4096, 0.03, 0.002)
    second.failed()
    text = scrape(tmp_path, 1042.5)
    assert 'edl_trainer_checkpoint_seconds_bucket{le="0.025"} 0.0' in text
    assert 'edl_trainer_checkpoint_seconds_bucket{le="0.05"} 1.0' in text
    assert 'edl_trainer_checkpoint_seconds_bucket{le="+Inf"} 2.0' in text
    assert "edl_trainer_checkpoint_seconds_count 2.0" in text
    assert "edl_trainer_checkpoint_bytes_total 8192.0" in text
    assert "edl_trainer_checkpoint_invalid_total 1.0" in text
    assert "edl_trainer_checkpoint_failures_total 1.0" in text
    assert "edl_trainer_checkpoint_stall_seconds_total 0.012" in text
    assert "edl_trainer_checkpoint_last_step 100.0" in text
    assert "edl_trainer_checkpoint_last_timestamp_seconds 1030.0" in text
    assert "edl_trainer_checkpoint_age_seconds 12.5" in text


def test_an_unreadable_report_is_counted_not_fatal(tmp_path: Path) -> None:
    CheckpointStats(stats_path(tmp_path, 1)).wrote(5, 10.0, 1, 0.1, 0.0)
    stats_path(tmp_path, 2).write_text("{")
    health = CollectorHealth()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(CheckpointCollector(tmp_path, health))
    assert "edl_trainer_checkpoint_last_step 5.0" in generate_latest(registry).decode()
    assert health.errors("checkpoints") == 1


def test_a_view_of_a_live_tensor_is_copied_before_training_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch's `.numpy()` shares the tensor's memory: the next optimizer step must not reach
    the checkpoint the writer thread serialises afterwards."""
    cp, _, _ = checkpointer(tmp_path)
    serialise, stepped = TrainingState.to_bytes, threading.Event()

    def after_the_step(self: TrainingState) -> bytes:
        assert stepped.wait(10)
        return serialise(self)

    monkeypatch.setattr(TrainingState, "to_bytes", after_the_step)
    weights = np.zeros(1000, dtype=np.float32)  # the "tensor"
    view = weights[:]
    assert not view.flags.owndata
    cp.submit(lambda: TrainingState(1, 1, {"w": view}, {"m": [view]}, {}, {}))
    weights += 1.0  # the optimizer step right after the boundary
    stepped.set()
    assert cp.wait(30)
    found = cp.newest_after(-1)
    assert found is not None
    assert not found.state.model["w"].any() and not found.state.optimizer["m"][0].any()
