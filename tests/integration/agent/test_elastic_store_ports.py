"""A generation's store port in use on another address never stops a trainer (issue 37).

Paddle's and torch's TCPStore bind 0.0.0.0; Paddle's aborts the process (SIGABRT, exit 134)
when that bind fails. EDL used to check the port on 127.0.0.1 only, so a port held on another
loopback address (another suite's sockets, any process of a hostNetwork pod's node) passed the
check and killed the trainer. Here most ports of ``EDL_STORE_PORTS`` are held on other
addresses, as `socket_holder.py` holds them (listeners on one address, connections bound on
another): real agents and trainers must form their world on a port free on every address and
train the job to its end.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from agent.trainer.ledger import verify
from tests.support.digits_job import NUM_TRAIN, SCRIPTS, Job
from tests.support.net import free_port
from tests.support.waiting import wait_for

EPOCHS = 2
HELD, FREE = 12, 4


class Band:
    """`HELD` + `FREE` consecutive ports; the first `HELD` in use on other loopback addresses."""

    def __init__(self) -> None:
        self.sockets: list[socket.socket] = []
        for _ in range(50):
            start = free_port()
            self.ports = range(start, start + HELD + FREE)
            try:
                self._hold(start)
            except OSError:
                self.close()
                continue
            return
        raise RuntimeError("no band of free ports found in 50 tries")

    def _hold(self, start: int) -> None:
        for port in self.ports[HELD:]:  # free on every address now
            with socket.socket() as s:
                s.bind(("0.0.0.0", port))
        target = socket.socket()  # what the connections below are connected to
        self.sockets.append(target)
        target.bind(("127.0.5.1", 0))
        target.listen(64)
        for port in self.ports[:HELD]:
            s = socket.socket()
            self.sockets.append(s)
            if port % 2:  # a listener on another address
                s.bind(("127.0.0.2", port))
                s.listen(8)
            else:  # a connection bound on another address, as socket_holder.py keeps them
                s.bind(("127.0.6.1", port))
                s.connect(target.getsockname())

    @property
    def free(self) -> set[int]:
        return set(self.ports[HELD:])

    def close(self) -> None:
        for s in self.sockets:
            s.close()
        self.sockets = []


@pytest.fixture
def band() -> Iterator[Band]:
    b = Band()
    yield b
    b.close()


def store_ports_listening(job: Job, ports: range) -> set[int]:
    """Ports of `ports` a trainer of `job` listens on now (its generation's store)."""
    found: set[int] = set()
    for proc in job.procs.values():
        try:
            for trainer in psutil.Process(proc.pid).children():
                for conn in trainer.net_connections(kind="tcp"):
                    if conn.status == psutil.CONN_LISTEN and conn.laddr.port in ports:
                        found.add(conn.laddr.port)
        except psutil.Error:
            continue  # a process that just ended
    return found


@pytest.mark.slow
@pytest.mark.timeout(900)  # bounds only: the waits end as soon as they can
@pytest.mark.parametrize(
    ("framework", "reinit"), [("paddle", "auto"), ("paddle", "process"), ("torch", "auto")]
)
def test_store_ports_held_on_other_addresses_never_stop_a_trainer(
    tmp_path: Path, band: Band, framework: str, reinit: str
) -> None:
    job = Job(
        tmp_path,
        ["--epochs", str(EPOCHS), "--global-batch", "64", "--seed", "3"],
        script=SCRIPTS[framework],
        allowed_steps=0,
    )
    job.extra_env.update(
        EDL_STORE_PORTS=f"{band.ports.start}-{band.ports.stop - 1}", EDL_REINIT=reinit
    )
    stores: set[int] = set()

    def world_of_2_trains() -> bool:
        stores.update(store_ports_listening(job, band.ports))
        return job.trained(2, 5)

    try:
        job.start("a")
        job.start("b")
        wait_for(
            world_of_2_trains,
            timeout_s=600,
            what="a world of 2 training",
            interval_s=0.2,
            describe=job.describe,
        )
        job.release()
        wait_for(
            lambda: all(p.poll() is not None for p in job.procs.values()),
            timeout_s=300,
            what="the job to end",
            interval_s=0.2,
            describe=job.describe,
        )
        assert [p.returncode for p in job.procs.values()] == [0, 0]
        # the world of 2's store listened, on a port free on every address
        assert stores and stores <= band.free, (stores, band.free)
        assert verify(job.ledger).problems(NUM_TRAIN, EPOCHS) == []
    finally:
        job.stop_all()
        for name in job.procs:
            log = tmp_path / f"{name}.log"
            if log.exists():
                print(
                    f"---- {name}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-25:])
                )
