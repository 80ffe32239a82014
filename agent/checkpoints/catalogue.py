"""One job's checkpoints in a store: write, find the newest usable one, prune to the last K.

A checkpoint is two objects: the payload (``<name>.state``, the serialised training state) and
its manifest (``<name>.json``), written in that order. The manifest is the commit: a payload
without one is a write that never finished, and is ignored (and pruned). The manifest says
what the payload is (global step, generation, epoch position, framework, whether the job was
finished) and carries the payload's SHA-256 and size, so a corrupt or truncated payload is
detected before anything loads it, and the previous checkpoint is used instead.

Names order checkpoints by a sequence number (one more than the newest in the store) that the
one writer of a generation assigns: "newest" means written last, whatever its step, so a job
that restarted from an older checkpoint (after a corrupt newer one) moves on from there.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import TypeVar

from agent.checkpoints.errors import CheckpointInvalid, CheckpointMissing, CheckpointStoreError
from agent.checkpoints.store import CheckpointStore

log = logging.getLogger(__name__)

MANIFEST_FORMAT = 1
PAYLOAD_SUFFIX = ".state"
MANIFEST_SUFFIX = ".json"
_NAME = re.compile(r"^ckpt-(\d{10})-g(\d{6,})-s(\d{10,})$")

T = TypeVar("T")


@dataclass(frozen=True)
class Manifest:
    """What one checkpoint holds; stored as JSON beside its payload."""

    seq: int
    """Write order within the job (1, 2, ...)."""
    step: int
    """Global steps the state has completed."""
    generation: int
    """Generation whose rank 0 wrote it."""
    epoch: int
    """The sampler's epoch at that step."""
    consumed: int
    """Samples of that epoch already trained (the sampler resumes here)."""
    sha256: str
    """Hex SHA-256 of the payload."""
    size: int
    """Payload bytes."""
    framework: str
    """The framework whose state the payload holds (`paddle`, `torch`)."""
    written_at: float
    """Unix time the writer committed it."""
    finished: bool = False
    """The job ended at this step: a finished job is never resumed."""
    writer: str = ""
    """Member id of the writer."""

    @property
    def name(self) -> str:
        """``ckpt-<seq>-g<generation>-s<step>``: unique per writer, sorted by `seq`."""
        return f"ckpt-{self.seq:010d}-g{self.generation:06d}-s{self.step:010d}"

    @property
    def payload_name(self) -> str:
        """The payload object's name."""
        return self.name + PAYLOAD_SUFFIX

    @property
    def manifest_name(self) -> str:
        """The manifest object's name."""
        return self.name + MANIFEST_SUFFIX

    def to_json(self) -> bytes:
        """The stored manifest."""
        return json.dumps({"format": MANIFEST_FORMAT, **asdict(self)}, sort_keys=True).encode()

    @classmethod
    def from_json(cls, blob: bytes) -> Manifest:
        """Parses a stored manifest; raises `CheckpointInvalid`."""
        try:
            raw = json.loads(blob)
            if not isinstance(raw, dict) or raw.get("format") != MANIFEST_FORMAT:
                raise ValueError(f"not a format-{MANIFEST_FORMAT} manifest")
            return cls(
                seq=int(raw["seq"]),
                step=int(raw["step"]),
                generation=int(raw["generation"]),
                epoch=int(raw["epoch"]),
                consumed=int(raw["consumed"]),
                sha256=str(raw["sha256"]),
                size=int(raw["size"]),
                framework=str(raw["framework"]),
                written_at=float(raw["written_at"]),
                finished=bool(raw.get("finished", False)),
                writer=str(raw.get("writer", "")),
            )
        except (ValueError, KeyError, TypeError) as e:
            raise CheckpointInvalid(f"unreadable manifest: {e}") from e


def _key(name: str) -> tuple[int, int, int] | None:
    """(seq, generation, step) of a checkpoint name, None for any other object."""
    match = _NAME.match(name)
    return None if match is None else (int(match[1]), int(match[2]), int(match[3]))


def digest(payload: bytes) -> str:
    """The payload's SHA-256, as the manifest records it."""
    return hashlib.sha256(payload).hexdigest()


