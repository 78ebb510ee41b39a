"""The delay forwarder (in process, real broker) under a Kafka outage longer than the
producer's message timeout, with records falling due while the broker is away: none is
lost, each is handed on to the deliveries topic once the broker is back, and the
forwarder's thread stays alive throughout, unhealthy while it cannot forward.

Stops and starts the Kafka of the stack the environment points at (see
tests/e2e/test_relay_restarts.py).
"""

from __future__ import annotations

import threading
import time
import uuid
from datetime import UTC, datetime

import pytest
from confluent_kafka import Producer
from hookstream.dispatcher.delay import DelayForwarder
from prometheus_client import CollectorRegistry

from hookstream.core.codec import DeliveryTask, TaskKind
from hookstream.core.topics import Topics
from hookstream.dev import localstack
from tests.conftest import Stack
from tests.helpers import wait_until
from tests.relay_fanout_support import metric, read_tasks

pytestmark = [pytest.mark.integration, pytest.mark.faults, pytest.mark.outage]

OUTAGE_S = 45.0  # longer than message.timeout.ms (30 s) with a margin


def _task(due_at: datetime) -> DeliveryTask:
    return DeliveryTask(delivery_id=uuid.uuid4(), event_id=uuid.uuid4(),
                        endpoint_id=uuid.UUID(int=7), tenant="acme", kind=TaskKind.RETRY,
                        due_at=due_at, committed_at=due_at, lease_version=1)


def test_records_due_during_a_long_outage_are_all_forwarded_after_it(
        stack: Stack, topics: Topics) -> None:
    tiers = topics.tiers
    tier_s = 30.0
    stop = threading.Event()
    registry = CollectorRegistry()
    forwarder = DelayForwarder(stack.bootstrap, f"{topics.prefix}-delay", topics, tiers,
                               registry, stop).start()
    try:
        # 20 records of the 30 s tier, one key (one partition, one fetch), released
        # (record timestamp + 30 s) a few seconds into the outage: soon enough that the
        # forwarder still holds them (its group membership is lost after the 6 s session
        # timeout, and with it what it holds) and hands them on while the broker is away,
        # so their first publish fails after the 30 s message timeout.
        start = time.time()
        tasks = []
        producer = Producer({"bootstrap.servers": stack.bootstrap})
        for k in range(20):
            release_at = start + 12.0 + k * 0.05
            task = _task(datetime.fromtimestamp(release_at, UTC))
            tasks.append(task)
            producer.produce(tiers.topic(tier_s), key=task.key, value=task.encode(),
                             timestamp=int((release_at - tier_s) * 1000))
        assert producer.flush(10) == 0
        wait_until(lambda: metric(registry, "hookstream_delay_oldest_due_seconds") > 0, 30,
                   message="the forwarder holds the records")
        time.sleep(max(0.0, start + 9.0 - time.time()))

        localstack.kafka_stop()
        down_at = time.monotonic()
        green_while_down: list[float] = []
        try:
            while (elapsed := time.monotonic() - down_at) < OUTAGE_S:
                assert forwarder._thread.is_alive(), "the delay forwarder's thread died"
                if elapsed > 5 and forwarder.healthy:
                    green_while_down.append(round(elapsed, 1))
                time.sleep(0.5)
        finally:
            localstack.kafka_start()

        expected = {t.delivery_id for t in tasks}
        wait_until(lambda: expected <= {t.delivery_id for t in read_tasks(
            stack.bootstrap, topics.deliveries)}, 120, interval_s=1.0,
            message="every record due during the outage handed on")
        assert forwarder._thread.is_alive()
        assert not green_while_down, f"healthy during the outage at {green_while_down} s"
        assert metric(registry, "hookstream_delay_errors_total", {"kind": "kafka"}) > 0
        wait_until(lambda: forwarder.healthy, 30, message="healthy again")
    finally:
        stop.set()
        forwarder.join(30)
