"""GroupConsumer on the real broker: a failed batch is read again by a local seek, a
rebuilt consumer resumes from the committed offsets, and an outage shows as
``reachable = False`` even with nothing to consume."""

from __future__ import annotations

import time
import uuid

import pytest

from hookstream.core.group import Membership
from hookstream.core.topics import TopicSpec
from hookstream.io.kafka import (
    GroupConsumer,
    KafkaPermanent,
    KafkaTransient,
    consumer_config,
    ensure_topics,
)
from hookstream.policy.membership import MembershipWatch
from tests.conftest import Stack
from tests.relay_fanout_support import produce

pytestmark = pytest.mark.integration


@pytest.fixture
def topic(stack: Stack) -> str:
    name = f"gc-{uuid.uuid4().hex[:10]}"
    ensure_topics(stack.bootstrap, [TopicSpec(name, 1, {})])
    produce(stack.bootstrap, name, ((b"k", b"v%d" % i) for i in range(10)))
    return name


def _offsets(consumer: GroupConsumer, n: int, timeout_s: float = 30) -> list[int]:
    got: list[int] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < n and time.monotonic() < deadline:
        got.extend(m.offset() for m in consumer.consume(n - len(got), 0.5))
    return got


def _consumer(stack: Stack, group: str, topic: str) -> GroupConsumer:
    return GroupConsumer(consumer_config(stack.bootstrap, group, "test"), [topic])


def test_rewind_reads_again_what_was_consumed_and_not_committed(stack: Stack,
                                                                topic: str) -> None:
    consumer = _consumer(stack, f"g-{uuid.uuid4().hex}", topic)
    try:
        assert _offsets(consumer, 10) == list(range(10))
        consumer.commit({(topic, 0): 4})
        consumer.rewind()
        assert _offsets(consumer, 6) == list(range(4, 10))
        consumer.commit({(topic, 0): 10})
        consumer.rewind()  # nothing uncommitted: nothing to read again
        assert _offsets(consumer, 1, timeout_s=2) == []
    finally:
        consumer.close()


def test_asynchronous_commits_count_for_rewind_and_survive_a_clean_close(
        stack: Stack, topic: str) -> None:
    # The fanout commits without waiting for the coordinator (issue #15): a rewind must
    # still start after what was committed so, and a clean close must leave the group's
    # offset at the last commit (the next member reads nothing twice).
    group = f"g-{uuid.uuid4().hex}"
    consumer = _consumer(stack, group, topic)
    try:
        assert _offsets(consumer, 10) == list(range(10))
        consumer.commit({(topic, 0): 6}, asynchronous=True)
        consumer.rewind()
        assert _offsets(consumer, 4) == [6, 7, 8, 9]
        consumer.commit({(topic, 0): 10}, asynchronous=True)
    finally:
        consumer.close()
    assert consumer.commit_failures == 0
    successor = _consumer(stack, group, topic)
    try:
        assert _offsets(successor, 1, timeout_s=5) == []
        produce(stack.bootstrap, topic, [(b"k", b"after")])
        assert _offsets(successor, 1) == [10]
    finally:
        successor.close()


def test_a_rebuilt_consumer_resumes_from_the_committed_offsets(stack: Stack,
                                                               topic: str) -> None:
    consumer = _consumer(stack, f"g-{uuid.uuid4().hex}", topic)
    try:
        assert _offsets(consumer, 10) == list(range(10))
        consumer.commit({(topic, 0): 7})
        consumer.rebuild()
        assert consumer.rebuilt == 1
        assert _offsets(consumer, 3) == [7, 8, 9]
    finally:
        consumer.close()