class Checkpoints:
    """The checkpoints of one job in `store`.

    `on_invalid(name, why)` is called for every checkpoint found unusable on the way to a
    usable one (the trainer counts them in ``edl_trainer_checkpoint_invalid_total``).
    """

    def __init__(
        self,
        store: CheckpointStore,
        on_invalid: Callable[[str, str], None] | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self._on_invalid = on_invalid
        self._wall = wall

    def _committed(self) -> list[str]:
        """Checkpoint names whose manifest is stored, newest first."""
        keyed = []
        for obj in self.store.names():
            if obj.endswith(MANIFEST_SUFFIX):
                name = obj[: -len(MANIFEST_SUFFIX)]
                key = _key(name)
                if key is not None:
                    keyed.append((key, name))
        return [name for _, name in sorted(keyed, reverse=True)]

    def manifests(self) -> list[Manifest]:
        """Every readable manifest, newest first (an unreadable one is logged and left out)."""
        found = []
        for name in self._committed():
            try:
                found.append(self._manifest(name))
            except CheckpointInvalid as e:
                log.warning("checkpoint %s in %s: %s", name, self.store.url, e)
        return found

    def latest(self) -> Manifest | None:
        """The newest readable manifest (its payload not checked: cheap enough for a hint)."""
        for name in self._committed():
            try:
                return self._manifest(name)
            except CheckpointInvalid:
                continue
        return None

    def _manifest(self, name: str) -> Manifest:
        try:
            manifest = Manifest.from_json(self.store.get(name + MANIFEST_SUFFIX))
        except CheckpointMissing as e:
            raise CheckpointInvalid(f"manifest vanished: {e}") from e
        if manifest.name != name:
            raise CheckpointInvalid(f"manifest describes {manifest.name}")
        return manifest

    def write(
        self,
        payload: bytes,
        *,
        step: int,
        generation: int,
        epoch: int,
        consumed: int,
        framework: str,
        finished: bool = False,
        writer: str = "",
    ) -> Manifest:
        """Stores one checkpoint: the payload, then its manifest (the commit)."""
        keys = [k for n in self.store.names() if (k := _key(n.rsplit(".", 1)[0]))]
        seq = 1 + max((k[0] for k in keys), default=0)
        fields = Manifest(seq, step, generation, epoch, consumed, digest(payload), len(payload),
                          framework, 0.0, finished, writer)  # fmt: skip
        self.store.put(fields.payload_name, payload)
        manifest = replace(fields, written_at=self._wall())
        self.store.put(manifest.manifest_name, manifest.to_json())
        return manifest

    def read(self, manifest: Manifest) -> bytes:
        """The payload of `manifest`, checked against its size and SHA-256."""
        try:
            payload = self.store.get(manifest.payload_name)
        except CheckpointMissing as e:
            raise CheckpointInvalid(f"payload missing (a partial checkpoint): {e}") from e
        if len(payload) != manifest.size:
            raise CheckpointInvalid(
                f"payload is {len(payload)} bytes, the manifest says {manifest.size} (truncated)"
            )
        if digest(payload) != manifest.sha256:
            raise CheckpointInvalid("payload SHA-256 differs from the manifest's (corrupt)")
        return payload

    def newest_usable(
        self, decode: Callable[[Manifest, bytes], T], newer_than: int = -1
    ) -> tuple[Manifest, T] | None:
        """The newest checkpoint that reads back, verifies and `decode`s, if past `newer_than`.

        None when there is none, or when the newest usable one is not past step `newer_than`.
        Every unusable checkpoint on the way is logged and reported to `on_invalid`, and the
        one before it is tried. `decode` raises `CheckpointInvalid` for a payload it rejects.
        """
        for name in self._committed():
            try:
                manifest = self._manifest(name)
                if manifest.step <= newer_than:
                    return None
                return manifest, decode(manifest, self.read(manifest))
            except CheckpointInvalid as e:
                log.warning(
                    "checkpoint %s in %s is not usable (%s); trying the previous one",
                    name,
                    self.store.url,
                    e,
                )
                if self._on_invalid is not None:
                    self._on_invalid(name, str(e))
        return None

    def prune(self, keep: int) -> list[str]:
        """Keeps the newest `keep` checkpoints (at least one); returns what it removed.

        Older checkpoints go (manifest first, so no reader finds a manifest without its
        payload), and so do payloads without a manifest older than the newest checkpoint
        (writes that died; a newer one may still be being written).
        """
        committed = self._committed()
        kept, old = committed[: max(1, keep)], committed[max(1, keep) :]
        for name in old:
            self.store.delete(name + MANIFEST_SUFFIX)
            self.store.delete(name + PAYLOAD_SUFFIX)
        newest = _key(committed[0]) if committed else None
        orphans = [
            obj[: -len(PAYLOAD_SUFFIX)]
            for obj in self.store.names()
            if obj.endswith(PAYLOAD_SUFFIX) and obj[: -len(PAYLOAD_SUFFIX)] not in kept
        ]
        for name in orphans:
            key = _key(name)
            if key is not None and newest is not None and key < newest:
                self.store.delete(name + PAYLOAD_SUFFIX)
                old.append(name)
        return old


def finished_at(checkpoints: Checkpoints) -> int | None:
    """The step at which the newest checkpoint says the job finished; None if it does not.

    Store errors count as "not known to be finished" (logged): the world record decides then.
    """
    try:
        latest = checkpoints.latest()
    except CheckpointStoreError as e:
        log.warning("cannot read the checkpoints in %s: %s", checkpoints.store.url, e)
        return None
    return latest.step if latest is not None and latest.finished else None
