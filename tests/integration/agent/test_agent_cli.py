"""`edl-agent run` as a user meets it: bad input gives one clear line and a non-zero exit,
signals reach the trainer, and the agent's status is the trainer's. Real processes, loopback."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

from examples.demo.probe import fetch
from tests.support.local_agents import REPO_ROOT
from tests.support.waiting import wait_for

PY = sys.executable
AGENT = [PY, "-m", "agent", "run", "--host", "127.0.0.1"]
ENV = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}


def run_agent(args: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*AGENT, *args], env=ENV, cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout
    )


def agent_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("edl-agent:")]


def test_an_unknown_flag_is_one_line_and_exit_2(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    r = run_agent(["--bogus", "--", PY, "-c", f"open({str(marker)!r}, 'w')"])
    assert r.returncode == 2
    assert r.stderr.splitlines() == [
        "edl-agent: error: unrecognized arguments: --bogus (see `edl-agent run --help`)"
    ]
    assert not marker.exists()


def test_a_port_in_use_is_one_line_and_no_trainer_starts(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = run_agent(["--port", str(port), "--", PY, "-c", f"open({str(marker)!r}, 'w')"])
    assert r.returncode == 1
    assert r.stderr.splitlines() == [
        f"edl-agent: error: port {port} on 127.0.0.1 is already in use"
    ]
    assert not marker.exists()


def test_an_unusable_metrics_dir_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    r = run_agent(["--port", "0", "--metrics-dir", str(blocker / "m"), "--", PY, "-c", "pass"])
    assert r.returncode == 1
    (line,) = r.stderr.splitlines()
    assert line.startswith(f"edl-agent: error: metrics directory {blocker / 'm'} is not usable")


def test_a_trainer_that_cannot_be_executed_is_exit_127() -> None:
    r = run_agent(["--port", "0", "--", "/no/such/trainer"])
    assert r.returncode == 127
    assert agent_lines(r.stderr)[-1] == (
        "edl-agent: error: cannot execute '/no/such/trainer': No such file or directory"
    )


def test_a_crashing_trainer_becomes_the_agents_status() -> None:
    r = run_agent(["--port", "0", "--", PY, "-c", "raise SystemExit(3)"])
    assert r.returncode == 3
    assert re.fullmatch(
        r"edl-agent: trainer incarnation 1 exited with status 3 after [0-9.]+ s",
        agent_lines(r.stderr)[-1],
    )


def _start(args: list[str]) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [*AGENT, "--port", "0", *args], env=ENV, cwd=REPO_ROOT, stderr=subprocess.PIPE, text=True
    )
    assert proc.stderr is not None
    line = proc.stderr.readline()  # the first line names the port
    m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
    assert m, line
    return proc, int(m.group(1))


def test_readyz_says_why_after_a_crash_while_lingering() -> None:
    proc, port = _start(["--linger-seconds", "60", "--", PY, "-c", "raise SystemExit(5)"])
    try:

        def exited() -> tuple[int, str] | None:
            answer = fetch(f"http://127.0.0.1:{port}/readyz")
            return answer if "exited" in answer[1] else None

        status, body = wait_for(
            exited,
            timeout_s=30,
            what="/readyz saying the trainer exited",
            interval_s=0.1,
        )
        assert status == 503
        assert "not ready: trainer incarnation 1 exited with status 5" in body
        assert fetch(f"http://127.0.0.1:{port}/healthz")[0] == 200
        proc.send_signal(signal.SIGTERM)  # ends the linger at once
        assert proc.wait(20) == 5
    finally:
        proc.kill()
        proc.wait()


def test_sigterm_is_forwarded_and_a_clean_trainer_exit_is_zero(tmp_path: Path) -> None:
    marker = tmp_path / "got-sigterm"
    armed = tmp_path / "handler-installed"
    trainer = (
        "import signal, sys, time\n"
        "def bye(*_):\n"
        f"    open({str(marker)!r}, 'w').close()\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, bye)\n"
        f"open({str(armed)!r}, 'w').close()\n"
        "time.sleep(60)\n"
    )
    proc, port = _start(["--", PY, "-c", trainer])
    try:
        wait_for(
            lambda: fetch(f"http://127.0.0.1:{port}/readyz")[0] == 200,
            timeout_s=30,
            what="the trainer ready",
            interval_s=0.1,
            give_up=lambda: proc.poll() is not None,
        )
        wait_for(
            armed.exists,
            timeout_s=60,
            what="the trainer's SIGTERM handler installed",
            give_up=lambda: proc.poll() is not None,
        )
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
        assert marker.exists()
    finally:
        proc.kill()
        proc.wait()


def test_a_trainer_that_ignores_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    armed = tmp_path / "ignoring-sigterm"
    trainer = (
        "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"open({str(armed)!r}, 'w').close()\ntime.sleep(60)\n"
    )
    proc, port = _start(["--stop-grace-seconds", "1", "--", PY, "-c", trainer])
    try:
        wait_for(
            lambda: fetch(f"http://127.0.0.1:{port}/readyz")[0] == 200,
            timeout_s=30,
            what="the trainer ready",
            interval_s=0.1,
            give_up=lambda: proc.poll() is not None,
        )
        wait_for(
            armed.exists,
            timeout_s=60,
            what="the trainer's SIGTERM handler installed",
            give_up=lambda: proc.poll() is not None,
        )
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 128 + signal.SIGKILL
    finally:
        proc.kill()
        proc.wait()
