"""`ELASTIC_OPTIONS`: the rows of `edl-agent run --elastic` (membership, rescale phases).

Apart from `agent.process.settings` so that the dataclasses these rows fill (`MembershipSettings`,
`ElasticSettings`) take their defaults from here, written once, without importing the CLI's
settings. The checkpoint rows are `agent.checkpoints.settings`'.
"""

from __future__ import annotations

from typing import Any

from agent.protocol import env as names
from edl_common.options import PATH, SWITCH, TEXT, Option, choice, duration, integer, read

LIVENESS: dict[str, dict[str, float]] = {
    "kubernetes": {"heartbeat_interval": 5.0, "ttl": 15.0},
    "local": {"heartbeat_interval": 1.0, "ttl": 10.0},
}
"""Seconds between heartbeat renewals and the TTL, per membership backend: the one place they
are written. The Kubernetes pair is the option rows' default (a renewal costs the API server a
write: 5 s, 15 s keep 1,000 members near 200 writes/s); `local:` renews a file, which costs no
server anything, so a member there keeps the faster detection (`runner._liveness`)."""
_K8S, _LOCAL = LIVENESS["kubernetes"], LIVENESS["local"]

ELASTIC = "elastic training"
MEMBERSHIP = "membership"
PHASES = "rescale phases"

