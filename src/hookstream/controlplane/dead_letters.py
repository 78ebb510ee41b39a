"""The dead-letter topic (``<prefix>.dead``), read a page at a time and decoded.

Three kinds of record land there: a delivery that became dead (its task, with the last
error as ``hookstream-reason``), an event record the fanout could not decode or store
(with ``hookstream-source``: where it was read), and a task the dispatcher could not
decode. Operators only: an undecodable record names no tenant, so there is nothing to
scope it by; a tenant sees its dead deliveries among its deliveries.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from datetime import UTC, datetime
from typing import Any

import orjson

from hookstream.controlplane.errors import invalid
from hookstream.core.codec import CodecError, DeliveryTask, EventEnvelope
from hookstream.core.settings import ApiSettings
from hookstream.core.topics import Topics
from hookstream.io.topic_reader import Page, StoredRecord, read_page

VALUE_EXCERPT_BYTES = 4096
READ_TIMEOUT_S = 10.0


def encode_offsets(offsets: dict[int, int]) -> str:
    raw = orjson.dumps({str(p): o for p, o in sorted(offsets.items())})
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_offsets(raw: str) -> dict[int, int]:
    try:
        if len(raw) > 4096:
            raise ValueError
        data = orjson.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
        offsets = {int(p): int(o) for p, o in data.items()}
        if len(offsets) > 10_000 or any(not (0 <= p < 2**31 and 0 <= o < 2**63)
                                        for p, o in offsets.items()):
            raise ValueError
        return offsets
    except (ValueError, TypeError, AttributeError, binascii.Error, orjson.JSONDecodeError):
        raise invalid("cursor", "not a cursor this API returned") from None


def dead_letter(record: StoredRecord) -> dict[str, Any]:
    headers = dict(record.headers)
    source = headers.get("hookstream-source", b"").decode("utf-8", "replace") or None
    value = record.value or b""
    view: dict[str, Any] = {
        "partition": record.partition, "offset": record.offset,
        "timestamp": None if record.timestamp_ms is None else datetime.fromtimestamp(
            record.timestamp_ms / 1000, UTC).isoformat(),
        "reason": headers.get("hookstream-reason", b"").decode("utf-8", "replace") or None,
        "source": source, "kind": "undecodable", "delivery": None, "event": None,
        "value_bytes": len(value), "value_base64": None,
    }
    try:
        # The fanout's dead letters are event records (they name the topic they came
        # from); the dispatcher's are delivery tasks.
        if source is not None and ".events/" in source:
            ev = EventEnvelope.decode(value)
            view["kind"], view["event"] = "event", {
                "event_id": ev.event_id, "tenant": ev.tenant, "type": ev.type,
                "occurred_at": ev.occurred_at}
        else:
            task = DeliveryTask.decode(value)
            view["kind"], view["delivery"] = "delivery", {
                "delivery_id": task.delivery_id, "event_id": task.event_id,
                "endpoint_id": task.endpoint_id, "tenant": task.tenant,
                "task_kind": task.kind.value}
    except (CodecError, ValueError):
        view["value_base64"] = base64.b64encode(value[:VALUE_EXCERPT_BYTES]).decode("ascii")
    return view


async def read(settings: ApiSettings, *, since: datetime | None,
               offsets: dict[int, int] | None, limit: int) -> Page:
    """Up to ``limit`` records from ``offsets`` (a cursor) or from ``since``."""
    since_ms = None if since is None else int(since.timestamp() * 1000)
    return await asyncio.to_thread(
        read_page, settings.kafka_bootstrap, Topics(settings.topic_prefix).dead,
        since_ms=since_ms, offsets=offsets, limit=limit, timeout_s=READ_TIMEOUT_S)
