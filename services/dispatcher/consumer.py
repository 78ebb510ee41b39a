"""The dispatcher's consumer of the deliveries topic, and its offset commits.

confluent-kafka is blocking: every call into the consumer runs on one worker thread
(the rebalance callbacks too, inside ``consume``), awaited from the event loop. Which
offsets may be committed is the ``OffsetBook``'s decision; this module only tells it
about rebalances and carries its commits out:

* assigned: the partitions get fresh trackers;
* revoked: what is finished is committed (the request precedes the rejoin on the
  coordinator's connection, so the next owner reads it); queued work of
  these partitions is dropped when the pump meets it (its tracker is gone); in-flight
  attempts finish and write their outcome under their lease, and the next owner's claim
  of the redelivered task is stale;
* lost: someone else may own them already, nothing is committed.

No call here waits for the coordinator's answer to a commit: librdkafka's synchronous
commit waits as long as the coordinator does not answer (a broker frozen or half-
restarted: minutes measured), on the one thread every call into the consumer takes, so
the dispatcher stopped consuming and a SIGTERM never ended (CI, a Kafka restart). A
commit is sent and the book counts it made; a failed one is reported by ``_on_commit``
and sent again (a lost commit costs tasks read twice, whose stale claims send nothing).
The consumer's close at shutdown is bounded likewise (``CLOSE_WAIT_S``).

A consumer that failed for good (``KafkaPermanent``), or that stays outside its group
while the coordinator answers (``hookstream.policy.membership``), is replaced by
``rebuild``: the new one resumes from the committed offsets; what the old one held in
memory is redelivered. Under back-pressure it is still polled, with its partitions
paused: a member that stops polling holds up every rebalance of the group and, past
``max.poll.interval.ms``, is dropped from it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition
from hookstream.dispatcher.offset_book import TP, OffsetBook

from hookstream.core.aio import CallThread
from hookstream.core.group import DEFAULT_MEMBERSHIP, Membership
from hookstream.io.kafka import (
    CLOSE_WAIT_S,
    KafkaPermanent,
    KafkaTransient,
    consume_available,
    consumer_config,
    stuck_error,
    translated,
    watching,
    without_errors,
)
from hookstream.policy.membership import MembershipWatch

log = logging.getLogger("hookstream.dispatcher")
T = TypeVar("T")
COMMIT_INTERVAL_S = 0.5
CONSUME_MAX = 500
CONSUME_WAIT_S = 0.1


def _partitions(commits: dict[TP, int]) -> list[TopicPartition]:
    return [TopicPartition(t, p, o) for (t, p), o in commits.items()]


class DeliveryConsumer:
    def __init__(self, *, bootstrap: str, group_id: str, topic: str, book: OffsetBook,
                 fail: Callable[[str, BaseException], None],
                 membership: Membership = DEFAULT_MEMBERSHIP):
        self._bootstrap, self._group_id, self._topic = bootstrap, group_id, topic
        self._membership = membership
        self._book, self._fail = book, fail
        self._kafka = CallThread("kafka")
        self._consumer: Consumer | None = None
        self.watch = MembershipWatch()
        # Partitions this consumer paused for back-pressure: each is paused once and
        # resumed once (librdkafka purges a paused partition's prefetched records, and
        # repeated pause/resume calls are where its pause bugs live).
        self._paused: set[TP] = set()

    # -- from the event loop: each call runs on the Kafka thread ---------------------------
    async def _k(self, fn: Callable[..., T], *args: Any) -> T:
        return await self._kafka.call(fn, *args)

    async def subscribe(self) -> None:
        await self._k(self._subscribe)

    async def consume(self, hold: bool = False) -> list[Message]:
        """Records only; an error event is reported (transient) or raised (the consumer
        failed for good, or is stuck outside its group: KafkaPermanent). Raises
        KafkaTransient when the call failed. ``hold``: back-pressure — every partition
        is paused, but the consumer is still polled, so rebalances are served and the
        member stays in its group however long the scheduler needs to drain."""
        return await self._k(self._consume, hold)

    async def rebuild(self, reason: str | None) -> None:
        await self._k(self._rebuild, reason)

    async def commit(self) -> None:
        """Send the commit of what the book allows, without waiting for its answer
        (raises KafkaTransient / KafkaPermanent when it cannot be sent)."""
        await self._k(self._commit)

    async def commit_forever(self) -> None:
        while True:
            await asyncio.sleep(COMMIT_INTERVAL_S)
            try:
                await self.commit()
            except (KafkaTransient, KafkaPermanent) as exc:
                self._fail("kafka", exc)

    async def close(self, wait_s: float = CLOSE_WAIT_S) -> bool:
        """The final commit (waiting for its answer this time), then leave the group and
        stop the Kafka thread; False when that took longer than ``wait_s`` (the broker
        does not answer): the thread is left to it, and the process may still exit."""
        try:
            async with asyncio.timeout(wait_s):
                try:
                    await self._k(self._final_commit)
                except (KafkaTransient, KafkaPermanent) as exc:
                    log.warning("final commit failed; those tasks will be read again",
                                extra={"error": str(exc)})
                await self._k(self._close)
            return True
        except TimeoutError:
            log.error("the consumer did not close within its bound (the broker does not "
                      "answer); tasks not committed will be read again by the next owner",
                      extra={"wait_s": wait_s})
            return False
        finally:
            self._kafka.stop()

    # -- on the Kafka thread ----------------------------------------------------------------
    def _subscribe(self) -> None:
        self.watch.reset()
        self._paused.clear()
        consumer = Consumer(watching(consumer_config(
            self._bootstrap, self._group_id, "hookstream-dispatcher", self._membership,
            **{"fetch.wait.max.ms": 50, "on_commit": self._on_commit}), self.watch))
        with translated("subscribe"):
            consumer.subscribe([self._topic], on_assign=self._on_assign,
                               on_revoke=self._on_revoke, on_lost=self._on_lost)
        self._consumer = consumer

    def _consume(self, hold: bool) -> list[Message]:
        consumer = self._consumer
        assert consumer is not None
        if hold:
            with translated("pause"):
                # Partitions assigned while held are paused too, each once.
                fresh = [tp for tp in consumer.assignment()
                         if (tp.topic, tp.partition) not in self._paused]
                if fresh:
                    consumer.pause(fresh)
                    self._paused.update((tp.topic, tp.partition) for tp in fresh)
        elif self._paused:
            with translated("resume"):
                consumer.resume([TopicPartition(t, p) for t, p in self._paused])
            self._paused.clear()
        with translated("consume"):
            messages = consume_available(consumer, CONSUME_MAX, CONSUME_WAIT_S)
        good, error = without_errors(messages)
        if isinstance(error, KafkaPermanent):
            raise error
        if error is not None:
            self._fail("kafka", error)
        if self.watch.stuck:
            raise stuck_error(self.watch)  # the service rebuilds it
        return good

    def _rebuild(self, reason: str | None) -> None:
        log.warning("rebuilding the consumer", extra={"error": reason})
        self._close()
        self._subscribe()

    def _close(self) -> None:
        if self._consumer is None:
            return
        try:
            with translated("close"):
                self._consumer.close()
        except (KafkaTransient, KafkaPermanent) as exc:
            log.warning("consumer close failed", extra={"error": str(exc)})

    def _commit(self) -> None:
        consumer = self._consumer
        commits = self._book.commits()
        if commits and consumer is not None:
            with translated("commit"):
                consumer.commit(offsets=_partitions(commits), asynchronous=True)
            self._book.committed(commits)

    def _final_commit(self) -> None:
        consumer = self._consumer
        commits = self._book.commits()
        if commits and consumer is not None:
            with translated("final commit"):
                result = consumer.commit(offsets=_partitions(commits), asynchronous=False)
            if failed := [tp for tp in result or [] if tp.error is not None]:
                raise KafkaTransient(f"final commit: {failed[0].error}")
            self._book.committed(commits)

    def _on_commit(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        """The answer to a commit (served inside consume, on the Kafka thread). What was
        not committed is sent again by the next commit."""
        failed = {(tp.topic, tp.partition): tp.offset for tp in partitions
                  if err is not None or tp.error is not None}
        if not failed:
            return
        self._book.commit_failed(failed)
        first = err if err is not None else next(
            tp.error for tp in partitions if tp.error is not None)
        if isinstance(first, KafkaError) and first.code() == KafkaError._NO_OFFSET:
            return  # nothing to commit: not a failure
        self._fail("kafka", KafkaTransient(f"commit: {first}"))

    # -- rebalance callbacks (inside consume, on the Kafka thread) -----------------------------
    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._book.assigned((tp.topic, tp.partition) for tp in partitions)
        log.info("partitions assigned", extra={"partitions": [tp.partition for tp in partitions]})

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._paused.difference_update((tp.topic, tp.partition) for tp in partitions)
        commits = self._book.revoked((tp.topic, tp.partition) for tp in partitions)
        if commits:
            try:
                with translated("commit on revoke"):
                    consumer.commit(offsets=_partitions(commits), asynchronous=True)
            except (KafkaTransient, KafkaPermanent) as exc:
                log.warning("commit on revoke failed", extra={"error": str(exc)})
        log.info("partitions revoked", extra={"partitions": [tp.partition for tp in partitions]})

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._paused.difference_update((tp.topic, tp.partition) for tp in partitions)
        self._book.lost((tp.topic, tp.partition) for tp in partitions)
        log.warning("partitions lost", extra={"partitions": [tp.partition for tp in partitions]})
