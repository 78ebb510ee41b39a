"""The fanout's batching reads the real consumer lag of the dispatcher group: it waits
for company while every deliveries partition is seconds behind, and takes what is
there as soon as one of them has caught up (a slow customer pinning one partition is
not the platform being behind) — unless its own load calls for a wait."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from hookstream.fanout.service import Fanout
from prometheus_client import CollectorRegistry

from hookstream.core.settings import FanoutSettings
from hookstream.core.topics import Topics
from hookstream.io.kafka import BrokerUnavailable, delete_topics, ensure_topics
from hookstream.ops.lag import KafkaLagSource
from hookstream.ops.sampling import Sample
from tests.conftest import Stack

pytestmark = pytest.mark.integration
PARTITIONS = 3


@pytest.fixture
def topics(stack: Stack) -> Iterator[Topics]:
    t = Topics(f"gather-{uuid.uuid4().hex[:8]}")
    ensure_topics(stack.bootstrap, t.specs(PARTITIONS))
    yield t
    delete_topics(stack.bootstrap, [s.name for s in t.specs()])


def _old_tasks(bootstrap: str, topic: str, age_s: float) -> None:
    """Two records per partition, produced ``age_s`` ago by their timestamps."""
    producer = Producer({"bootstrap.servers": bootstrap})
    at_ms = int((time.time() - age_s) * 1000)
    for p in range(PARTITIONS):
        for _ in range(2):
            producer.produce(topic, value=b"task", partition=p, timestamp=at_ms)
    assert producer.flush(10) == 0


def _commit(bootstrap: str, group: str, topic: str, partitions: dict[int, int]) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in partitions.items()],
                        asynchronous=False)
    finally:
        consumer.close()


def _snapshot(source: KafkaLagSource) -> Any:
    deadline = time.monotonic() + 15
    while True:
        try:  # a topic just created may not have its leaders elected yet
            return source.sample()
        except BrokerUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_the_fanout_waits_only_while_every_deliveries_partition_is_behind(
        stack: Stack, topics: Topics) -> None:
    settings = FanoutSettings(kafka_bootstrap=stack.bootstrap, topic_prefix=topics.prefix,
                              dispatcher_group_id=f"disp-{uuid.uuid4().hex}",
                              max_gather_s=0.5)
    fanout = Fanout(settings, CollectorRegistry())
    source = KafkaLagSource(stack.bootstrap, {settings.dispatcher_group_id: [topics.deliveries]})
    latest: list[Sample[Any]] = []
    fanout.watch_lag(lambda: latest[-1] if latest else None)

    def sampled() -> float:
        latest.append(Sample(_snapshot(source), time.time()))
        return fanout.gather_s()

    try:
        assert fanout.gather_s() == 0.0  # no sample yet: take what is there
        assert sampled() == 0.0  # nothing produced: no lag
        # The dispatchers are 30 s behind on every partition (their group never committed
        # and the oldest task is 30 s old): a batch waits 5 % of that, capped at 0.5 s.
        _old_tasks(stack.bootstrap, topics.deliveries, age_s=30)
        assert sampled() == pytest.approx(0.5)
        # One partition caught up: a new delivery may go there, and would wait for nothing.
        _commit(stack.bootstrap, settings.dispatcher_group_id, topics.deliveries, {0: 2})
        assert sampled() == 0.0
        # Behind by 5 s on every partition: 250 ms.
        _old_tasks(stack.bootstrap, topics.deliveries, age_s=5)
        _commit(stack.bootstrap, settings.dispatcher_group_id, topics.deliveries,
                {p: 2 for p in range(PARTITIONS)})
        assert sampled() == pytest.approx(0.25, abs=0.025)
        # A sample older than three sampling intervals is not believed: no wait.
        latest.append(Sample(latest[-1].value, time.time() - 3 * settings.lag_sample_interval_s))
        assert fanout.gather_s() == 0.0
    finally:
        source.close()
        fanout.publisher.close()


def test_the_fanout_waits_at_high_load_even_when_the_dispatchers_keep_up(
        stack: Stack, topics: Topics) -> None:
    # The load is known at once, the dispatchers' lag only once they are seconds behind:
    # above HOOKSTREAM_FANOUT_GATHER_FROM_PER_S of its own tasks a batch waits, whatever
    # the lag says; the longer of the two waits wins.
    settings = FanoutSettings(kafka_bootstrap=stack.bootstrap, topic_prefix=topics.prefix,
                              dispatcher_group_id=f"disp-{uuid.uuid4().hex}",
                              gather_from_per_s=1_500, load_gather_s=0.1, max_gather_s=0.5)
    registry = CollectorRegistry()
    fanout = Fanout(settings, registry)
    source = KafkaLagSource(stack.bootstrap, {settings.dispatcher_group_id: [topics.deliveries]})
    latest: list[Sample[Any]] = []
    fanout.watch_lag(lambda: latest[-1] if latest else None)

    def gauge() -> float | None:
        return registry.get_sample_value("hookstream_fanout_gather_seconds")

    try:
        latest.append(Sample(_snapshot(source), time.time()))  # caught up: no lag wait
        assert fanout.gather_s() == 0.0 and gauge() == 0.0
        # 1,000 deliveries/s: #15's moderate load, below the threshold.
        fanout._throughput.add(1_000, time.monotonic())
        assert fanout.gather_s() == 0.0
        # 2,400/s within the last second: 60 ms, and the gauge says so.
        fanout._throughput.add(1_400, time.monotonic())
        assert fanout.gather_s() == pytest.approx(0.06)
        assert gauge() == pytest.approx(0.06)
        # The dispatchers 30 s behind as well: their 0.5 s is the longer wait.
        _old_tasks(stack.bootstrap, topics.deliveries, age_s=30)
        latest.append(Sample(_snapshot(source), time.time()))
        assert fanout.gather_s() == pytest.approx(0.5)
    finally:
        source.close()
        fanout.publisher.close()


def test_the_load_wait_ends_when_the_load_does(stack: Stack, topics: Topics) -> None:
    settings = FanoutSettings(kafka_bootstrap=stack.bootstrap, topic_prefix=topics.prefix,
                              gather_from_per_s=1_500, load_gather_s=0.1)
    fanout = Fanout(settings, CollectorRegistry())
    try:
        fanout._throughput.add(5_000, time.monotonic() - 2.0)  # a burst two seconds ago
        assert fanout.gather_s() == 0.0
        fanout._throughput.add(5_000, time.monotonic())
        assert fanout.gather_s() == pytest.approx(0.1)  # capped
    finally:
        fanout.publisher.close()
