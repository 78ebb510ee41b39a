"""A Kafka outage longer than the producers' message timeout (30 s) while events keep
being committed: no service exits by itself, the fanout and the delay forwarder report
unhealthy while the broker is away and healthy once it is back, and every delivery ends
delivered.

A fanout batch is made to be in flight when the broker goes (its delivery rows wait on a
row lock held by the test, released once Kafka is stopped), so its tasks are refused
after the message timeout while the broker is still away.

Stops and starts the Kafka of the stack the environment points at (see
test_relay_restarts.py): point the environment at a private stack while developing.
"""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from hookstream.dev import localstack
from hookstream.dev.harness import ServiceProcess
from hookstream.dev.receiver import Behaviour, Receiver
from hookstream.io import queries
from hookstream.outbox import write_event
from tests.e2e.conftest import StartPipeline, add_endpoint
from tests.helpers import scalar, wait_until

pytestmark = [pytest.mark.faults, pytest.mark.outage]

OUTAGE_S = 50.0  # past message.timeout.ms (30 s), and past what the fanout then does


def _gauge(process: ServiceProcess, name: str) -> float | None:
    code, body = process.get("/metrics")
    if code != 200:
        return None
    for line in body.decode().splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


class Writer(threading.Thread):
    """Commits an event every ``interval_s`` until stopped."""

    def __init__(self, db_url: str, interval_s: float = 0.25):
        super().__init__(daemon=True)
        self.db_url, self.interval_s = db_url, interval_s
        self.written = 0
        self.halt = threading.Event()

    def run(self) -> None:
        with psycopg.connect(self.db_url, autocommit=True) as conn:
            while not self.halt.is_set():
                write_event(conn, tenant="acme", type="order.paid", payload={"n": self.written})
                self.written += 1
                self.halt.wait(self.interval_s)


def _fanout_waits_on_a_lock(db_url: str) -> bool:
    # Either statement that writes delivery rows: the batch's one statement, or the
    # general path's create_deliveries.
    fanout = queries.load("fanout")
    creating = [fanout["store_and_create"][:100], fanout["create_deliveries"][:100]]
    return bool(scalar(db_url, "SELECT count(*) FROM pg_stat_activity WHERE datname ="
                               " current_database() AND wait_event_type = 'Lock'"
                               " AND left(query, 100) = ANY(%s)", (creating,)))


def test_no_service_exits_and_every_delivery_is_delivered_after_a_long_kafka_outage(
        db_url: str, receiver: Receiver, start_pipeline: StartPipeline) -> None:
    # Every delivery fails its first attempt, so each goes through the delay forwarder
    # (and the endpoint's circuit must not open on those failures).
    pipeline = start_pipeline(retry_base_s="2", retry_floor_s="1", retry_jitter="0",
                              circuit_failure_threshold="1000000",
                              fanout_max_backoff_s="1", relay_max_backoff_s="1")
    add_endpoint(db_url, receiver, "ep", "acme", behaviour=Behaviour(fail_first=1))
    fanout, dispatcher = pipeline["fanout"], pipeline["dispatcher"]
    writer = Writer(db_url)
    writer.start()
    try:
        wait_until(lambda: scalar(db_url, "SELECT count(*) FROM deliveries"
                                          " WHERE status = 'delivered'") >= 5, 60,
                   message="deliveries flowing before the outage")

        blocker = psycopg.connect(db_url)
        try:
            # The next delivery INSERT waits on this (SHARE conflicts with the INSERT's
            # ROW EXCLUSIVE), so a batch is surely in flight when Kafka goes.
            blocker.execute("LOCK TABLE deliveries IN SHARE MODE")
            wait_until(lambda: _fanout_waits_on_a_lock(db_url), 30,
                       message="a fanout batch in flight")
            localstack.kafka_stop()
        finally:
            blocker.close()  # the batch goes on: rows committed, tasks refused at 30 s
        down_at = time.monotonic()
        fanout_red = delay_red = False
        try:
            while time.monotonic() - down_at < OUTAGE_S:
                assert fanout.running(), f"the fanout exited:\n{fanout.tail()}"
                assert dispatcher.running(), f"the dispatcher exited:\n{dispatcher.tail()}"
                fanout_red = fanout_red or fanout.get("/healthz")[0] == 503
                delay_red = delay_red or _gauge(dispatcher, "hookstream_delay_healthy") == 0
                time.sleep(0.5)
        finally:
            localstack.kafka_start()
        time.sleep(5)  # a few events committed after the outage too
    finally:
        writer.halt.set()
        writer.join(10)

    assert fanout_red, "the fanout was healthy throughout the outage"
    assert delay_red, "the delay forwarder was healthy throughout the outage"
    wait_until(lambda: scalar(db_url, "SELECT count(*) FROM deliveries") == writer.written,
               120, interval_s=1.0, message="one delivery row per event")
    wait_until(lambda: scalar(db_url, "SELECT count(*) FROM deliveries"
                                      " WHERE status = 'delivered'") == writer.written,
               180, interval_s=1.0, message="every delivery delivered")
    # Each went through its retry (the delay forwarder) and no attempt was lost.
    assert scalar(db_url, "SELECT min(attempts) FROM deliveries") >= 2
    for p in (fanout, dispatcher, pipeline["relay"]):
        assert p.running(), f"{p.name} exited:\n{p.tail()}"
    wait_until(lambda: fanout.get("/healthz")[0] == 200, 30, message="fanout healthy again")
    wait_until(lambda: dispatcher.get("/healthz")[0] == 200, 30,
               message="dispatcher healthy again")
    wait_until(lambda: _gauge(dispatcher, "hookstream_delay_healthy") == 1, 30,
               message="delay forwarder healthy again")
