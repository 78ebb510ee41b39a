"""The fanout's consumer offsets on the real broker: committed at most once per
``FANOUT_COMMIT_INTERVAL_S`` however many batches go by (one commit a batch cost the
broker a write every few events at moderate load: benchmarks/pipeline.py; BENCHMARKS.md,
Pipeline), all of them at a clean stop, and those of settled batches before a partition
moves to another member — so neither a stop nor a rebalance makes anyone read an event
twice."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from hookstream.fanout.service import Fanout
from prometheus_client import CollectorRegistry

from hookstream.core.settings import FanoutSettings
from hookstream.core.topics import Topics
from hookstream.io.kafka import consumer_config
from tests.conftest import Stack
from tests.helpers import scalar, wait_until, watermarks
from tests.relay_fanout_support import add_endpoints, envelope, metric

pytestmark = pytest.mark.integration
PARTITIONS = 3  # the topics fixture's


class Running:
    """A Fanout's own loop (``run``) on a thread, as the service runs it."""

    def __init__(self, stack: Stack, db_url: str, topics: Topics, interval_s: float,
                 **overrides: Any):
        self.settings = FanoutSettings(
            database_url=db_url, kafka_bootstrap=stack.bootstrap, topic_prefix=topics.prefix,
            fanout_group_id=f"fan-{uuid.uuid4().hex}", commit_interval_s=interval_s,
            **overrides)
        self.registry = CollectorRegistry()
        self.fanout = Fanout(self.settings, self.registry)
        self.thread = threading.Thread(target=self.fanout.run, daemon=True)
        self.admin = AdminClient({"bootstrap.servers": stack.bootstrap})
        self.topic = topics.events
        self.producer = Producer({"bootstrap.servers": stack.bootstrap,
                                  "enable.idempotence": True, "linger.ms": 0})

    def send(self, n: int = 1) -> None:
        """``n`` events; each is given a key of its own, so they spread over the
        partitions (a test's envelopes share one object id, which would put them all
        on one)."""
        for e in (envelope("acme") for _ in range(n)):
            self.producer.produce(self.topic, e.encode(), uuid.uuid4().bytes)
        assert self.producer.flush(10) == 0

    def committed(self) -> dict[int, int]:
        """The group's committed offset per partition; one never committed is read from
        its start (``auto.offset.reset`` earliest, and these topics are new): 0."""
        consumer = Consumer({"bootstrap.servers": self.settings.kafka_bootstrap,
                             "group.id": self.settings.fanout_group_id,
                             "enable.auto.commit": False})
        try:
            return {tp.partition: max(tp.offset, 0) for tp in consumer.committed(
                [TopicPartition(self.topic, p) for p in range(PARTITIONS)], timeout=10)}
        finally:
            consumer.close()

    def ends(self) -> dict[int, int]:
        consumer = Consumer({"bootstrap.servers": self.settings.kafka_bootstrap,
                             "group.id": f"ends-{uuid.uuid4().hex}"})
        try:
            return {p: watermarks(consumer, TopicPartition(self.topic, p))[1]
                    for p in range(PARTITIONS)}
        finally:
            consumer.close()

    def batches(self) -> float:
        return metric(self.registry, "hookstream_fanout_batch_seconds_count")

    def stop(self) -> None:
        self.fanout.stop.set()
        self.thread.join(30)
        assert not self.thread.is_alive()
        self.producer.flush(10)


@pytest.fixture
def start(stack: Stack, db_url: str, topics: Topics) -> Iterator[Callable[..., Running]]:
    add_endpoints(db_url, "acme", 2)
    started: list[Running] = []

    def _start(interval_s: float, **overrides: Any) -> Running:
        r = Running(stack, db_url, topics, interval_s, **overrides)
        r.thread.start()
        started.append(r)
        return r

    yield _start
    for r in started:
        if r.thread.is_alive():
            r.stop()


def _deliveries(db_url: str) -> int:
    return int(scalar(db_url, "SELECT count(*) FROM deliveries"))


