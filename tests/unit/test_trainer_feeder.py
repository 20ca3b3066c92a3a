"""The feeder's names and the completion of a group a crash cut short (pure)."""

from __future__ import annotations

from consumers.trainer.stream.feeder import missing_work, work_for_group
from cua_stream.identity import group_id_of, index_of


def test_group_names_round_trip_and_foreign_groups_are_not_the_feeders() -> None:
    assert group_id_of("r", 7) == "r-g000007" and index_of("r", "r-g000007") == 7
    assert index_of("r", "other-g000007") is None and index_of("r", "r-gx") is None


def test_the_missing_requests_of_a_group_are_copies_of_their_siblings_under_their_own_index() -> None:
    g0 = work_for_group("r", 0, tasks=["a", "b"], group_size=4, policy_version=3, sampling={"t": 1}, now=9.0)
    g1 = work_for_group("r", 1, tasks=["a", "b"], group_size=4, policy_version=4, sampling={"t": 1}, now=10.0)
    # the crash left e0 and e2 of group 0 (out of order) and all of group 1
    missing = missing_work([g0[2], g0[0], *g1], group_size=4)
    assert missing == [g0[1], g0[3]]  # exactly what the dead trainer would have published
    assert missing_work([*g0, *g1], group_size=4) == []
    assert missing_work([], group_size=4) == []
