"""The stop vote a data-parallel model casts with its gradients (`agent.trainer.stop_vote`)."""

from __future__ import annotations

import pytest

from agent.errors import ConfigError
from agent.trainer.settings import ElasticTrainerSettings
from agent.trainer.stop_vote import EVERY_STEP, IN_GRADIENTS, StopVotes


def test_one_vote_a_step_and_the_boundary_takes_it() -> None:
    votes = StopVotes()
    assert votes.wanted()
    votes.cast(lambda: True)
    assert not votes.wanted()  # a second backward in the same step casts nothing
    ballot = votes.take()
    assert ballot is not None and ballot()
    assert votes.take() is None and votes.wanted() and votes.cast_count == 1


def test_early_votes_off_means_none_is_ever_wanted() -> None:
    assert not StopVotes(EVERY_STEP).wanted()


def test_the_setting_reads_edl_stop_vote() -> None:
    assert ElasticTrainerSettings.from_env({}).stop_vote == IN_GRADIENTS
    assert ElasticTrainerSettings.from_env({"EDL_STOP_VOTE": " Step "}).stop_vote == EVERY_STEP
    with pytest.raises(ConfigError, match="EDL_STOP_VOTE"):
        ElasticTrainerSettings.from_env({"EDL_STOP_VOTE": "sometimes"})