ELASTIC_OPTIONS: tuple[Option, ...] = (
    Option("elastic", "--elastic", None, SWITCH, None, "join an elastic job", ELASTIC),
    Option(
        "job", "--job", names.JOB, TEXT, None, "job name; agents of one job train together", ELASTIC
    ),
    Option(
        "membership",
        "--membership",
        "EDL_MEMBERSHIP",
        TEXT,
        None,
        "local:/dir (files on one machine) or kubernetes (Leases and a ConfigMap)",
        ELASTIC,
        bad="etcd://nowhere",
    ),
    Option(
        "min_world",
        "--min",
        "EDL_MIN_WORLD",
        integer(1),
        "1",
        "smallest world: below it the job pauses",
        ELASTIC,
    ),
    Option(
        "max_world",
        "--max",
        "EDL_MAX_WORLD",
        integer(1),
        "64",
        "largest world: members beyond it wait as stand-bys",
        ELASTIC,
    ),
    Option(
        "on_finished",
        "--on-finished",
        "EDL_ON_FINISHED",
        choice("idle", "exit", "scale-to-zero"),
        "idle",
        "once the job is finished: idle (no trainer, ready, until SIGTERM; what a Deployment "
        "needs), exit 0 (a Job, a local run) or scale-to-zero (idle, and scale the Deployment "
        "named by --deployment to 0 with an Event, freeing its resources)",
        ELASTIC,
    ),
    Option(
        "failure_budget",
        "--failure-budget",
        "EDL_FAILURE_BUDGET",
        integer(0),
        "0",
        "trainer failures (exits other than 0 and a rescale's, across every member and "
        "restart of the job) the job survives within --failure-window; one more and the job "
        "is failed: no trainer starts any more, and with --on-finished scale-to-zero the "
        "Deployment goes to 0 with a JobFailed Event; 0: no budget",
        ELASTIC,
    ),
    Option(
        "failure_window",
        "--failure-window",
        "EDL_FAILURE_WINDOW",
        duration(),
        "10m",
        "how long a trainer failure counts against --failure-budget",
        ELASTIC,
    ),
    Option(
        "deployment",
        "--deployment",
        "EDL_DEPLOYMENT",
        TEXT,
        None,
        "this job's Deployment, for --on-finished scale-to-zero (it needs get/patch on its "
        "scale subresource only)",
        ELASTIC,
    ),
    Option(
        "member_id",
        None,
        "EDL_MEMBER_ID",
        TEXT,
        None,
        "member name (default: POD_NAME, else host name and pid)",
        ELASTIC,
    ),
    Option(
        "advertise_host",
        None,
        "EDL_ADVERTISE_HOST",
        TEXT,
        None,
        "where peers reach this trainer (default: POD_IP, else 127.0.0.1)",
        ELASTIC,
    ),
    Option(
        "trainer_ports",
        None,
        "EDL_TRAINER_PORTS",
        TEXT,
        None,
        "two ports, comma separated, where rank 0's trainer answers its generation's "
        "rendezvous (generations alternate), or auto: free ones below the ephemeral range "
        "(default: 29543,29544; auto with local: membership, where members share a network "
        "namespace)",
        ELASTIC,
        bad="29543",
    ),
    Option(
        "elastic_dir",
        None,
        "EDL_ELASTIC_DIR",
        PATH,
        None,
        "this member's control channel and local state copy (default: a temporary dir)",
        ELASTIC,
    ),
    Option(
        "heartbeat_interval",
        None,
        "EDL_HEARTBEAT_INTERVAL",
        duration(),
        f"{_K8S['heartbeat_interval']:g}s",
        f"time between heartbeat renewals (local: membership {_LOCAL['heartbeat_interval']:g}s; "
        "with only EDL_MEMBER_TTL set, at "
        "most a third of it); on Kubernetes also how often a member checks that the job's "
        "coordinator (the one member watching every heartbeat) is live, and re-reads the world "
        "when no watch event came",
        MEMBERSHIP,
    ),
    Option(
        "ttl",
        None,
        "EDL_MEMBER_TTL",
        duration(),
        f"{_K8S['ttl']:g}s",
        "a member whose heartbeat has not been renewed for this long is gone (more than two "
        f"heartbeat intervals; local: membership {_LOCAL['ttl']:g}s; with only "
        "EDL_HEARTBEAT_INTERVAL set, at "
        "least three of it); on Kubernetes judged from the Lease's renewTime, and a "
        "coordinator silent this long is replaced",
        MEMBERSHIP,
    ),
    Option(
        "debounce",
        None,
        "EDL_DEBOUNCE",
        duration(allow_zero=True),
        "1s",
        "joins wait for the live set to be still before a new generation is written: a lone "
        "change to a world still for this long 5 % of this, otherwise a quarter of this and "
        "each further change in the window a quarter more, up to this (a burst becomes one); "
        "a planned leave is written at once",
        MEMBERSHIP,
    ),
    Option(
        "max_debounce",
        None,
        "EDL_MAX_DEBOUNCE",
        duration(allow_zero=True),
        "5s",
        "a pending change is written after this long even if joins keep coming",
        MEMBERSHIP,
    ),
    Option(
        "poll_interval",
        None,
        "EDL_POLL_INTERVAL",
        duration(),
        "200ms",
        "time between reads of the membership store when nothing wakes the agent sooner (its "
        "watch reports joins, leaves and new worlds at once: the poll is the safety net)",
        MEMBERSHIP,
    ),
    Option(
        "drain_timeout",
        None,
        "EDL_DRAIN_TIMEOUT",
        duration(),
        "30s",
        "a trainer asked to stop gets this long to reach a step boundary (then SIGTERM, 5 s, "
        "SIGKILL); a live trainer handed a new world gets this long to take it",
        PHASES,
    ),
    Option(
        "init_timeout",
        None,
        "EDL_INIT_TIMEOUT",
        duration(),
        "2m0s",
        "a new trainer must have joined its collective within this long",
        PHASES,
    ),
    Option(
        "regroup_timeout",
        None,
        "EDL_REGROUP_TIMEOUT",
        duration(),
        "20s",
        "after a broken collective without a membership change, wait this long before forcing "
        "a fresh generation of the same members",
        PHASES,
    ),
    Option(
        "max_resets",
        None,
        "EDL_MAX_RESETS",
        integer(0),
        "5",
        "forced generations in a row without a completed step before giving up",
        PHASES,
    ),
    Option(
        "stall_timeout",
        None,
        "EDL_STALL_TIMEOUT",
        duration(allow_zero=True),
        "10s",
        "a trainer stopped (SIGSTOP) this long, or in its training loop without rewriting its "
        "report for three times this long, stands still: it is killed and this member leaves "
        "the job",
        PHASES,
    ),
    Option(
        "backend",
        None,
        "EDL_DISTRI_BACKEND",
        choice("gloo", "nccl"),
        None,
        "the trainer's collective backend (default: nccl if /dev/nvidia0, else gloo)",
        PHASES,
    ),
)
"""Options of `edl-agent run --elastic` (the checkpoint rows are `agent.checkpoints.settings`)."""

DEFAULTS: dict[str, Any] = read(ELASTIC_OPTIONS, {}, {})
"""Each row's default, parsed: what the dataclasses' fields default to."""
