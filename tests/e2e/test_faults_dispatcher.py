"""The dispatcher across outages longer than its clients' timeouts, on the real stack.

These stop the stack's Kafka or PostgreSQL (see test_relay_restarts for what that means
for anything else using the stack) and take about a minute each: marker ``faults``.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest

from hookstream.dev import localstack
from hookstream.dev.harness import STOP_TIMEOUT_S
from hookstream.dev.localstack import kafka as stack_kafka
from hookstream.dev.receiver import Behaviour, Receiver
from hookstream.outbox import write_event
from tests.e2e.conftest import StartPipeline, add_endpoint
from tests.helpers import query, scalar, wait_until

pytestmark = [pytest.mark.faults, pytest.mark.outage]


def _statuses(db_url: str) -> dict[str, int]:
    return dict(query(db_url, "SELECT status, count(*) FROM deliveries GROUP BY 1"))


def _attempts_in_flight(db_url: str, receiver: Receiver, events: int, at_least: int) -> None:
    """Write ``events`` events and wait until ``at_least`` POSTs are held by the receiver."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        for i in range(events):
            write_event(conn, tenant="acme", type="a.b", payload={"i": i})
    wait_until(lambda: sum(receiver.in_flight.values()) >= at_least, 30,
               message="attempts in flight")


def test_retries_produced_while_kafka_is_down_past_the_message_timeout_are_not_lost(
        db_url: str, receiver: Receiver, start_pipeline: StartPipeline) -> None:
    # Every first attempt fails after 3 s; the broker is stopped while they are in flight,
    # so every retry record is produced into an outage longer than message.timeout.ms
    # (30 s). A record the broker never acknowledged must never count as durable.
    start_pipeline(retry_base_s="1", retry_floor_s="1", retry_jitter="0",
                   circuit_failure_threshold="1000")
    add_endpoint(db_url, receiver, "flaky", "acme",
                 max_in_flight=10, behaviour=Behaviour(delay_s=3.0, fail_first=1, fail_status=500))
    _attempts_in_flight(db_url, receiver, 10, 5)
    localstack.kafka_stop()
    try:
        # Every first attempt is answered (500); their retries wait for the broker.
        wait_until(lambda: len(receiver.arrivals) == 10 and not sum(receiver.in_flight.values()),
                   30, interval_s=0.2, message="first attempts answered")
        time.sleep(40)  # the outage itself: longer than the producer's message timeout
    finally:
        localstack.kafka_start()
    wait_until(lambda: _statuses(db_url) == {"delivered": 10}, 90, interval_s=0.5,
               message="every retry delivered after the outage")
    assert len(receiver.delivered_ids("flaky")) == 10


def test_a_database_outage_longer_than_the_lease_resends_nothing_delivered(
        db_url: str, receiver: Receiver, start_pipeline: StartPipeline) -> None:
    # Attempts are in flight when PostgreSQL stops; they succeed at the receiver while the
    # database is away for longer than their lease. When it returns, their outcomes are
    # written (not discarded as late, not re-sent by the reaper).
    start_pipeline(lease_s="15", request_timeout_s="5")
    add_endpoint(db_url, receiver, "slow", "acme", max_in_flight=10,
                 behaviour=Behaviour(delay_s=2.0))
    _attempts_in_flight(db_url, receiver, 8, 4)
    localstack.pg_stop()
    try:
        time.sleep(20)  # beyond the 15 s lease
    finally:
        localstack.pg_start()
    wait_until(lambda: _statuses(db_url) == {"delivered": 8}, 90, interval_s=0.5,
               message="every delivery delivered")
    # Each POST the receiver got is an attempt row, and no delivery was sent twice.
    posts = [a.webhook_id for a in receiver.arrivals if a.name == "slow"]
    assert len(posts) == len(set(posts)) == 8
    assert scalar(db_url, "SELECT count(*) FROM attempts") == 8
    assert scalar(db_url, "SELECT count(*) FROM attempts WHERE outcome = 'in_flight'") == 0


@contextmanager
def _broker_hung() -> Iterator[None]:
    """The broker frozen (SIGSTOP: a GC pause, a VM steal, a half-open network): its port
    still accepts connections, nothing is answered. Worse for a client than a broker
    that is down, which refuses at once."""
    pid = stack_kafka.running_pid()
    assert pid is not None, "the stack's Kafka is not running"
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def test_sigterm_while_the_broker_hangs_ends_within_the_bound_and_loses_nothing(
        db_url: str, receiver: Receiver, start_pipeline: StartPipeline) -> None:
    # Attempts are in flight when the broker freezes; they succeed, their outcomes are
    # written, and the offsets they free are to be committed (periodically, and at the
    # latest when the dispatcher stops) to a coordinator that does not answer. A
    # synchronous commit waited for it as long as it hung (minutes measured), on the one
    # thread every call into the consumer takes: the dispatcher stopped consuming and,
    # at SIGTERM, never exited. Now commits do not wait for their answer and every
    # consumer's close is bounded: each service exits within the supervisor's bound, and
    # the next ones read the uncommitted records again and send nothing twice.
    pipeline = start_pipeline()
    add_endpoint(db_url, receiver, "slow", "acme", max_in_flight=10,
                 behaviour=Behaviour(delay_s=2.0))
    _attempts_in_flight(db_url, receiver, 6, 6)
    with _broker_hung():
        wait_until(lambda: _statuses(db_url) == {"delivered": 6}, 30, interval_s=0.2,
                   message="outcomes written while the broker hangs")
        for name in ("dispatcher", "fanout", "relay"):
            service = pipeline[name]
            began = time.monotonic()
            service.terminate()
            took = time.monotonic() - began
            assert service.hung_s is None, service.exit_problem()
            assert service.proc is not None and service.proc.returncode == 0, \
                service.exit_problem()
            assert took < STOP_TIMEOUT_S
    # The broker answers again: new services read the uncommitted records again and find
    # their work done; nothing is sent twice, then new work flows.
    for service in pipeline.processes.values():
        service.start()
    for service in pipeline.processes.values():
        service.wait_healthy(60)
    with psycopg.connect(db_url, autocommit=True) as conn:
        write_event(conn, tenant="acme", type="a.b", payload={"after": True})
    wait_until(lambda: _statuses(db_url) == {"delivered": 7}, 60, interval_s=0.5,
               message="a new event delivered after the restart")
    posts = [a.webhook_id for a in receiver.arrivals if a.name == "slow"]
    assert len(posts) == len(set(posts)) == 7