def test_offsets_are_committed_once_an_interval_and_all_of_them_at_a_clean_stop(
        start: Callable[..., Running], db_url: str) -> None:
    running = start(1.0)
    # One event every 40 ms for 3 s: the fanout takes each as it comes, a batch apiece.
    changes: list[dict[int, int]] = []
    started = time.monotonic()
    for i in range(75):
        running.send()
        committed = running.committed()
        if any(committed.values()) and (not changes or changes[-1] != committed):
            changes.append(committed)
        time.sleep(max(0.0, started + 0.04 * (i + 1) - time.monotonic()))
    took = time.monotonic() - started
    wait_until(lambda: _deliveries(db_url) == 150, 30, message="every event fanned out")
    assert running.batches() >= 30  # most events were a batch of their own ...
    # ... and the offsets moved about once a second, not once a batch
    assert 1 <= len(changes) <= took / running.settings.commit_interval_s + 2, changes
    running.stop()
    # A clean stop commits everything read: a restart reads nothing twice.
    assert running.committed() == running.ends()


def test_a_partition_taken_away_commits_what_was_settled_first(
        start: Callable[..., Running], stack: Stack, db_url: str) -> None:
    running = start(60.0)
    running.send()  # the first batch commits at once (nothing committed yet) ...
    wait_until(lambda: running.committed() == running.ends(), 30,
               message="the first batch's offset committed")
    running.send(30)  # ... the next ones wait out the interval
    wait_until(lambda: _deliveries(db_url) == 62, 30, message="every event fanned out")
    # (white box: the fanout commits on a revocation only with no task on its way)
    wait_until(lambda: running.fanout._sending is None, 10, message="every task acknowledged")
    waiting = running.committed()
    assert waiting != running.ends()
    # A second member joins: partitions move to it, and it starts after what the fanout
    # did, not before.
    joiner = Consumer(consumer_config(stack.bootstrap, running.settings.fanout_group_id,
                                      "joiner", running.settings.membership))
    joiner.subscribe([running.topic])
    read_again = []

    def joined() -> bool:
        message = joiner.poll(0.1)
        if message is not None and message.error() is None:
            read_again.append(message.offset())
        return bool(joiner.assignment())

    try:
        wait_until(joined, 60, message="the second member has partitions")
        moved = {tp.partition for tp in joiner.assignment()}
        ends, committed = running.ends(), running.committed()
        assert any(waiting[p] < ends[p] for p in moved), (moved, waiting, ends)
        assert {p: committed.get(p) for p in moved} == {p: ends[p] for p in moved}
        assert read_again == []
    finally:
        joiner.close()


def _stream(running: Running, events: int, every_s: float) -> float:
    """Sends the events at their pace; the longest wait for company the fanout's gauge
    showed meanwhile."""
    started, longest = time.monotonic(), 0.0
    for i in range(events):
        running.send()
        longest = max(longest, metric(running.registry, "hookstream_fanout_gather_seconds"))
        time.sleep(max(0.0, started + every_s * (i + 1) - time.monotonic()))
    return longest


def test_above_its_load_threshold_the_fanout_gathers_larger_batches(
        start: Callable[..., Running], db_url: str) -> None:
    # The same stream twice — 60 events at 50/s, 100 deliveries/s to the two endpoints:
    # taken as it comes with the load wait off, and in batches of up to 0.2 s once the
    # threshold (10 deliveries/s here, 1,500 by default) is below the load.
    plain = start(0.5, gather_from_per_s=0.0)
    assert _stream(plain, 60, 0.02) == 0.0
    wait_until(lambda: _deliveries(db_url) == 120, 30, message="the first stream fanned out")
    plain_batches = plain.batches()
    plain.stop()
    loaded = start(0.5, gather_from_per_s=10.0, load_gather_s=0.2)
    assert _stream(loaded, 60, 0.02) == pytest.approx(0.2)
    wait_until(lambda: _deliveries(db_url) == 240, 30, message="the second stream fanned out")
    loaded_batches = loaded.batches()
    print(f"batches: {plain_batches} taken as they came, {loaded_batches} gathered")
    # 1.2 s of stream in waits of 0.2 s: about 6 batches (and the first, before the
    # load was known), whatever the host; taken as they came, more (how many more is the
    # host's: a busy one takes several events per poll, ~10 here beside the parallel
    # suite, ~20 alone).
    assert loaded_batches <= 12, (loaded_batches, plain_batches)
    assert loaded_batches < plain_batches, (loaded_batches, plain_batches)
