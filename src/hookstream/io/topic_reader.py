"""Reading a stretch of a topic without joining a consumer group (the dead-letter
listing of the control plane): from a time or from given offsets, at most ``limit``
records in time order, and where to go on from.

A page is read from every partition (at most ``limit`` records each, never past the
partition's end as it was when the read began), merged by timestamp, and cut at
``limit``; the next page starts, per partition, right after the last record this one
returned from it, so a record left out is read again next time, never skipped.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_END, Consumer, KafkaError, KafkaException, TopicPartition

from hookstream.io.kafka import BrokerUnavailable, client_log


@dataclass(frozen=True)
class StoredRecord:
    partition: int
    offset: int
    timestamp_ms: int | None
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True)
class Page:
    records: list[StoredRecord]
    next_offsets: dict[int, int] | None  # None: nothing after this page (for now)


def read_page(bootstrap: str, topic: str, *, since_ms: int | None,
              offsets: dict[int, int] | None, limit: int, timeout_s: float = 10.0) -> Page:
    """``offsets`` (partition → next offset) continues a previous page; else from
    ``since_ms`` (None: each partition's start). A missing topic is an empty page."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4()}",
                         "enable.auto.commit": False, "enable.auto.offset.store": False,
                         # the end of a partition is an event: no waiting out the deadline
                         # when the last offsets are transaction markers, not records
                         "enable.partition.eof": True, "logger": client_log})
    try:
        return _read(consumer, topic, since_ms, offsets, limit, timeout_s)
    except KafkaException as exc:
        raise BrokerUnavailable(f"cannot read {topic}: {exc.args[0].str()}") from exc
    finally:
        consumer.close()


def _read(consumer: Consumer, topic: str, since_ms: int | None,
          offsets: dict[int, int] | None, limit: int, timeout_s: float) -> Page:
    deadline = time.monotonic() + timeout_s
    meta = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
    if meta is None or meta.error is not None or not meta.partitions:
        return Page([], None)
    partitions = sorted(meta.partitions)
    ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)
            for p in partitions}
    starts = _starts(consumer, topic, partitions, ends, since_ms, offsets, timeout_s)
    wanted = {p: starts[p] for p in partitions if starts[p] < ends[p][1]}
    per_partition: dict[int, list[StoredRecord]] = {p: [] for p in partitions}
    if wanted:
        consumer.assign([TopicPartition(topic, p, o) for p, o in wanted.items()])
        open_ = set(wanted)
        while open_ and time.monotonic() < deadline:
            for msg in consumer.consume(500, timeout=0.2):
                p, offset = msg.partition(), msg.offset()
                if p is None:
                    continue
                if (err := msg.error()) is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        open_.discard(p)
                    continue
                if p not in open_ or offset is None:
                    continue
                kind, ts = msg.timestamp()
                headers = [(k, v if isinstance(v, bytes) else (v or "").encode())
                           for k, v in _header_pairs(msg.headers())]
                per_partition[p].append(StoredRecord(
                    p, offset, ts if kind else None, msg.key(), msg.value(), tuple(headers)))
                if offset + 1 >= ends[p][1] or len(per_partition[p]) >= limit:
                    open_.discard(p)
        # Past the deadline what was read is returned; the cursor resumes the rest.
    merged = sorted((r for rs in per_partition.values() for r in rs),
                    key=lambda r: (r.timestamp_ms or 0, r.partition, r.offset))[:limit]
    next_offsets = dict(starts)
    for r in merged:
        next_offsets[r.partition] = r.offset + 1
    more = any(next_offsets[p] < ends[p][1] for p in partitions)
    return Page(merged, next_offsets if more else None)


def _header_pairs(headers: Any) -> list[tuple[str, Any]]:
    if headers is None:
        return []
    return list(headers.items()) if isinstance(headers, dict) else list(headers)


def _starts(consumer: Consumer, topic: str, partitions: list[int],
            ends: dict[int, tuple[int, int]], since_ms: int | None,
            offsets: dict[int, int] | None, timeout_s: float) -> dict[int, int]:
    if offsets is not None:
        # A partition the cursor does not name (added since) is read from its start.
        return {p: max(offsets.get(p, ends[p][0]), ends[p][0]) for p in partitions}
    if since_ms is None:
        return {p: ends[p][0] for p in partitions}
    found = consumer.offsets_for_times(
        [TopicPartition(topic, p, since_ms) for p in partitions], timeout=timeout_s)
    # No record at or after the time: that partition has nothing to show (its end).
    return {tp.partition: ends[tp.partition][1] if tp.offset in (-1, OFFSET_END)
            else max(tp.offset, ends[tp.partition][0]) for tp in found}
