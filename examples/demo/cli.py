"""The demos' command line: ``python -m examples.demo`` (``make demo``) and
``python -m examples.demo.on_cluster`` (``make demo-cluster``) take the same options."""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from examples.demo.run import Demo, DemoError, DemoOptions, EmbeddedDemo

SHORT = {"epochs": 20, "dwell_steps": 20}
"""The integration test's run: the same story with fewer steps in each act."""


def parse(argv: Sequence[str], kind: type[Demo] = EmbeddedDemo) -> DemoOptions:
    d = DemoOptions()
    ap = argparse.ArgumentParser(
        prog=kind.command,
        description=f"EDL's demo {kind.title}: an elastic job grows into freed capacity, "
        "shrinks for a higher-priority arrival, and loses nothing (docs/demo.md).",
    )
    ap.add_argument("--epochs", type=int, help=f"epochs of the digits job (default {d.epochs})")
    ap.add_argument(
        "--dwell-steps", type=int, help=f"steps per act of the story (default {d.dwell_steps})"
    )
    ap.add_argument("--short", action="store_true", help="a shorter job (the integration test)")
    ap.add_argument("--out", type=Path, default=d.out, help="report, summary and logs (out/demo)")
    ap.add_argument("--plain", action="store_true", help="plain lines even on a terminal")
    ap.add_argument("--timeout", type=float, default=d.timeout_s, help="give up after (s)")
    ns = ap.parse_args(argv)
    epochs = ns.epochs or (SHORT["epochs"] if ns.short else d.epochs)
    dwell = ns.dwell_steps or (SHORT["dwell_steps"] if ns.short else d.dwell_steps)
    if epochs < 1 or dwell < 1:
        ap.error("--epochs and --dwell-steps must be >= 1")
    return DemoOptions(
        epochs=epochs,
        dwell_steps=dwell,
        out=ns.out,
        live=sys.stdout.isatty() and not ns.plain,
        timeout_s=ns.timeout,
    )


def main(argv: Sequence[str] | None = None, kind: type[Demo] = EmbeddedDemo) -> int:
    opts = parse(sys.argv[1:] if argv is None else argv, kind)
    demo = kind(opts)

    def stop(signum: int, frame: FrameType | None) -> None:
        # the first Ctrl-C (or SIGTERM) unwinds the run, whose clean-up stops every process;
        # a second one cuts the clean-up's waits short
        if demo.stopping:
            demo.procs.hurry = True
            return
        demo.stopping = True
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    try:
        return demo.run()
    except KeyboardInterrupt:
        print("\nstopped: every process of the demo has ended", flush=True)
        return 130
    except DemoError as e:
        print(f"\ndemo failed: {e}", flush=True)
        return 1
