"""Every environment variable that crosses the agent -> trainer boundary, named once.

The agent sets the first group when it starts a trainer; the second group are trainer settings a
user may set on the agent (its environment passes through). A framework's own variables
(`PADDLE_*`, `RANK`, `MASTER_ADDR`, ...) are not here: each framework maps the neutral world to
them at launch (`agent.trainer.frameworks`).
"""

from __future__ import annotations

# -- set by the agent -------------------------------------------------------------------------
METRICS_DIR = "EDL_METRICS_DIR"
"""Where the trainer writes its metrics report."""
INCARNATION = "EDL_TRAINER_INCARNATION"
"""Which start of the trainer this is (1, 2, ...)."""
FLUSH_SECONDS = "EDL_METRICS_FLUSH_SECONDS"
"""How often the trainer rewrites its report."""
GENERATION = "EDL_GENERATION"
"""Generation of the trainer's world (0: a warm stand-by that has no world yet)."""
FRAMEWORK = "EDL_FRAMEWORK"
"""Which registered framework the trainer uses (`paddle`, `torch`); unset: the trainer detects."""
CONTROL_DIR = "EDL_CONTROL_DIR"
"""The elastic control channel (`agent.protocol.control`)."""
STATE_DIR = "EDL_STATE_DIR"
"""This member's local copy of the training state."""
MEMBER = "EDL_MEMBER"
"""The agent's member id (names ledger files)."""
AGENT_LEASE_FD = "EDL_AGENT_LEASE_FD"
"""Read end of a pipe the agent holds open: end-of-file means the agent is gone."""
JOB = "EDL_JOB"
"""The job's name (its durable checkpoints live under ``<checkpoint URL>/<job>``)."""

# -- trainer settings a user may set on the agent ----------------------------------------------
LOCAL_SAVE_SECONDS = "EDL_LOCAL_SAVE_SECONDS"
"""Also save the local state copy this often (bounds the loss if every trainer hangs)."""
LOCAL_SAVE_SECONDS_OLD = "EDL_CHECKPOINT_SECONDS"
"""The former name of `LOCAL_SAVE_SECONDS` (still read when the new one is unset)."""
CHECKPOINT_URL = "EDL_CHECKPOINT_URL"
"""Where the job's durable checkpoints live (`agent.checkpoints`); unset: none."""
CHECKPOINT_EVERY_STEPS = "EDL_CHECKPOINT_EVERY_STEPS"
"""Durable checkpoint after this many steps (0: not by steps)."""
CHECKPOINT_EVERY_SECONDS = "EDL_CHECKPOINT_EVERY_SECONDS"
"""Durable checkpoint when this long has passed since the last (0: not by time)."""
CHECKPOINT_KEEP = "EDL_CHECKPOINT_KEEP"
"""Durable checkpoints kept; older ones are pruned."""
S3_ADDRESSING_STYLE = "EDL_S3_ADDRESSING_STYLE"
"""``s3://`` checkpoints: path, virtual or auto (default: path with ``AWS_ENDPOINT_URL``)."""
MASTER_WAIT = "EDL_MASTER_WAIT_SECONDS"
"""How long a non-zero rank waits for rank 0's store to listen."""
REINIT = "EDL_REINIT"
"""``auto`` (in-process re-init where the self-test passes) or ``process``."""
REINIT_WAIT = "EDL_REINIT_WAIT_SECONDS"
"""How long a drained in-process trainer waits for its next world."""
REINIT_LIMIT = "EDL_REINIT_LIMIT"
"""In-process generations per trainer process before it takes the process path once."""
STORE_PORTS = "EDL_STORE_PORTS"
"""``LOW-HIGH``: the ports rank 0's per-generation store may take (unset: the kernel's choice)."""
SAMPLE_LEDGER = "EDL_SAMPLE_LEDGER"
"""Test mode: every rank appends the sample ids it trains to files in this directory."""
STEP_GATE = "EDL_STEP_GATE"
"""Test mode: a file holding how many global steps the job may take (`agent.trainer.step_gate`)."""
