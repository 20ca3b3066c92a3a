"""The producer's pure bookkeeping: commit points over out-of-order episodes, attempt numbers."""

from __future__ import annotations

from producers.attempts import AttemptClock
from producers.ledger import OffsetLedger

P = ("cua.work", 0)


def test_the_commit_point_never_passes_an_open_request() -> None:
    ledger = OffsetLedger()
    for offset in (10, 11, 12):
        ledger.start(P, offset)
    assert ledger.commit_point(P) is None  # nothing finished: nothing to commit
    ledger.finish(P, 12)
    assert ledger.commit_point(P) == 10  # 10 and 11 still running
    ledger.finish(P, 10)
    assert ledger.commit_point(P) == 11
    ledger.finish(P, 11)
    assert ledger.commit_point(P) == 13 and ledger.open_count() == 0


def test_a_re_delivered_offset_is_one_entry_and_revoked_partitions_are_forgotten() -> None:
    ledger = OffsetLedger()
    ledger.start(P, 5)
    ledger.start(P, 5)
    ledger.finish(P, 5)
    assert ledger.commit_point(P) == 6
    ledger.start(P, 6)
    ledger.forget(P)
    assert ledger.commit_point(P) is None and ledger.partitions() == []


def test_attempts_are_start_times_in_ms_and_strictly_increase() -> None:
    clock = AttemptClock()
    first = clock.next(1_700_000_000.0)
    assert first == 1_700_000_000_000
    assert clock.next(1_700_000_000.0) == first + 1  # same millisecond: still a new attempt
    assert clock.next(1_699_999_999.0) == first + 2  # the wall clock stepped back: still increasing
    assert clock.next(1_700_000_005.0) == 1_700_000_005_000


def test_the_progress_table_shows_running_published_and_verdicts() -> None:
    from rich.console import Console

    from cua_stream.events import OutcomeEvent
    from producers.config import ProducerConfig
    from producers.daemon import Producer
    from producers.progress import progress_table

    producer = Producer(ProducerConfig(environment="scripted"))
    outcome = OutcomeEvent(
        run_id="r",
        group_id="g",
        episode_id="e",
        task="t",
        policy_version=0,
        agent_started=True,
        rewards={"reward": 1.0},
        n_turns=4,
        started_at=1.0,
        finished_at=3.0,
    )
    producer.metrics.record(outcome, env_start_s=1.5)
    producer.published = 1
    console = Console(width=100, record=True)
    console.print(progress_table(producer, 12.0, 0.5))
    text = console.export_text()
    assert "outcomes published" in text and "reward:ok" in text and "1.50 s" in text and "0.50" in text
    assert "cua_producer_turns_total 4\n" in producer.metrics.registry.render()
