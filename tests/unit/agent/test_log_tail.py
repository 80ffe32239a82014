"""The trainer's stderr passed through and its last lines kept (`agent.process.log_tail`)."""

from __future__ import annotations

import io
import os

from agent.process.log_tail import StderrTail


def test_every_byte_is_passed_on_and_the_last_lines_are_kept() -> None:
    sink = io.BytesIO()
    tail = StderrTail(sink, keep=2, line_bytes=8)
    read, write = os.pipe()
    tail.follow(os.fdopen(read, "rb"))
    text = b"first\nsecond\nthird line that is long\nunfinished"
    os.write(write, text)
    os.close(write)
    assert tail.lines() == ("second", "third li", "unfinish")
    assert sink.getvalue() == text


def test_a_new_incarnation_starts_a_new_tail() -> None:
    tail = StderrTail(io.BytesIO())
    tail.follow(io.BytesIO(b"old\n"))
    assert tail.lines() == ("old",)
    tail.follow(io.BytesIO(b"new\n"))
    assert tail.lines() == ("new",)
    assert StderrTail(io.BytesIO()).lines() == ()
