"""An episode's identity: names made and read back, the one rule ids are checked by (the gateway's
sessions refuse what the bus's decoder refuses), the layout seed, the trial name, the outcome of an
attempt; and staleness counted one way."""

from __future__ import annotations

import zlib

import msgspec
import pytest

from cua_stream.events import TaskRef, WorkRequest
from cua_stream.gateway.session import SessionSpec
from cua_stream.identity import (
    episode_id_of,
    group_id_of,
    identity_problem,
    index_of,
    layout_seed,
    outcome_of,
    trial_name,
)
from cua_stream.versions import staleness, too_stale

WORK = WorkRequest(
    run_id="run",
    group_id=group_id_of("run", 7),
    episode_id=episode_id_of(group_id_of("run", 7), 2),
    task=TaskRef(name="click-button"),
    sample_index=2,
    group_size=4,
    policy_version=3,
    created_at=1.0,
)


def test_names_are_made_and_read_back_one_way() -> None:
    assert (WORK.group_id, WORK.episode_id) == ("run-g000007", "run-g000007-e2")
    assert index_of("run", WORK.group_id) == 7
    assert index_of("run-2", WORK.group_id) is None  # another run's group is never this run's
    assert index_of("run", "run-gx") is None and index_of("run", "other-g000001") is None


@pytest.mark.parametrize(
    ("ids", "problem"),
    [
        (("r", "g", "e"), None),
        (("", "g", "e"), "run_id"),
        (("r", "g" * 513, "e"), "group_id"),
        (("r", "g", "e\x00"), "episode_id"),
    ],
)
def test_one_rule_for_ids_at_the_gateway_and_on_the_bus(
    ids: tuple[str, str, str], problem: str | None
) -> None:
    found = identity_problem(*ids)
    assert (found is None) if problem is None else (found is not None and found.startswith(problem))
    body = {"run_id": ids[0], "group_id": ids[1], "episode_id": ids[2], "sampling": {"temperature": 1.0}}
    if problem is None:
        msgspec.convert(body, SessionSpec)
    else:
        with pytest.raises(msgspec.ValidationError, match=problem):
            msgspec.convert(body, SessionSpec)


def test_the_layout_seed_the_trial_name_and_the_outcome_come_from_the_work() -> None:
    assert layout_seed(WORK) == zlib.crc32(b"run-g000007")
    assert layout_seed(msgspec.structs.replace(WORK, seed=11)) == 11
    odd = msgspec.structs.replace(WORK, episode_id="a/b c")
    assert trial_name(WORK, 5) == "run-g000007-e2.5" and trial_name(odd, 5) == "a_b_c.5"
    outcome = outcome_of(WORK, 5, agent_started=True, started_at=1.0, finished_at=2.0)
    assert (outcome.run_id, outcome.group_id, outcome.episode_id, outcome.attempt) == (
        "run", "run-g000007", "run-g000007-e2", 5,
    )  # fmt: skip
    assert (outcome.task, outcome.policy_version) == ("click-button", 3)
    assert outcome_of(
        WORK, 5, task="cua/click-button", agent_started=False, started_at=0, finished_at=0
    ).task == ("cua/click-button")


def test_staleness_is_counted_one_way() -> None:
    assert [staleness(5, v) for v in (5, 4, 2, 7)] == [0, 1, 3, 0]
    assert not too_stale(5, 4, 1) and too_stale(5, 3, 1) and not too_stale(99, 0, None)
