"""A group queued for its step is checked against the off-policy bound again when the weights moved on
while it waited (it was decided within the bound one version earlier)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from consumers.trainer.episodes.samples import NO_VERSION
from consumers.trainer.grpo.groups import GroupDecision
from consumers.trainer.state import Queued, stale_in_queue
from consumers.trainer.stream.join import GroupState


def queued(group_id: str, *versions: int) -> Queued:
    """A queued group of one episode per version: each episode's one sample's oldest trained token."""
    samples: dict[str, Any] = {
        f"{group_id}-e{i}": (SimpleNamespace(oldest_version=v),) for i, v in enumerate(versions)
    }
    return Queued(
        GroupState(group_id, 0, 0.0), GroupDecision(advantages=dict.fromkeys(samples, 0.5)), samples
    )


def test_a_group_that_waited_across_a_step_past_the_bound_is_dropped_saying_why() -> None:
    fresh, edge, old = queued("g1", 4, 5), queued("g2", 3, 5), queued("g3", 2, 5)
    keep, stale = stale_in_queue([fresh, edge, old], version=4, bound=1)
    assert [q.group.group_id for q in keep] == ["g1", "g2"]  # v3 is 1 behind v4: within the bound
    assert [(q.group.group_id, why) for q, why in stale] == [
        ("g3", "queued across a step: oldest token v2 < v4 - 1")
    ]
    keep, stale = stale_in_queue([fresh, edge, old], version=5, bound=1)  # one more step: g2 too
    assert [q.group.group_id for q in keep] == ["g1"] and len(stale) == 2
    assert stale_in_queue([old], version=9, bound=None) == ([old], [])  # no bound


def test_only_the_tokens_it_would_train_count() -> None:
    group = queued("g", 1, 6)
    group.decision.advantages.pop("g-e0")  # a discarded episode (kept survivors): not trained
    assert group.oldest_version == 6
    assert queued("h", NO_VERSION).oldest_version is None  # nothing trained carries a version
    assert stale_in_queue([group], version=7, bound=1) == ([group], [])
