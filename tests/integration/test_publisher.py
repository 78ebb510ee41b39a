"""The one produce primitive on the real broker: a record counts as durable only when its
own delivery report says so, and the caller gets back exactly the records that failed."""

from __future__ import annotations

import asyncio
import socket
import uuid

import pytest
from confluent_kafka import Consumer

from hookstream.core.topics import TopicSpec
from hookstream.io.kafka import Failed, Publisher, Record, ensure_topics, publish_until_acked
from tests.conftest import Stack

pytestmark = pytest.mark.integration


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _count(bootstrap: str, topic: str, expected: int, timeout_s: float = 30) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"count-{uuid.uuid4()}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    seen = 0
    loop = asyncio.new_event_loop()
    deadline = loop.time() + timeout_s
    try:
        while seen < expected and loop.time() < deadline:
            seen += sum(1 for m in c.consume(500, 0.5) if m.error() is None)
    finally:
        c.close()
        loop.close()
    return seen


@pytest.fixture
def topic(stack: Stack) -> str:
    name = f"pub-{uuid.uuid4().hex[:10]}"
    ensure_topics(stack.bootstrap, [TopicSpec(name, 2, {})])
    return name


def test_every_record_acknowledged_is_reported_and_readable(stack: Stack, topic: str) -> None:
    pub = Publisher(stack.bootstrap, "test-pub")
    records = [Record(topic, str(i % 7).encode(), b"v%d" % i, ref=i) for i in range(2000)]
    assert pub.publish(records) == []
    assert asyncio.run(pub.publish_async(records[:10])) == []
    pub.close()
    assert _count(stack.bootstrap, topic, 2010) == 2010


def test_records_beyond_the_local_queue_wait_for_room_and_go_once(
        stack: Stack, topic: str) -> None:
    # librdkafka's queue holds 50 here: a batch of 2,000 is queued part by part (the
    # queue refuses the rest of each produce_batch) and every record is published once.
    pub = Publisher(stack.bootstrap, "test-pub", **{"queue.buffering.max.messages": 50})
    records = [Record(topic, str(i % 7).encode(), b"v%d" % i, ref=i) for i in range(2000)]
    assert pub.publish(records) == []
    assert asyncio.run(pub.publish_async(records[:120])) == []
    pub.close()
    assert _count(stack.bootstrap, topic, 2120) == 2120
    assert _count(stack.bootstrap, topic, 2121, timeout_s=3) == 2120  # nothing twice


def test_a_record_the_broker_never_acknowledges_is_returned_as_failed() -> None:
    # No broker at all, and a short message timeout: librdkafka gives up on every record
    # and its queue is empty again, which is exactly what must not read as success.
    pub = Publisher(f"127.0.0.1:{_closed_port()}", "test-pub", **{"message.timeout.ms": 1500})
    records = [Record("nowhere", b"k", b"v%d" % i, ref=i) for i in range(50)]
    failed = pub.publish(records)
    assert sorted(f.record.ref for f in failed) == list(range(50))
    assert all(f.retriable for f in failed)
    failed = asyncio.run(pub.publish_async(records[:5]))
    assert [f.record.ref for f in failed] and all(f.retriable for f in failed)
    pub.close(0)


def test_a_record_too_large_fails_alone_and_permanently(stack: Stack, topic: str) -> None:
    pub = Publisher(stack.bootstrap, "test-pub")
    big = Record(topic, b"k", b"x" * 2_000_000, ref="big")
    failed = pub.publish([Record(topic, b"k", b"small", ref="a"), big,
                          Record(topic, b"k", b"small", ref="b")])
    assert [(f.record.ref, f.retriable) for f in failed] == [("big", False)]
    assert "SIZE" in failed[0].error.upper()
    pub.close()


def test_publish_until_acked_gives_up_only_when_told() -> None:
    pub = Publisher(f"127.0.0.1:{_closed_port()}", "test-pub", **{"message.timeout.ms": 500})
    seen: list[list[Failed]] = []
    rounds = iter(range(3))

    async def no_sleep(_s: float) -> None:
        return None

    ok = asyncio.run(publish_until_acked(
        pub, [Record("nowhere", b"k", b"v")], on_failure=seen.append,
        give_up=lambda: next(rounds) >= 2, sleep=no_sleep))
    assert ok is False
    assert len(seen) == 3 and all(len(f) == 1 for f in seen)
    pub.close(0)
