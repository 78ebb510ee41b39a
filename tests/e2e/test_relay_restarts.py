"""The relay survives a broker restart and a database restart: it backs off, reconnects
and publishes what is pending, losing nothing.

These tests stop and start the servers of the stack the environment points at (through
the localstack API), so they disturb anything else using that stack at the same moment;
the suite runs sequentially. While developing, point the environment at a private stack
(see docs/relay-fanout.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from hookstream.core.codec import EventEnvelope
from hookstream.core.topics import Topics
from hookstream.dev import localstack
from hookstream.dev.harness import ServiceProcess, pipeline_env
from hookstream.outbox import write_event
from tests.conftest import Stack
from tests.helpers import query, scalar, stop_cleanly, wait_until
from tests.relay_fanout_support import read_topic

# stops and starts the servers of the stack it runs on: on a stack of its own (scripts/test.sh)
pytestmark = pytest.mark.outage


def _write(db_url: str, n: int, tag: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        for i in range(n):
            write_event(conn, tenant=f"t{i % 3}", type="invoice.paid", payload={tag: i})


def _unpublished(db_url: str) -> int:
    return int(scalar(db_url, "SELECT count(*) FROM outbox WHERE published_at IS NULL"))


def _check_everything_published_once_at_least(stack: Stack, db_url: str, topics: Topics,
                                              total: int) -> None:
    expected = {r[0] for r in query(db_url, "SELECT event_id::text FROM outbox")}
    assert len(expected) == total
    seen = {str(EventEnvelope.decode(m.value() or b"").event_id)
            for m in read_topic(stack.bootstrap, topics.events)}
    assert seen == expected


@pytest.fixture
def relay(stack: Stack, db_url: str, topics: Topics, log_dir: Path):  # type: ignore[no-untyped-def]
    env = pipeline_env(database_url=db_url, bootstrap=stack.bootstrap,
                       topic_prefix=topics.prefix, relay_max_backoff_s="1",
                       relay_poll_interval_s="0.5", relay_ack_timeout_s="20")
    process = ServiceProcess("relay", env, log_dir / "relay.log").start()
    process.wait_healthy()
    yield process
    stop_cleanly(process)


def _restarting(stop: Callable[[], object], start: Callable[[], object],
                while_down: Callable[[], None]) -> None:
    stop()
    try:
        while_down()
    finally:
        start()  # never leave the shared stack down, whatever happened


def test_relay_survives_a_broker_restart(stack: Stack, db_url: str, topics: Topics,
                                         relay: ServiceProcess) -> None:
    _write(db_url, 50, "before")
    wait_until(lambda: _unpublished(db_url) == 0, 30, message="published before the restart")

    def while_down() -> None:
        # Producers keep committing while the broker is away; nothing can be published.
        _write(db_url, 50, "during")
        time.sleep(3)
        assert _unpublished(db_url) == 50

    _restarting(localstack.kafka_stop, localstack.kafka_start, while_down)
    _write(db_url, 50, "after")
    wait_until(lambda: _unpublished(db_url) == 0, 60, message="published after the restart")
    wait_until(lambda: relay.get("/healthz")[0] == 200, 30, message="healthy again")
    _check_everything_published_once_at_least(stack, db_url, topics, 150)


def test_relay_survives_a_database_restart(stack: Stack, db_url: str, topics: Topics,
                                           relay: ServiceProcess) -> None:
    _write(db_url, 50, "before")
    wait_until(lambda: _unpublished(db_url) == 0, 30, message="published before the restart")

    def while_down() -> None:
        time.sleep(2)  # the relay's connections break; it backs off and retries
        code, body = relay.get("/healthz")
        assert code == 503, body

    _restarting(localstack.pg_stop, localstack.pg_start, while_down)
    _write(db_url, 50, "after")
    wait_until(lambda: _unpublished(db_url) == 0, 60, message="published after the restart")
    wait_until(lambda: relay.get("/healthz")[0] == 200, 30, message="healthy again")
    _check_everything_published_once_at_least(stack, db_url, topics, 100)
