"""What one checkpoint write and one restore cost in each store: a directory, ``s3://``, ``sftp://``.

The catalogue's own `write` (payload, manifest, the store's sweep) and `newest_usable` (list,
manifest, payload, size and SHA-256 check) on payloads of the digits example's state (0.11 MB),
the wide model's of bench_checkpoint.py (13.5 MB) and a 128 MiB one (a multipart upload of two
64 MiB parts on S3), against a local directory (fsync included) and versitygw on 127.0.0.1
serving the same disk (tests/support/s3_gateway.py): the S3 column is the SDK, HTTP and the
gateway on top of the disk, not a remote bucket's network; and the fsspec store over SFTP to
OpenSSH's sshd on 127.0.0.1 (tests/support/sftp_server.py; fsspec's sftp, i.e. paramiko), the
same way. Medians of `--rounds` runs, side by side in one run; figures are printed, never
asserted.

    python bench/bench_checkpoint_store.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent.checkpoints import fsspec_store  # noqa: E402
from agent.checkpoints.catalogue import Checkpoints  # noqa: E402
from agent.checkpoints.local import LocalDirectory  # noqa: E402
from agent.checkpoints.s3 import open_url  # noqa: E402
from agent.checkpoints.store import CheckpointStore  # noqa: E402
from tests.support.s3_gateway import running_gateway  # noqa: E402
from tests.support.sftp_server import running_sftp_server  # noqa: E402

SIZES = (int(0.11e6), int(13.5e6), 128 << 20)


def timed(store: CheckpointStore, payload: bytes, rounds: int) -> tuple[float, float]:
    """Median seconds of one write and of one restore of `payload` in `store`."""
    c = Checkpoints(store)
    writes, reads = [], []
    for step in range(1, rounds + 1):
        start = time.perf_counter()
        c.write(payload, step=step, generation=1, epoch=0, consumed=0, framework="paddle")
        writes.append(time.perf_counter() - start)
        start = time.perf_counter()
        found = c.newest_usable(lambda m, blob: len(blob))
        reads.append(time.perf_counter() - start)
        assert found is not None and found[1] == len(payload)
        c.prune(2)
    return statistics.median(writes), statistics.median(reads)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="edl-bench-store-") as tmp,
        running_gateway(Path(tmp) / "s3") as gateway,
        running_sftp_server(Path(tmp) / "sshd") as sftp,
    ):
        import fsspec.config

        os.environ.update(gateway.env)
        fsspec.config.conf["sftp"] = {"key_filename": str(sftp.key)}
        bucket = gateway.bucket()
        print(f"versitygw at {gateway.endpoint}, sshd at {sftp.url('')}; load average "
              f"{os.getloadavg()[0]:.1f}")  # fmt: skip
        print("| payload | directory: write | directory: restore | s3: write | s3: restore "
              "| sftp: write | sftp: restore |")  # fmt: skip
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for i, size in enumerate(SIZES):
            payload = os.urandom(size)
            local = timed(LocalDirectory(Path(tmp) / f"dir-{i}"), payload, args.rounds)
            s3 = timed(open_url(f"s3://{bucket}/bench-{i}"), payload, args.rounds)
            remote = fsspec_store.open_url(sftp.url(Path(tmp) / f"sftp-{i}"))
            over_sftp = timed(remote, payload, args.rounds)
            cells = " | ".join(f"{t * 1000:.1f} ms" for t in (*local, *s3, *over_sftp))
            print(f"| {size / 1e6:.2f} MB | {cells} |")


if __name__ == "__main__":
    main()
