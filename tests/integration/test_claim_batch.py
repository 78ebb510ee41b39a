"""One claim of many tasks, in the real database: every claimed delivery gets its own
event's payload, its own endpoint's URL and live secrets (newest first, an expired one
left out) — whatever the batch's mix of events sharing endpoints and endpoints sharing
events, as a saturated dispatcher's claims of ~170 tasks are. The other claim tests
claim one task at a time."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import psycopg
from hookstream.dispatcher.store import Store

from hookstream.core.codec import DeliveryTask, TaskKind
from hookstream.core.secretbox import seal
from hookstream.dev.localstack.devkeys import development_keyring
from hookstream.endpoints import create_endpoint


def _event(conn: psycopg.Connection, payload: bytes) -> uuid.UUID:
    event = uuid.uuid4()
    conn.execute(
        "INSERT INTO events (event_id, tenant, type, schema_version, occurred_at,"
        " committed_at, payload, payload_sha256) VALUES (%s, 'acme', 'x.y', 1,"
        " now(), now(), %s, '\\x00')", (event, payload))
    return event


def _delivery(conn: psycopg.Connection, event: uuid.UUID, endpoint: uuid.UUID,
              lease_version: int = 0) -> DeliveryTask:
    row = conn.execute(
        "INSERT INTO deliveries (event_id, endpoint_id, tenant, endpoint_config_version,"
        " created_at, next_attempt_at, expires_at, committed_at, lease_version)"
        " SELECT event_id, %s, 'acme', 1, now(), now(), now() + interval '1 day',"
        " committed_at, %s FROM events WHERE event_id = %s RETURNING delivery_id, committed_at",
        (endpoint, lease_version, event)).fetchone()
    assert row is not None
    return DeliveryTask(delivery_id=row[0], event_id=event, endpoint_id=endpoint,
                        tenant="acme", kind=TaskKind.NEW, due_at=datetime.now(UTC),
                        committed_at=row[1], lease_version=lease_version)


async def _claim_mixed_batch(db_url: str, lease_version: int) -> None:
    keyring = development_keyring()
    with psycopg.connect(db_url) as conn:
        plain = create_endpoint(conn, tenant="acme", url="https://a.example/plain")
        rotated = create_endpoint(conn, tenant="acme", url="https://a.example/rotated")
        key_id, sealed = seal(keyring, "whsec_second", rotated.endpoint_id.bytes)
        conn.execute("INSERT INTO endpoint_secrets (endpoint_id, version, secret_key_id,"
                     " secret_sealed) VALUES (%s, 2, %s, %s)",
                     (rotated.endpoint_id, key_id, sealed))
        revoked = create_endpoint(conn, tenant="acme", url="https://a.example/revoked")
        conn.execute("UPDATE endpoint_secrets SET expires_at = now() - interval '1 s'"
                     " WHERE endpoint_id = %s", (revoked.endpoint_id,))
        endpoints = [plain.endpoint_id, rotated.endpoint_id, revoked.endpoint_id]
        payloads = {_event(conn, f'{{"n": {n}}}'.encode()): f'{{"n": {n}}}'.encode()
                    for n in range(3)}
        tasks = [_delivery(conn, event, endpoint, lease_version)
                 for event in payloads for endpoint in endpoints]
    expected_secrets = {plain.endpoint_id: [plain.secret],
                        rotated.endpoint_id: ["whsec_second", rotated.secret],
                        revoked.endpoint_id: []}
    urls = {plain.endpoint_id: "https://a.example/plain",
            rotated.endpoint_id: "https://a.example/rotated",
            revoked.endpoint_id: "https://a.example/revoked"}
    store = Store(db_url, lease_s=30, keyring=keyring)
    await store.open()
    try:
        claims = await store.claim(tasks)
    finally:
        await store.close()
    assert sorted(c.delivery_id for c in claims) == sorted(t.delivery_id for t in tasks)
    by_id = {t.delivery_id: t for t in tasks}
    for c in claims:
        task = by_id[c.delivery_id]
        assert (c.event_id, c.endpoint_id) == (task.event_id, task.endpoint_id)
        assert c.payload == payloads[c.event_id]
        assert c.secrets == expected_secrets[c.endpoint_id]
        assert c.url == urls[c.endpoint_id] and c.tenant == "acme"
        assert c.attempt_no == 1


async def test_a_batch_of_shared_events_and_endpoints_gives_each_its_own_payload_and_secrets(
        db_url: str) -> None:
    await _claim_mixed_batch(db_url, lease_version=0)  # claim_first


async def test_the_takeover_claim_gives_each_its_own_payload_and_secrets_too(
        db_url: str) -> None:
    # lease version 1 on rows never claimed: the full claim statement (with abandoned),
    # which matches no attempt to close; attempt_no is still 1
    await _claim_mixed_batch(db_url, lease_version=1)