def test_no_broker_reads_as_unreachable_and_a_commit_fails_transiently() -> None:
    consumer = GroupConsumer(consumer_config("127.0.0.1:1", f"g-{uuid.uuid4().hex}", "test"),
                             ["nowhere"])
    try:
        deadline = time.monotonic() + 15
        while consumer.reachable and time.monotonic() < deadline:
            assert consumer.consume(10, 0.2) == []
        assert not consumer.reachable
        assert "_ALL_BROKERS_DOWN" in (consumer.last_error or "")
        with pytest.raises(KafkaTransient, match="commit"):
            consumer.commit({("nowhere", 0): 1})
    finally:
        consumer.close()


@pytest.mark.parametrize("protocol", ["consumer", "classic"])
def test_a_missing_topic_is_raised_as_the_projects_own_error(stack: Stack,
                                                             protocol: str) -> None:
    # Classic reports it as an error event; KIP-848 says nothing (the member would idle
    # green forever), so the idle probe looks the topic up.
    consumer = GroupConsumer(consumer_config(
        stack.bootstrap, f"g-{uuid.uuid4().hex}", "test", Membership(protocol)),
        [f"missing-{uuid.uuid4().hex[:8]}"])
    try:
        with pytest.raises(KafkaTransient, match="UNKNOWN_TOPIC_OR_PART"):
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                consumer.consume(10, 0.5)
    finally:
        consumer.close()


def test_a_member_is_seen_in_librdkafkas_statistics(stack: Stack, topic: str) -> None:
    consumer = _consumer(stack, f"g-{uuid.uuid4().hex}", topic)
    try:
        assert _offsets(consumer, 10) == list(range(10))
        deadline = time.monotonic() + 15  # the statistics come every 5 s
        while not consumer.watch.member and time.monotonic() < deadline:
            consumer.consume(1, 0.5)
        assert consumer.watch.member and not consumer.watch.stuck
    finally:
        consumer.close()


def test_a_consumer_the_coordinator_keeps_out_of_the_group_is_rebuilt(stack: Stack,
                                                                       topic: str) -> None:
    # A classic member asking for a session timeout below the broker's minimum (Kafka's
    # 6 s, the local stack's 1 s): every JoinGroup is refused while the coordinator
    # answers — a member outside its group for good, for real. consume() says so
    # (KafkaPermanent, so the service's recover() rebuilds it) once the bound passed,
    # instead of reporting transient errors forever.
    config = consumer_config(stack.bootstrap, f"g-{uuid.uuid4().hex}", "test",
                             Membership("classic", 500, 100))
    consumer = GroupConsumer(config, [topic], watch=MembershipWatch(stuck_after_s=5))
    started = time.monotonic()
    try:
        with pytest.raises(KafkaPermanent, match="not a member of its consumer group"):
            while time.monotonic() - started < 30:
                try:
                    consumer.consume(10, 0.5)
                except KafkaTransient as exc:
                    assert "INVALID_SESSION_TIMEOUT" in str(exc)
        assert time.monotonic() - started >= 5
        consumer.recover(KafkaPermanent("stuck"))
        assert consumer.rebuilt == 1 and not consumer.watch.stuck
    finally:
        consumer.close()


def test_consume_returns_what_is_there_without_waiting_for_a_full_batch(
        stack: Stack, topic: str) -> None:
    # 10 records on the topic, 500 asked for, 20 s allowed: the call returns them as soon
    # as they are fetched (confluent-kafka's own consume(500, 20) would sit out the 20 s
    # waiting for 490 more), and one more record produced later comes alone, promptly.
    consumer = _consumer(stack, f"g-{uuid.uuid4().hex}", topic)
    try:
        got: list[int] = []
        while len(got) < 10:
            started = time.monotonic()
            got += [m.offset() for m in consumer.consume(500, 20.0)]
            assert time.monotonic() - started < 10, "waited for the batch to fill"
        assert got == list(range(10))
        produce(stack.bootstrap, topic, [(b"k", b"late")])
        started = time.monotonic()
        assert [m.value() for m in consumer.consume(500, 20.0)] == [b"late"]
        assert time.monotonic() - started < 10, "waited for the batch to fill"
    finally:
        consumer.close()
