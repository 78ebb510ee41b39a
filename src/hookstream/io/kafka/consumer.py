"""A consumer-group member for a service that consumes, processes and then commits, and
the consuming primitives a service with its own consumer shares."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, cast

import orjson
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from hookstream.io.kafka.errors import (
    KafkaPermanent,
    KafkaTransient,
    consumer_error,
    translated,
    without_errors,
)
from hookstream.policy.membership import MembershipWatch, group_stats

log = logging.getLogger("hookstream.io.kafka")

# A consumer's final commit and group leave at a stop, at most (see GroupConsumer.close):
# within the 30 s a supervisor gives after SIGTERM, with room for the rest of a stop.
CLOSE_WAIT_S = 5.0

TP = tuple[str, int]

Rebalanced = Callable[[list[TP]], None]
STATS_INTERVAL_MS = 5_000


def consume_available(consumer: Consumer, max_records: int, timeout_s: float,
                      gather_s: float = 0.0) -> list[Message]:
    """What is there now, up to ``max_records``; if nothing is, the first record to come
    within ``timeout_s`` and whatever arrived with it. Never waits for a batch to fill:
    confluent-kafka's ``consume(n, timeout)`` returns only once it has ``n`` messages or
    the timeout passed, so at low load every batch waited out the whole timeout (the
    fanout's 0.5 s was most of the pipeline's latency floor, issue #15). At high load
    the queue holds more than ``max_records`` and batches are full as before.

    ``gather_s``: once a batch has started, wait at most this long for company — for a
    consumer whose every batch costs database round trips, a few milliseconds of latency
    buy batches several times larger at moderate load (the CPU the dispatcher needs)."""
    messages = consumer.consume(max_records, 0)
    if not messages and timeout_s > 0:
        messages = consumer.consume(1, timeout_s)
        if messages and max_records > 1:
            messages += consumer.consume(max_records - 1, 0)
    if messages and gather_s > 0 and len(messages) < max_records:
        deadline = time.monotonic() + gather_s
        while len(messages) < max_records and (left := deadline - time.monotonic()) > 0:
            messages += consumer.consume(max_records - len(messages), left)
    return messages


def watching(config: dict[str, object], watch: MembershipWatch) -> dict[str, object]:
    """``config`` with librdkafka's statistics fed to ``watch`` (served from consume, on
    the consuming thread): how a consumer stuck outside its group is noticed."""
    def on_stats(raw: str) -> None:
        try:
            watch.observe(group_stats(orjson.loads(raw)), time.monotonic())
        except orjson.JSONDecodeError:  # never seen; a report lost is not worth a crash
            log.warning("unreadable librdkafka statistics")

    return {**config, "statistics.interval.ms": STATS_INTERVAL_MS, "stats_cb": on_stats}


def stuck_error(watch: MembershipWatch) -> KafkaPermanent:
    return KafkaPermanent(
        f"not a member of its consumer group for {watch.outside_for(time.monotonic()):.0f}s"
        " although the group coordinator answers: recreating the consumer")


class GroupConsumer:
    """One consumer-group member, for a service that consumes, processes and then commits
    from a single thread, with confluent-kafka's errors translated (see above).

    It remembers, per partition, the first record consumed and not yet committed, so a
    failed batch is read again by ``rewind()`` (a local seek: no broker round trip, so it
    works during an outage). A consumer that failed for good, or could not seek, is
    replaced by ``rebuild()`` (closed, made anew, subscribed again: it resumes from the
    committed offsets).

    A member left outside its group while the coordinator answers (``MembershipWatch``)
    makes ``consume`` raise KafkaPermanent, so the caller's ``recover`` rebuilds it.

    ``reachable`` is False from librdkafka's "all brokers down", or from the second failed
    metadata probe in a row (an idle consumer probes every ``probe_interval_s``: the error
    callback alone was seen to stay silent through a 50 s outage), until the broker
    answers again (a record consumed, a commit, or a probe), so an idle service reports
    an outage too.
    """

    def __init__(self, config: dict[str, object], topics: Sequence[str], *,
                 on_assign: Rebalanced | None = None, on_revoke: Rebalanced | None = None,
                 on_lost: Rebalanced | None = None, probe_interval_s: float = 2.0,
                 watch: MembershipWatch | None = None):
        self.watch = watch or MembershipWatch()
        self._config = watching({**config, "error_cb": self._on_error,
                                 "on_commit": self._on_commit}, self.watch)
        self._topics = list(topics)
        self._callbacks = (on_assign, on_revoke, on_lost)
        self.probe_interval_s = probe_interval_s
        self.reachable = True
        self.last_error: str | None = None
        self.rebuilt = 0
        self.commit_failures = 0
        # The latest offsets committed without waiting, per partition still owned.
        self._async_offsets: dict[TP, int] = {}
        self._fatal: KafkaError | None = None
        self._last_probe = 0.0
        self._probe_failures = 0
        # partition → [first consumed offset not committed, highest consumed offset]
        self._uncommitted: dict[TP, list[int]] = {}
        self._consumer = self._subscribed()

    def _subscribed(self) -> Consumer:
        consumer = Consumer(self._config)
        on_assign, on_revoke, on_lost = self._callbacks

        def assigned(_c: Any, partitions: list[Any]) -> None:
            if on_assign is not None:
                on_assign([(tp.topic, tp.partition) for tp in partitions])

        def revoked(_c: Any, partitions: list[Any]) -> None:
            tps = [(tp.topic, tp.partition) for tp in partitions]
            for tp in tps:
                self._uncommitted.pop(tp, None)
                self._async_offsets.pop(tp, None)
            if on_revoke is not None:
                on_revoke(tps)

        def lost(_c: Any, partitions: list[Any]) -> None:
            tps = [(tp.topic, tp.partition) for tp in partitions]
            for tp in tps:
                self._uncommitted.pop(tp, None)
                self._async_offsets.pop(tp, None)
            if on_lost is not None:
                on_lost(tps)

        with translated("subscribe"):
            consumer.subscribe(self._topics, on_assign=assigned, on_revoke=revoked,
                               on_lost=lost)
        return consumer

    def _on_error(self, err: KafkaError) -> None:
        # Served from consume(), on the consuming thread.
        if err.fatal():
            self._fatal = err
        if err.code() == KafkaError._ALL_BROKERS_DOWN or err.fatal():
            self.reachable = False
            self.last_error = f"kafka: {err.name()}: {err.str()}"

    def _answered(self) -> None:
        self.reachable, self.last_error = True, None
        self._probe_failures = 0

    def _on_commit(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        # Served from consume(). An asynchronous commit that failed leaves the records
        # processed but not marked: they are read again after a restart or a rebalance
        # (at least once; every consumer here is idempotent), never skipped.
        failed = [tp for tp in partitions if tp.error is not None]
        if err is not None or failed:
            self.commit_failures += 1
            log.warning("offset commit failed; those records may be read again", extra={
                "error": str(err or failed[0].error),
                "partitions": [tp.partition for tp in failed] or None})

    # -- consuming ---------------------------------------------------------------------
    def consume(self, max_records: int, timeout_s: float,
                gather_s: float = 0.0) -> list[Message]:
        """The records consumed (never error events). Raises KafkaPermanent after a fatal
        error, KafkaTransient for any other error event; the records consumed with it are
        remembered as uncommitted, so a ``rewind()`` reads them again."""
        if self._fatal is not None:
            raise consumer_error(self._fatal, "consume")
        with translated("consume"):
            messages = consume_available(self._consumer, max_records, timeout_s, gather_s)
        good, error = without_errors(messages)
        for msg in good:
            # A consumed record (no error) always has its topic, partition and offset.
            tp = cast(TP, (msg.topic(), msg.partition()))
            offset = cast(int, msg.offset())
            span = self._uncommitted.get(tp)
            if span is None:
                self._uncommitted[tp] = [offset, offset]
            else:
                span[1] = max(span[1], offset)
        if good:
            self._answered()
        if self._fatal is not None:
            raise consumer_error(self._fatal, "consume")
        if self.watch.stuck:  # before its error events: they may never stop coming
            raise stuck_error(self.watch)  # recover() rebuilds it
        if error is not None:
            raise error
        if not good:
            self._probe()
        return good

    def _probe(self) -> None:
        now = time.monotonic()
        if now - self._last_probe < self.probe_interval_s:
            return
        self._last_probe = now
        missing: list[KafkaError] = []
        try:
            # One request for all topics: librdkafka spaces metadata requests ~0.5 s
            # apart, so one request per subscribed topic blocked this consumer's loop
            # for seconds (the delay forwarder reads seven tiers: retries came late).
            known = self._consumer.list_topics(timeout=2.0).topics
            for topic in self._topics:
                found = known.get(topic)
                if found is None:
                    missing.append(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART,
                                              f"Subscribed topic not available: {topic}"))
                elif found.error is not None:
                    missing.append(found.error)
        except KafkaException as exc:
            self._probe_failures += 1
            if self._probe_failures >= 2:  # one slow answer on a busy host is not an outage
                self.reachable = False
                self.last_error = f"kafka: metadata probe failed: {exc}"
            return
        self._answered()
        if missing:
            # The classic protocol reports a subscribed topic that does not exist as an
            # error event; KIP-848 says nothing and the member idles. Either way the
            # caller hears it (a service reports it instead of a quiet green idle).
            raise consumer_error(missing[0], "consume")

    def commit(self, offsets: dict[TP, int], *, asynchronous: bool = False) -> None:
        """Commit the next offset to read of each partition; call it only once what
        those records caused is durable. ``asynchronous``: do not wait for the
        coordinator's answer (a round trip per batch on the latency path, issue #15):
        a commit that then fails is reported by ``_on_commit`` and costs a re-read
        after a restart, never a loss."""
        if not offsets:
            return
        tps = [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
        with translated("commit"):
            if asynchronous:
                self._consumer.commit(offsets=tps, asynchronous=True)
                result = []
            else:
                result = self._consumer.commit(offsets=tps, asynchronous=False)
        for tp in result or []:
            if tp.error is not None:
                raise consumer_error(tp.error, "commit")
        if asynchronous:
            self._async_offsets.update(offsets)
        else:
            self._answered()
            for tp_key in offsets:
                self._async_offsets.pop(tp_key, None)
        for tp_key, offset in offsets.items():
            span = self._uncommitted.get(tp_key)
            if span is None:
                continue
            if span[1] >= offset:
                span[0] = max(span[0], offset)
            else:
                del self._uncommitted[tp_key]

    def pause(self, partitions: Iterable[TP]) -> None:
        with translated("pause"):
            self._consumer.pause([TopicPartition(t, p) for t, p in partitions])

    def resume(self, partitions: Iterable[TP]) -> None:
        with translated("resume"):
            self._consumer.resume([TopicPartition(t, p) for t, p in partitions])

    def assignment(self) -> list[TP]:
        with translated("assignment"):
            return [(tp.topic, tp.partition) for tp in self._consumer.assignment()]

    # -- recovering --------------------------------------------------------------------
    def rewind(self) -> None:
        """Seek each partition back to its first record consumed and not committed."""
        for (t, p), (first, _) in list(self._uncommitted.items()):
            with translated("seek"):
                self._consumer.seek(TopicPartition(t, p, first))
            del self._uncommitted[(t, p)]

    def rebuild(self) -> None:
        """Close this consumer (its partitions are revoked) and subscribe a new one, which
        resumes from the committed offsets. Errors of the old one are only logged."""
        self._close_quietly()
        self._uncommitted.clear()
        self._async_offsets.clear()
        self._fatal = None
        self.watch.reset()
        self._consumer = self._subscribed()
        self.rebuilt += 1

    def recover(self, failure: BaseException) -> None:
        """After a failed batch: rewind, or rebuild when the consumer failed for good or
        cannot seek."""
        if not isinstance(failure, KafkaPermanent):
            try:
                self.rewind()
                return
            except (KafkaTransient, KafkaPermanent) as exc:
                log.warning("rewind failed; rebuilding the consumer", extra={"error": str(exc)})
        else:
            log.warning("consumer failed; rebuilding it", extra={"error": str(failure)})
        self.rebuild()

    def _close_quietly(self) -> None:
        try:
            self._consumer.close()
        except (KafkaException, RuntimeError) as exc:  # already closed, or fatal
            log.warning("consumer close failed", extra={"error": str(exc)})

    def close(self, wait_s: float = CLOSE_WAIT_S) -> bool:
        """Leave the group. The last asynchronous commits are made again, waiting this
        time, so a clean stop leaves nothing to read twice — for at most ``wait_s``:
        librdkafka's synchronous commit waits as long as the coordinator does not answer
        (a frozen broker: minutes measured), which kept a SIGTERMed service alive until
        it was killed. Past the bound (False) the close is left to a daemon thread and
        the caller goes on; what was not committed is read again by the next owner."""
        def final() -> None:
            if self._async_offsets:
                try:
                    self.commit(dict(self._async_offsets))
                except (KafkaTransient, KafkaPermanent) as exc:
                    log.warning("final commit failed; those records may be read again",
                                extra={"error": str(exc)})
            self._close_quietly()

        closing = threading.Thread(target=final, name="consumer-close", daemon=True)
        closing.start()
        closing.join(wait_s)
        if closing.is_alive():
            log.error("the consumer did not close within its bound (the broker does not "
                      "answer); records not committed will be read again by the next owner",
                      extra={"wait_s": wait_s})
            return False
        return True
