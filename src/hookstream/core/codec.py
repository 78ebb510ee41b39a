"""Avro encoding of the Kafka records, with the schemas in ``schemas/avro``.

Wire format of a record value: one magic byte (0), one schema-version byte,
then the schemaless Avro body. The version byte lets a consumer reject (and
route to quarantine) a record written by a newer producer instead of
misreading it; bumping a schema means adding ``<name>.v<N+1>.avsc``.
"""

from __future__ import annotations

import io
import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from functools import cache
from importlib import resources
from typing import Any, cast

import fastavro

MAGIC = 0


class CodecError(ValueError):
    """A record could not be decoded: wrong magic, unknown schema version or corrupt body."""


@cache
def _schema(name: str, version: int) -> Any:
    path = resources.files("hookstream.schemas.avro") / f"{name}.v{version}.avsc"
    try:
        raw = json.loads(path.read_text("utf-8"))
    except FileNotFoundError:
        raise CodecError(f"unknown schema {name} v{version}") from None
    return fastavro.parse_schema(raw)


def _encode(name: str, version: int, record: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    buf.write(bytes((MAGIC, version)))
    fastavro.schemaless_writer(buf, _schema(name, version), record)
    return buf.getvalue()


def _decode(name: str, data: bytes) -> dict[str, Any]:
    if len(data) < 2 or data[0] != MAGIC:
        raise CodecError(f"{name}: not a hookstream record (bad magic)")
    schema = _schema(name, data[1])
    try:
        record = fastavro.schemaless_reader(io.BytesIO(data[2:]), schema, None)  # type: ignore[arg-type]
        return cast(dict[str, Any], record)  # our schemas are all records
    except Exception as exc:  # fastavro raises several types for corrupt input
        raise CodecError(f"{name}: corrupt record: {exc}") from exc


@dataclass(frozen=True, slots=True)
class EventEnvelope:
    event_id: uuid.UUID
    tenant: str
    type: str
    schema_version: int
    object_id: str | None
    object_version: int | None
    coalescing_key: str | None
    occurred_at: datetime
    committed_at: datetime
    payload: bytes

    def encode(self) -> bytes:
        return _encode("event_envelope", 1, {
            "event_id": self.event_id,
            "tenant": self.tenant,
            "type": self.type,
            "schema_version": self.schema_version,
            "object_id": self.object_id,
            "object_version": self.object_version,
            "coalescing_key": self.coalescing_key,
            "occurred_at": self.occurred_at,
            "committed_at": self.committed_at,
            "payload": self.payload,
        })

    @classmethod
    def decode(cls, data: bytes) -> EventEnvelope:
        r = _decode("event_envelope", data)
        return cls(
            event_id=_as_uuid(r["event_id"]),
            tenant=r["tenant"],
            type=r["type"],
            schema_version=r["schema_version"],
            object_id=r["object_id"],
            object_version=r["object_version"],
            coalescing_key=r["coalescing_key"],
            occurred_at=r["occurred_at"],
            committed_at=r["committed_at"],
            payload=r["payload"],
        )


class TaskKind(StrEnum):
    NEW = "NEW"
    RETRY = "RETRY"
    REPLAY = "REPLAY"
    DEFERRED = "DEFERRED"


@dataclass(frozen=True, slots=True)
class DeliveryTask:
    delivery_id: uuid.UUID
    event_id: uuid.UUID
    endpoint_id: uuid.UUID
    tenant: str
    kind: TaskKind
    due_at: datetime
    committed_at: datetime
    lease_version: int = 0

    def encode(self) -> bytes:
        return _encode("delivery_task", 1, {
            "delivery_id": self.delivery_id,
            "event_id": self.event_id,
            "endpoint_id": self.endpoint_id,
            "tenant": self.tenant,
            "kind": self.kind.value,
            "due_at": self.due_at,
            "committed_at": self.committed_at,
            "lease_version": self.lease_version,
        })

    @classmethod
    def decode(cls, data: bytes) -> DeliveryTask:
        r = _decode("delivery_task", data)
        return cls(
            delivery_id=_as_uuid(r["delivery_id"]),
            event_id=_as_uuid(r["event_id"]),
            endpoint_id=_as_uuid(r["endpoint_id"]),
            tenant=r["tenant"],
            kind=TaskKind(r["kind"]),
            due_at=r["due_at"],
            committed_at=r["committed_at"],
            lease_version=r["lease_version"],
        )

    @property
    def key(self) -> bytes:
        # Keyed by endpoint: one partition, so one dispatcher, owns an endpoint's bucket.
        return self.endpoint_id.bytes


def _as_uuid(value: Any) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
