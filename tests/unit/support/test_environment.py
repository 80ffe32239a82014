"""The autouse environment guard: what a test sets, adds or removes is undone."""

from __future__ import annotations

import os

from tests.support.environment import restored_environment


def test_added_changed_and_removed_variables_are_put_back() -> None:
    env = {"KEEP": "1", "CHANGE": "before", "REMOVE": "x"}
    with restored_environment(env):
        env["EDL_GENERATION"] = "4"
        env["CHANGE"] = "after"
        del env["REMOVE"]
    assert env == {"KEEP": "1", "CHANGE": "before", "REMOVE": "x"}


def test_the_environment_is_put_back_when_the_test_fails() -> None:
    env = {"A": "1"}
    try:
        with restored_environment(env):
            env["RANK"] = "0"
            raise RuntimeError("the test failed")
    except RuntimeError:
        pass
    assert env == {"A": "1"}


def test_the_process_environment_is_the_default() -> None:
    assert "EDL_TEST_GUARD_PROBE" not in os.environ
    with restored_environment():
        os.environ["EDL_TEST_GUARD_PROBE"] = "1"
    assert "EDL_TEST_GUARD_PROBE" not in os.environ
