"""Operating the daemons: one-line errors for what an operator can fix (misspelled config sections,
unreachable brokers, busy ports, bad log levels), and test brokers kept out of the ephemeral port range."""

from __future__ import annotations

import contextlib
import logging
import socket
import time
from pathlib import Path

import anyio
import pytest
import typer

from cua_stream.broker import ephemeral_range
from cua_stream.bus.connect import start_client
from cua_stream.cli.common import friendly_errors, set_log_level
from cua_stream.config import BusConfig, ConfigError, read_file
from cua_stream.errors import BusUnavailable
from cua_stream.metrics import serve_metrics
from tests.conftest import broker_port


def test_a_misspelled_config_section_is_refused_with_a_suggestion(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[scorrer]\nreward_key = "x"\n')
    with pytest.raises(ConfigError, match=r"unknown section \[scorrer\]; did you mean \[scorer\]"):
        read_file(path)
    path.write_text("scorer = 3\n")
    with pytest.raises(ConfigError, match=r"\[scorer\] must be a table"):
        read_file(path)


def test_log_level_is_applied_and_a_bad_one_is_named() -> None:
    root, httpx_log, litellm_log = (
        logging.getLogger(),
        logging.getLogger("httpx"),
        logging.getLogger("LiteLLM"),
    )
    before = root.level, httpx_log.level, litellm_log.level
    try:
        set_log_level("debug")
        assert root.level == logging.DEBUG and httpx_log.level == logging.DEBUG
        set_log_level("info")  # a line per HTTP or LLM call only at DEBUG
        assert (
            root.level == logging.INFO
            and httpx_log.level == logging.getLogger("LiteLLM").level == logging.WARNING
        )
        with pytest.raises(ConfigError, match="'loud'"):
            set_log_level("loud")
    finally:
        for log, level in zip((root, httpx_log, litellm_log), before, strict=True):
            log.setLevel(level)


def test_cli_errors_are_one_line_even_inside_task_groups_and_keep_their_brackets(
    capsys: pytest.CaptureFixture[str],
) -> None:
    @friendly_errors
    def command() -> None:
        raise ExceptionGroup("tg", [ExceptionGroup("inner", [ConfigError("scorer.x: [a, b] expected")])])

    with pytest.raises(typer.Exit) as exit_info:
        command()
    assert exit_info.value.exit_code == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "error: scorer.x: [a, b] expected" in err and "Traceback" not in err

    @friendly_errors
    def bug() -> None:
        raise ExceptionGroup("tg", [ZeroDivisionError("a bug keeps its traceback")])

    with pytest.raises(ExceptionGroup):
        bug()


@pytest.mark.anyio
async def test_an_unreachable_broker_is_retried_then_one_clear_error() -> None:
    from aiokafka import AIOKafkaProducer

    # 3 s: the second attempt comes 0.5 s after the first fails, so the first may take 2.5 s (a refused
    # connection is refused at once; a loaded machine still gets its turn)
    config = BusConfig(bootstrap_servers="127.0.0.1:1", connect_timeout_s=3)
    producer = AIOKafkaProducer(bootstrap_servers=config.bootstrap_servers)
    calls = 0

    async def start() -> None:
        nonlocal calls
        calls += 1
        await producer.start()

    with pytest.raises(BusUnavailable, match=r"cannot reach Kafka at 127\.0\.0\.1:1 \(tried for 3 s"):
        await start_client(start, config, producer.stop)
    assert calls >= 2  # retried with backoff before giving up


@pytest.mark.anyio
@pytest.mark.parametrize("client", ["producer", "consumer", "admin"])
async def test_a_listener_that_never_answers_is_given_up_at_the_connect_timeout(client: str) -> None:
    # Before: the client waited out its 30 s request timeout whatever bus.connect_timeout_s said.
    from cua_stream.bus.admin import TopicAdmin
    from cua_stream.bus.consumer import make_kafka_consumer, start_consumer, stop_consumer
    from cua_stream.bus.producer import EventProducer

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)  # accepts (the kernel completes the handshake) and never says a word
        config = BusConfig(bootstrap_servers=f"127.0.0.1:{silent.getsockname()[1]}", connect_timeout_s=2)
        started = time.monotonic()
        with pytest.raises(BusUnavailable, match=r"tried for 2 s"):
            if client == "producer":
                async with EventProducer(config):
                    pass
            elif client == "admin":
                async with TopicAdmin(config):
                    pass
            else:
                consumer = make_kafka_consumer(config, group_id=None)
                try:
                    await start_consumer(consumer, config)
                finally:
                    await stop_consumer(consumer)
        assert time.monotonic() - started < 20  # ~2 s; the 30 s request timeout it waited out before


@pytest.mark.anyio
async def test_a_busy_metrics_port_is_a_config_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.RaisesGroup(
            pytest.RaisesExc(ConfigError, match=f"metrics_port: cannot listen on 127.0.0.1:{port}")
        ):
            async with anyio.create_task_group() as tg:
                await tg.start(serve_metrics, lambda: "", "127.0.0.1", port)


def test_test_brokers_listen_below_the_ephemeral_range() -> None:
    low, _ = ephemeral_range()
    for _ in range(20):
        port = broker_port()
        assert port + 1 < low


@pytest.mark.anyio
async def test_the_metrics_page_shows_how_long_the_event_loop_was_blocked() -> None:
    def lag(page: str) -> float:
        (line,) = [x for x in page.splitlines() if x.startswith("cua_event_loop_lag_seconds ")]
        return float(line.split()[1])

    async def page(port: int) -> str:
        stream = await anyio.connect_tcp("127.0.0.1", port)
        async with stream:
            await stream.send(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            data = b""
            with contextlib.suppress(anyio.EndOfStream):
                while True:
                    data += await stream.receive()
        return data.decode()

    async with anyio.create_task_group() as tg:
        port = await tg.start(serve_metrics, lambda: "", "127.0.0.1", 0)
        await anyio.sleep(0.3)
        # an idle loop wakes about on time (a loaded machine may be a little late; never a second)
        assert lag(await page(port)) < 1.0
        time.sleep(2.0)  # noqa: ASYNC251 - the point: a synchronous call blocks the loop
        await anyio.sleep(0.15)
        assert lag(await page(port)) >= 1.9  # the ticker woke at least the block less its 0.1 s late
        tg.cancel_scope.cancel()
