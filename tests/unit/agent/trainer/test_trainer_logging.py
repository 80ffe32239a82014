"""The trainer library's lines reach the pod's log until the script sets up logging itself."""

from __future__ import annotations

import io
import logging

import pytest

from agent.trainer.elastic import UntilConfigured, log_until_configured


def test_lines_go_to_stderr_until_the_script_configures_logging(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    logger = logging.getLogger("agent.trainer.test_logging")
    monkeypatch.setattr(logger, "handlers", [])
    monkeypatch.setattr(logger, "level", logging.NOTSET)
    log_until_configured(logger)
    log_until_configured(logger)  # once
    (handler,) = logger.handlers
    assert isinstance(handler, UntilConfigured) and logger.level == logging.INFO
    out = io.StringIO()
    handler.setStream(out)
    monkeypatch.setattr(logging.getLogger(), "handlers", [])  # a script without logging
    logger.info("generation %d rank %d/%d resumes at step %d", 3, 0, 2, 40)
    assert out.getvalue() == "edl-trainer: generation 3 rank 0/2 resumes at step 40\n"
    monkeypatch.setattr(logging.getLogger(), "handlers", [logging.NullHandler()])  # configured
    logger.info("not here")
    assert "not here" not in out.getvalue()
