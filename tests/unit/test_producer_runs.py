"""Which work a producer takes: its lane's, and only its ``runs``' when it has some (a command's own work,
in a consumer group of its own); a bad ``runs`` fails at start naming the field."""

from __future__ import annotations

import msgspec
import pytest

from cua_stream.config import ConfigError
from cua_stream.topics import EVAL_WORK, WORK, work_topic
from producers.config import producer_config


def test_a_producer_without_runs_takes_every_run_of_its_lane_in_the_shared_group() -> None:
    train = producer_config({}, {})
    assert train.group == "cua.producers"
    assert train.takes("learn-1-oracle") and train.takes("anything") and not train.takes("eval-x")
    evals = msgspec.structs.replace(train, lane="eval")
    assert evals.group == "cua.eval-producers" and evals.takes("eval-x") and not evals.takes("x")


def test_each_lane_reads_the_topic_its_runs_work_is_issued_on() -> None:
    """Evaluations' work on a topic of its own: the evaluator's principal writes only that one."""
    train = producer_config({}, {})
    evals = msgspec.structs.replace(train, lane="eval")
    assert train.work_topic is WORK and work_topic("learn-1-oracle") is WORK
    assert evals.work_topic is EVAL_WORK and work_topic("eval-learn-1-base") is EVAL_WORK


def test_a_producer_with_runs_takes_only_theirs_and_reads_in_a_group_of_its_own() -> None:
    train = producer_config({}, {"runs": ["learn-1"]})
    assert train.group == "cua.producers.learn-1"  # the shared group's work is never passed over by it
    assert train.takes("learn-1") and train.takes("learn-1-oracle") and train.takes("learn-1-grpo")
    assert not train.takes("learn-10-grpo")  # a prefix of another run's id is not that run
    assert not train.takes("learn-2-oracle") and not train.takes("eval-learn-1-base")
    evals = msgspec.structs.replace(train, lane="eval")
    assert evals.group == "cua.eval-producers.learn-1"
    assert evals.takes("eval-learn-1-base") and evals.takes("eval-learn-1-probe-3")
    assert not evals.takes("eval-learn-2-base") and not evals.takes("learn-1-oracle")
    two = producer_config({}, {"runs": ["a", "b"], "group_id": "mine"})
    assert two.group == "mine.a.b" and two.takes("b-grpo") and not two.takes("c")


@pytest.mark.parametrize("runs", [[""], ["eval-learn-1"], ["ok", ""]])
def test_a_bad_run_in_runs_fails_at_start_naming_the_field(runs: list[str]) -> None:
    with pytest.raises(ConfigError, match=r"producer\.runs"):
        producer_config({}, {"runs": runs})


def test_an_evaluation_plays_only_its_own_run_in_a_group_of_its_own() -> None:
    """An evaluation started after a killed one (same broker and prefix) does not play the killed one's
    leftover work: before, both read the lane's shared group, and the new one's own episodes waited."""
    from cua_stream.app.evaluate.episodes import eval_producer

    ours = eval_producer(producer_config({}, {}), "eval-teacher-b3")
    assert ours.lane == "eval" and ours.group == "cua.eval-producers.teacher-b3"
    assert ours.takes("eval-teacher-b3") and not ours.takes("eval-teacher-b2")
    learn = eval_producer(producer_config({}, {"runs": ["learn-1"]}), "eval-learn-1-base")
    assert learn.runs == ["learn-1"] and learn.takes("eval-learn-1-sft")  # learn's runs are kept
