"""The dispatcher's deliveries consumer on the real broker, under back-pressure: held, it
returns no records but is still polled, so a rebalance the group needs meanwhile (a
second dispatcher joining) completes at once instead of waiting for the scheduler to
drain; released, it reads on from where it was."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from hookstream.dispatcher.consumer import DeliveryConsumer
from hookstream.dispatcher.offset_book import OffsetBook

from hookstream.core.topics import TopicSpec
from hookstream.io.kafka import ensure_topics
from tests.conftest import Stack
from tests.relay_fanout_support import produce

pytestmark = pytest.mark.integration
PARTITIONS = 4
RECORDS = 40


@pytest.fixture
def topic(stack: Stack) -> str:
    name = f"dc-{uuid.uuid4().hex[:10]}"
    ensure_topics(stack.bootstrap, [TopicSpec(name, PARTITIONS, {})])
    produce(stack.bootstrap, name, ((b"k%d" % i, b"v%d" % i) for i in range(RECORDS)))
    return name


def _consumer(stack: Stack, group: str, topic: str, book: OffsetBook,
              failures: list[str]) -> DeliveryConsumer:
    return DeliveryConsumer(bootstrap=stack.bootstrap, group_id=group, topic=topic, book=book,
                            fail=lambda kind, exc: failures.append(f"{kind}: {exc}"))


async def test_a_held_consumer_reads_nothing_and_still_lets_the_group_rebalance(
        stack: Stack, topic: str) -> None:
    group = f"g-{uuid.uuid4().hex}"
    failures: list[str] = []
    first_book, second_book = OffsetBook(), OffsetBook()
    first = _consumer(stack, group, topic, first_book, failures)
    second = _consumer(stack, group, topic, second_book, failures)
    await first.subscribe()
    try:
        # Joined, owning every partition, records read (the scheduler "fills up").
        seen: set[tuple[int, int]] = set()
        deadline = time.monotonic() + 30
        while not seen:
            assert time.monotonic() < deadline, "nothing consumed"
            seen |= {(m.partition(), m.offset()) for m in await first.consume(hold=False)}
        # Held: polled, but nothing more comes, however long.
        held_until = time.monotonic() + 3
        while time.monotonic() < held_until:
            assert await first.consume(hold=True) == []
        # A second member joins while the first is still held: the rebalance completes
        # (the first is polled: it serves the revocation) and the second gets partitions.
        await second.subscribe()
        got_partitions = time.monotonic() + 20
        while not second_book.owned():
            assert time.monotonic() < got_partitions, "the rebalance waited for the held member"
            assert await first.consume(hold=True) == []
            await second.consume(hold=False)
        assert first_book.owned() and second_book.owned()
        assert first_book.owned().isdisjoint(second_book.owned())
        # Released: the first reads on where it was on the partitions it kept (the pause
        # dropped what was prefetched, not its position): only new records.
        produce(stack.bootstrap, topic, ((b"k%d" % i, b"new") for i in range(RECORDS)))
        after: list[tuple[int, int]] = []
        deadline = time.monotonic() + 30
        while not after:
            assert time.monotonic() < deadline, "nothing consumed after the hold"
            after += [(m.partition(), m.offset()) for m in await first.consume(hold=False)]
        assert not seen & set(after)
        assert {p for p, _ in after} <= {p for _, p in first_book.owned()}
    finally:
        await asyncio.gather(first.close(), second.close())
    assert failures == []
