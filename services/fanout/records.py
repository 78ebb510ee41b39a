"""What the fanout produces and commits, built from rows and consumed records: pure, no
I/O. Delivery tasks from the rows a statement returned, a dead letter from an event
record, the offsets a batch leaves to commit."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from confluent_kafka import Message

from hookstream.core.codec import EventEnvelope
from hookstream.core.fastcodec import encode_new_task
from hookstream.io.kafka import TP, Record

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def epoch_us(at: datetime) -> int:
    return (at - _EPOCH) // _MICROSECOND


def delivery_tasks(topic: str, rows: Sequence[tuple[Any, ...]], superseded: set[str],
                   events: Sequence[EventEnvelope], now: datetime) -> list[Record]:
    """One statement's delivery rows (as ``store.create_deliveries`` returns them) as
    tasks on ``topic``, due ``now``. A row superseded in the same transaction needs no
    task (it can never be claimed); rows superseded from earlier batches had theirs."""
    committed_us = {str(e.event_id): epoch_us(e.committed_at) for e in events}
    due_us = epoch_us(now)
    return [
        Record(topic, key, encode_new_task(delivery_id, event_id, endpoint_id, tenant,
                                           due_us, committed_us[event_id], lease_version))
        for (delivery_id, event_id, endpoint_id, key, tenant, lease_version,
             _ck, _created) in rows if delivery_id not in superseded]


def dead_letter(topic: str, msg: Message, reason: str) -> Record:
    """The event record ``msg`` on the dead-letter ``topic``, saying why and whence."""
    return Record(topic, msg.key() or b"", msg.value() or b"", headers=[
        ("hookstream-reason", reason.encode()),
        ("hookstream-source", f"{msg.topic()}/{msg.partition()}/{msg.offset()}".encode()),
    ])


def next_offsets(messages: Sequence[Message]) -> dict[TP, int]:
    """Per partition, the next offset to read after ``messages``."""
    highest: dict[TP, int] = {}
    for m in messages:
        # A consumed record always has its topic, partition and offset.
        key = cast(TP, (m.topic(), m.partition()))
        highest[key] = max(highest.get(key, -1), cast(int, m.offset()))
    return {tp: o + 1 for tp, o in highest.items()}
