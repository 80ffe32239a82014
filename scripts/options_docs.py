"""Write (or, with --check, verify) the option tables in docs/ from the CLIs' option tables.

    python scripts/options_docs.py          # rewrite every <!-- options:NAME --> block
    python scripts/options_docs.py --check  # exit 1 naming each stale block (the unit suite)

Each table lives once, in code (`agent/process/settings.py`, `agent/checkpoints/settings.py`,
`metrics_adapter/options.py`, `edl_sim/hpa/cli.py`,
`edl_sim/cluster/cli.py`); the docs show what `--help` shows.
"""

from __future__ import annotations

import sys
from pathlib import Path

from agent.elastic.runner import ELASTIC_TABLE
from agent.process.settings import OPTIONS as AGENT
from edl_common.options import Option, markdown_table, replace_block
from edl_sim.cluster.cli import RUN as SIM_RUN
from edl_sim.hpa.cli import COMMON, SIMULATE, TUNE
from metrics_adapter.options import OPTIONS as ADAPTER

ROOT = Path(__file__).resolve().parents[1]


def _only(table: tuple[Option, ...]) -> tuple[Option, ...]:
    return tuple(o for o in table if o not in COMMON)


BLOCKS: dict[str, dict[str, tuple[Option, ...]]] = {
    "docs/agent.md": {"edl-agent": AGENT},
    "docs/elastic.md": {"edl-agent-elastic": ELASTIC_TABLE},
    "docs/metrics-api.md": {"edl-adapter": ADAPTER},
    "docs/hpa-tuning.md": {
        "edl-hpa": COMMON,
        "edl-hpa-simulate": _only(SIMULATE),
        "edl-hpa-tune": _only(TUNE),
    },
    "docs/cluster-simulation.md": {"edl-sim-run": SIM_RUN},
}
"""Which tables go into which document, by block name."""


def stale(write: bool) -> list[str]:
    """The documents whose blocks differ from the tables (rewritten when `write`)."""
    found = []
    for doc, blocks in BLOCKS.items():
        path = ROOT / doc
        text = path.read_text(encoding="utf-8")
        new = text
        for name, table in blocks.items():
            new = replace_block(new, name, markdown_table(table))
        if new != text:
            found.append(doc)
            if write:
                path.write_text(new, encoding="utf-8")
    return found


def main(argv: list[str]) -> int:
    """Entry point; returns the exit status."""
    check = "--check" in argv
    found = stale(write=not check)
    for doc in found:
        print(f"{doc}: options table {'is stale' if check else 'rewritten'}", file=sys.stderr)
    if check and found:
        print("run: python scripts/options_docs.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
