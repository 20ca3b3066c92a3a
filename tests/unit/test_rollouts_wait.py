"""How long ``run_episodes`` waits for scores: while they keep coming, however long the whole wait (before,
30 minutes in all cut long evaluations short, leaving episodes that were still running unscored); until
none has come for longer than any one episode takes."""

from __future__ import annotations

from cua_stream.app.rollouts import SCORED_STALL_S, waiting


def test_scores_still_coming_are_waited_for_however_long_the_wait() -> None:
    # an hour into a 200-episode evaluation, the last score a minute ago: wait on
    assert waiting(scored=121, wanted=200, since_progress_s=60.0)


def test_the_wait_ends_when_all_are_scored_or_none_has_come_for_the_stall_bound() -> None:
    assert not waiting(scored=200, wanted=200, since_progress_s=0.0)
    assert not waiting(scored=121, wanted=200, since_progress_s=SCORED_STALL_S)
    assert waiting(scored=0, wanted=1, since_progress_s=SCORED_STALL_S - 1)
