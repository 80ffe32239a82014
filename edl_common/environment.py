"""A warning for ``EDL_*`` variables no option reads: a misspelt one is otherwise ignored.

``EDL_SCRAPE_INTERVL=2s`` silently leaves the default in place; this names it and the closest
known variable, once, at start.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping

PREFIX = "EDL_"

PROJECT_VARIABLES = frozenset(
    {
        "EDL_LOG_FORMAT",  # every CLI (edl_common.logs)
        "EDL_BUILD_REVISION",  # set by the images
        # the project's own build and test scripts (make, scripts/, tests/): exported into
        # every process they start, never a misspelt option
        "EDL_CACHE_DIR",
        "EDL_TEST_ARTIFACTS",
        "EDL_IMAGES",
        "EDL_IMAGE_BUILDER",
        "EDL_BUILD_CA_BUNDLE",
        "EDL_BUILD_ISOLATION",
        "EDL_DEBIAN_MIRROR",
        "EDL_DEBIAN_SECURITY_MIRROR",
        "EDL_NEED_MMDEBSTRAP",
        "EDL_NEED_RUNC",
        "EDL_PADDLE_REQUIREMENT",
        # what the agent sets for its trainer (agent/protocol/env.py): a trainer's process
        # and whatever it starts see them, and they are nobody's misspelt option
        "EDL_METRICS_DIR",
        "EDL_TRAINER_INCARNATION",
        "EDL_METRICS_FLUSH_SECONDS",
        "EDL_GENERATION",
        "EDL_FRAMEWORK",
        "EDL_CONTROL_DIR",
        "EDL_STATE_DIR",
        "EDL_MEMBER",
        "EDL_AGENT_LEASE_FD",
        "EDL_JOB",
        "EDL_LOCAL_SAVE_SECONDS",
        "EDL_CHECKPOINT_SECONDS",
        "EDL_CHECKPOINT_URL",
        "EDL_CHECKPOINT_EVERY_STEPS",
        "EDL_CHECKPOINT_EVERY_SECONDS",
        "EDL_CHECKPOINT_KEEP",
        "EDL_S3_ADDRESSING_STYLE",
        "EDL_MASTER_WAIT_SECONDS",
        "EDL_REINIT",
        "EDL_REINIT_WAIT_SECONDS",
        "EDL_REINIT_LIMIT",
        "EDL_STORE_PORTS",
        "EDL_SAMPLE_LEDGER",
        "EDL_STEP_GATE",
    }
)
"""``EDL_*`` names that are not options of any CLI but are read elsewhere: always known."""


def unknown_variables(env: Mapping[str, str], known: Iterable[str]) -> list[str]:
    """One warning line per ``EDL_*`` name in `env` that is not in `known` (sorted)."""
    names = set(known) | PROJECT_VARIABLES
    lines = []
    for name in sorted(k for k in env if k.startswith(PREFIX) and k not in names):
        close = difflib.get_close_matches(name, sorted(names), n=1, cutoff=0.8)
        hint = f" (did you mean {close[0]}?)" if close else ""
        lines.append(f"unknown environment variable {name} is ignored{hint}")
    return lines
