"""Shared fixtures and helpers of the control-plane API tests (this module has no tests).

The API runs in-process on aiohttp's test server (a real HTTP server on loopback)
against a fresh database cloned from the migrated template; replay tests also get
their own topics on the real Kafka.
"""

from __future__ import annotations

import io
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import psycopg
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from confluent_kafka import Consumer, TopicPartition
from psycopg.rows import dict_row

from hookstream.api.app import build_app
from hookstream.api.resources import API
from hookstream.controlplane import store
from hookstream.controlplane.context import ControlPlane as Api
from hookstream.core.codec import DeliveryTask
from hookstream.core.settings import ApiSettings
from hookstream.dev.localstack.devkeys import development_keyring
from tests.conftest import Stack


@dataclass
class ApiHarness:
    client: TestClient[Any, Any]
    app: web.Application
    db_url: str
    keys: dict[str, str] = field(default_factory=dict)  # "operator", "acme", "globex"

    @property
    def api(self) -> Api:
        return self.app[API]

    async def call(self, method: str, path: str, key: str | None = "acme", *,
                   body: Any = None, raw: bytes | None = None,
                   params: Any = None) -> tuple[int, Any, dict[str, str]]:
        headers = {} if key is None else {"Authorization": f"Bearer {self.keys.get(key, key)}"}
        data: Any = raw if raw is not None else (None if body is None else orjson.dumps(body))
        if isinstance(data, bytes) and len(data) > 65_536:
            data = io.BytesIO(data)  # aiohttp warns about large raw bodies
        if data is not None:
            headers["Content-Type"] = "application/json"
        async with self.client.request(method, path, data=data, headers=headers,
                                       params=params) as resp:
            text = await resp.read()
            parsed = orjson.loads(text) if text and resp.content_type == "application/json" \
                else text
            return resp.status, parsed, dict(resp.headers)

    async def ok(self, method: str, path: str, key: str | None = "acme", *,
                 body: Any = None, params: Any = None, status: int = 200) -> Any:
        code, data, _ = await self.call(method, path, key, body=body, params=params)
        assert code == status, (code, data)
        return data

    async def endpoint(self, key: str = "acme", **fields: Any) -> dict[str, Any]:
        body = {"url": "https://hooks.example.com/in", **fields}
        return await self.ok("POST", "/v1/endpoints", key, body=body, status=201)


async def make_harness(db_url: str,
                       settings: ApiSettings) -> tuple[ApiHarness, TestClient[Any, Any]]:
    app = build_app(settings)
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    harness = ApiHarness(client, app, db_url)
    async with await psycopg.AsyncConnection.connect(db_url, row_factory=dict_row) as conn:
        _, harness.keys["operator"] = await store.create_api_key(conn, None, "ops")
        for tenant in ("acme", "globex"):
            await store.create_tenant(conn, tenant, tenant.title())
            _, harness.keys[tenant] = await store.create_api_key(conn, tenant, "test")
        await conn.commit()
    return harness, client


def api_settings(db_url: str, bootstrap: str, prefix: str, **overrides: Any) -> ApiSettings:
    # the stack's development key seals secrets, as the services in the e2e tests use it
    overrides.setdefault("secret_keys", development_keyring())
    return ApiSettings(database_url=db_url, kafka_bootstrap=bootstrap, topic_prefix=prefix,
                       api_port=0, **overrides)


@pytest.fixture(name="api")
async def api_fixture(stack: Stack, db_url: str) -> AsyncIterator[ApiHarness]:
    """The API without topics of its own: for tests that never produce to Kafka."""
    settings = api_settings(db_url, stack.bootstrap, f"noapi{uuid.uuid4().hex[:8]}")
    harness, client = await make_harness(db_url, settings)
    yield harness
    await client.close()


# -- seeding the data plane's tables the way fanout and dispatcher fill them -------------
def seed_event(db_url: str, tenant: str, type_: str = "invoice.paid", *,
               payload: bytes = b'{"id": 1}', occurred_at: datetime | None = None) -> uuid.UUID:
    event_id = uuid.uuid4()
    at = occurred_at or datetime.now(UTC)
    with psycopg.connect(db_url) as conn:
        conn.execute(
            "INSERT INTO events (event_id, tenant, type, schema_version, object_id,"
            " object_version, occurred_at, committed_at, payload, payload_sha256)"
            " VALUES (%s, %s, %s, 1, 'obj', 7, %s, %s, %s, sha256(%s))",
            (event_id, tenant, type_, at, at, payload, payload))
    return event_id


def seed_delivery(db_url: str, endpoint_id: str, tenant: str, status: str = "dead", *,
                  event_id: uuid.UUID | None = None, created_at: datetime | None = None,
                  attempts: list[tuple[int | None, str]] = (),  # type: ignore[assignment]
                  lease_version: int = 3) -> uuid.UUID:
    event_id = event_id or seed_event(db_url, tenant)
    at = created_at or datetime.now(UTC)
    with psycopg.connect(db_url) as conn:
        # committed_at: the event's commit time, as the fanout copies it (the partition key)
        (delivery_id, committed_at), = conn.execute(
            "INSERT INTO deliveries (event_id, endpoint_id, tenant, endpoint_config_version,"
            " status, attempts, expires_at, lease_version, created_at, last_error,"
            " committed_at)"
            " SELECT event_id, %s, %s, 1, %s, %s, %s, %s, %s, %s, committed_at FROM events"
            " WHERE event_id = %s RETURNING delivery_id, committed_at",
            (endpoint_id, tenant, status, len(attempts), at + timedelta(days=1),
             lease_version, at, "HTTP 500" if status != "delivered" else None,
             event_id)).fetchall()
        for n, (code, outcome) in enumerate(attempts, start=1):
            conn.execute(
                "INSERT INTO attempts (delivery_id, attempt_no, started_at, finished_at,"
                " status_code, latency_ms, error_class, outcome, committed_at)"
                " VALUES (%s, %s, now(), now(), %s, 12.5, %s, %s, %s)",
                (delivery_id, n, code, None if outcome == "delivered" else "http_5xx", outcome,
                 committed_at))
    return delivery_id


def read_tasks(bootstrap: str, topic: str, expected: int,
               timeout_s: float = 20.0) -> list[tuple[bytes, DeliveryTask]]:
    """Every record on ``topic`` (all partitions, from the start) until ``expected`` are
    read, then a short grace period to catch extras."""
    import time

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        meta = consumer.list_topics(topic, timeout=10)
        consumer.assign([TopicPartition(topic, p, 0) for p in meta.topics[topic].partitions])
        out: list[tuple[bytes, DeliveryTask]] = []
        deadline = time.monotonic() + timeout_s
        grace: float | None = None
        while time.monotonic() < deadline:
            if grace is not None and time.monotonic() > grace:
                break
            msg = consumer.poll(0.2)
            if msg is None or msg.error() is not None:
                continue
            out.append((msg.key() or b"", DeliveryTask.decode(msg.value() or b"")))
            if len(out) >= expected and grace is None:
                grace = time.monotonic() + 1.0
        return out
    finally:
        consumer.close()


@pytest.fixture(name="kapi")
async def kapi_fixture(stack: Stack, db_url: str, topics: Any) -> AsyncIterator[ApiHarness]:
    """The API with topics of its own on the real Kafka: for replay tests."""
    settings = api_settings(db_url, stack.bootstrap, topics.prefix, operation_batch_size=2)
    harness, client = await make_harness(db_url, settings)
    yield harness
    await client.close()
