"""``hookstream deliveries | events | operations | outbox | dead-letters`` against the real
API server, the real database and the real Kafka: what each shows, what each changes,
and the refusals (another tenant's ids, a state that does not allow it, no key, no API)."""

from __future__ import annotations

import gc
import re
import uuid
from datetime import UTC, datetime

import pytest
from confluent_kafka import Producer

from hookstream.api.server import ApiServer
from hookstream.core.codec import DeliveryTask, EventEnvelope, TaskKind
from hookstream.core.settings import ApiSettings
from tests.helpers import query, scalar
from tests.integration.cli_support import Served, served_fixture  # noqa: F401
from tests.integration.test_api_support import api_settings, read_tasks, seed_delivery, seed_event


def endpoint(served: Served, key: str = "acme") -> str:
    made = served.json("endpoints", "create", "--url", "https://hooks.example.com/in", key=key)
    return str(made["id"])


def test_list_show_and_replay_a_delivery(served: Served) -> None:
    ep = endpoint(served)
    dead = str(seed_delivery(served.db_url, ep, "acme", "dead",
                             attempts=[(500, "failed"), (None, "dead")]))
    ok = str(seed_delivery(served.db_url, ep, "acme", "delivered", attempts=[(200, "delivered")]))
    pending = str(seed_delivery(served.db_url, ep, "acme", "pending"))
    page = served.json("deliveries", "list", "--endpoint", ep, "--status", "dead")
    assert [d["id"] for d in page["data"]] == [dead]
    assert {d["id"] for d in served.json("deliveries", "list")["data"]} == {dead, ok, pending}
    table = served.run("deliveries", "list", "--endpoint", ep, "--since", "now-1h")
    assert table.out.splitlines()[0].split()[:3] == ["ID", "STATUS", "EVENT"]
    assert all(i in table.out for i in (dead, ok, pending))

    shown = served.run("deliveries", "show", dead)
    assert f"id (webhook-id): {dead}" in shown.out and "status:          dead" in shown.out
    attempts = shown.out.split("\n\n")[1].splitlines()
    assert attempts[0].split()[:3] == ["#", "STARTED", "STATUS"] and len(attempts) == 3
    assert served.json("deliveries", "show", ok)["attempt_log"][0]["status_code"] == 200

    replayed = served.run("deliveries", "replay", dead)
    assert replayed.code == 0 and "queued for one more attempt (Kafka acknowledged" in \
        replayed.out
    assert scalar(served.db_url, "SELECT status FROM deliveries WHERE delivery_id = %s",
                  (dead,)) == "pending"
    tasks = read_tasks(served.bootstrap, served.topics.deliveries, 1)
    assert [(str(t.delivery_id), t.kind) for _, t in tasks] == [(dead, TaskKind.REPLAY)]
    assert "(409 conflict)" in served.refused("deliveries", "replay", pending)
    # globex cannot see acme's delivery, as if it did not exist
    assert "(404 not_found): delivery not found" in served.refused(
        "deliveries", "show", dead, key="globex")
    assert "(404 not_found)" in served.refused("deliveries", "replay", ok, key="globex")
    assert "give endpoint_id or tenant" in served.refused("deliveries", "list", key="operator")
    assert len(served.json("deliveries", "list", "--tenant", "acme", key="operator")["data"]) == 3


def test_bulk_replay_waits_with_a_progress_bar(served: Served) -> None:
    ep = endpoint(served)
    dead = {str(seed_delivery(served.db_url, ep, "acme", "dead")) for _ in range(5)}
    result = served.run("endpoints", "replay", ep, "--since", "now-1h", "--wait")
    assert result.code == 0, result
    final = result.err.splitlines()[-1]  # not a terminal: plain lines, the last one complete
    assert re.fullmatch(r"replay succeeded \[#{30}\] 5/5 100%", final), result.err
    op_id = re.search(r"^id: +(\S+)$", result.out, re.M).group(1)  # type: ignore[union-attr]
    op = served.json("operations", "show", op_id)
    assert (op["status"], op["progress"]) == ("succeeded", {"total": 5, "processed": 5,
                                                            "enqueued": 5})
    assert {d for (d,) in query(served.db_url, "SELECT delivery_id::text FROM deliveries"
                                               " WHERE status = 'pending'")} == dead
    assert served.json("operations", "wait", op_id)["status"] == "succeeded"
    assert "(404 not_found)" in served.refused("operations", "show", op_id, key="globex")
    started = served.json("endpoints", "replay", ep, "--since", "now-1h", "--status",
                          "delivered")
    assert started["status"] in ("running", "succeeded") and started["kind"] == "replay"
    plain = served.run("endpoints", "replay", ep, "--event-id", str(uuid.uuid4()))
    assert plain.code == 0 and "(follow it: hookstream operations wait " in plain.out


def test_recover_reenables_and_replays_the_failures(served: Served) -> None:
    ep = endpoint(served)
    failed = str(seed_delivery(served.db_url, ep, "acme", "failed"))
    served.json("endpoints", "disable", ep, "--reason", "410 Gone")
    done = served.json("endpoints", "recover", ep, "--since", "now-1h", "--wait")
    assert done["status"] == "succeeded" and done["params"]["reenabled"] is True
    assert served.json("endpoints", "show", ep)["status"] == "active"
    assert scalar(served.db_url, "SELECT status FROM deliveries WHERE delivery_id = %s",
                  (failed,)) == "pending"


def test_waiting_ends_with_the_operations_outcome(served: Served) -> None:
    ep = endpoint(served)
    (failed_op,), = query(served.db_url,
                          "INSERT INTO operations (tenant, kind, endpoint_id, params, status,"
                          " error, finished_at) VALUES ('acme', 'replay', %s, '{}', 'failed',"
                          " 'KafkaTransient: broker away', now()) RETURNING id::text", (ep,))
    result = served.run("operations", "wait", failed_op, "--quiet")
    assert result.code == 1 and "status:   failed" in result.out  # what it did, then why not
    assert result.err == (f"hookstream: operation {failed_op} failed: KafkaTransient: broker"
                          " away\n")
    # Another instance holds it (a live lease): it stays running for as long as we look.
    (stuck,), = query(served.db_url,
                      "INSERT INTO operations (tenant, kind, endpoint_id, params, total,"
                      " processed, lease_owner, lease_expires_at) VALUES ('acme', 'replay', %s,"
                      " '{}', 10, 4, 'api-elsewhere', now() + interval '1 hour')"
                      " RETURNING id::text", (ep,))
    result = served.run("operations", "wait", stuck, "--timeout-s", "0.5")
    assert result.code == 3 and result.out == ""
    assert "replay running [############..................]  4/10  40%" in result.err
    assert result.err.splitlines()[-1] == (
        f"hookstream: operation {stuck} still running after 0.5 s (4/10 processed); it goes "
        f"on in the API: `hookstream operations wait {stuck}`")


def test_events_for_reconciliation(served: Served) -> None:
    ep = endpoint(served)
    paid = str(seed_event(served.db_url, "acme", "invoice.paid", payload=b'{"n": 1}'))
    other = str(seed_event(served.db_url, "acme", "order.shipped"))
    raw = str(seed_event(served.db_url, "acme", "invoice.raw", payload=b"\x00not json"))
    seed_event(served.db_url, "globex", "invoice.paid")
    assert {e["id"] for e in served.json("events", "list")["data"]} == {paid, other, raw}
    assert [e["id"] for e in served.json("events", "list", "--type", "invoice.paid")[
        "data"]] == [paid]
    assert len(served.json("events", "list", "--endpoint", ep, "--since", "now-1h")[
        "data"]) == 3
    shown = served.run("events", "show", paid)
    assert "payload:        {'n': 1}" in shown.out or 'payload:        {"n": 1}' in shown.out
    assert "(not JSON; base64) AG5vdCBqc29u" in served.run("events", "show", raw).out
    assert "(404 not_found)" in served.refused("events", "show", paid, key="globex")
    assert "tenant: required" in served.refused("events", "list", key="operator")


def quarantined_row(db_url: str, tenant: str, reason: str) -> str:
    (event_id,), = query(db_url, "INSERT INTO outbox (event_id, tenant, type, payload,"
                                 " quarantined_at, quarantine_reason, claimed_by) VALUES"
                                 " (gen_random_uuid(), %s, 'invoice.paid', '{\"too\": \"big\"}',"
                                 " now(), %s, 7) RETURNING event_id::text", (tenant, reason))
    return str(event_id)


def test_quarantined_outbox_rows_are_listed_and_requeued(served: Served) -> None:
    row = quarantined_row(served.db_url, "acme", "payload of 14 bytes exceeds the 8-byte limit")
    theirs = quarantined_row(served.db_url, "globex", "unknown schema_version 2")
    listed = served.run("outbox", "quarantined")
    assert listed.out.splitlines()[0].split()[:3] == ["EVENT", "ID", "TENANT"]
    assert row in listed.out and "exceeds the 8-byte limit" in listed.out
    assert theirs not in listed.out
    every = served.json("outbox", "quarantined", key="operator")["data"]
    assert {r["event_id"] for r in every} == {row, theirs}
    shown = served.json("outbox", "show", row)
    assert (shown["state"], shown["payload_bytes"]) == ("quarantined", 14)
    assert "(404 not_found)" in served.refused("outbox", "requeue", theirs)
    assert "(404 not_found)" in served.refused("outbox", "show", theirs)

    result = served.run("outbox", "requeue", row)
    assert result.code == 0 and "back in line" in result.out
    assert query(served.db_url, "SELECT quarantined_at, quarantine_reason, claimed_by FROM"
                                " outbox WHERE event_id = %s", (row,)) == [(None, None, None)]
    assert served.json("outbox", "show", row)["state"] == "pending"
    assert "(409 conflict): outbox row is pending, not quarantined" in served.refused(
        "outbox", "requeue", row)
    assert served.run("outbox", "quarantined").out == "no quarantined outbox rows\n"
    # the other tenant's row was not touched
    assert scalar(served.db_url, "SELECT quarantine_reason FROM outbox WHERE event_id = %s",
                  (theirs,)) == "unknown schema_version 2"


def produce_dead_letters(served: Served) -> dict[str, str]:
    now = datetime.now(UTC)
    task = DeliveryTask(uuid.uuid4(), uuid.uuid4(), uuid.uuid4(), "acme", TaskKind.RETRY, now,
                        now, 3)
    event = EventEnvelope(uuid.uuid4(), "globex", "order.shipped", 1, None, None, None, now,
                          now, b"{}")
    p = Producer({"bootstrap.servers": served.bootstrap})
    topic = served.topics.dead
    p.produce(topic, task.encode(), task.key, headers=[("hookstream-reason", b"HTTP 500")])
    p.produce(topic, b"\x07garbage", b"k", headers=[("hookstream-reason", b"bad magic")])
    p.produce(topic, event.encode(), b"globex", headers=[
        ("hookstream-reason", b"event refused by PostgreSQL: NUL"),
        ("hookstream-source", f"{served.topics.events}/0/41".encode())])
    assert p.flush(10) == 0
    return {"delivery": str(task.delivery_id), "event": str(event.event_id)}


def test_dead_letters_are_listed_decoded(served: Served) -> None:
    ids = produce_dead_letters(served)
    listed = served.json("dead-letters", "list", key="operator")
    assert listed["next_cursor"] is None
    kinds = [(d["kind"], d["reason"]) for d in listed["data"]]
    assert kinds == [("delivery", "HTTP 500"), ("undecodable", "bad magic"),
                     ("event", "event refused by PostgreSQL: NUL")]
    delivery, garbage, event = listed["data"]
    assert delivery["delivery"]["delivery_id"] == ids["delivery"]
    assert delivery["delivery"]["tenant"] == "acme"
    assert garbage["value_base64"] == "B2dhcmJhZ2U=" and garbage["delivery"] is None
    assert event["event"]["event_id"] == ids["event"] and event["source"].endswith("/0/41")
    table = served.run("dead-letters", "list", key="operator")
    assert table.out.splitlines()[0].split()[:2] == ["TIME", "KIND"]
    assert ids["delivery"] in table.out and ids["event"] in table.out
    first = served.json("dead-letters", "list", "--limit", "2", key="operator")
    assert len(first["data"]) == 2 and first["next_cursor"]
    rest = served.json("dead-letters", "list", "--cursor", first["next_cursor"], key="operator")
    assert [d["kind"] for d in rest["data"]] == ["event"] and rest["next_cursor"] is None
    assert served.json("dead-letters", "list", "--since", "now+1h", key="operator")["data"] == []
    err = served.refused("dead-letters", "list")
    assert "(403 forbidden)" in err and "needs an operator key" in err


def test_keys_and_addresses_that_do_not_work(served: Served) -> None:
    assert "no API key: set HOOKSTREAM_API_KEY" in served.refused("whoami", key=None, code=2)
    err = served.refused("whoami", key="hsk_not-a-key")
    assert "(401 unauthorized)" in err and "check HOOKSTREAM_API_KEY" in err
    me = served.json("whoami", key="globex")
    assert me["tenant"] == "globex" and me["api_url"] == served.url
    served.monkeypatch.setattr(served, "url", "http://127.0.0.1:9")
    err = served.refused("deliveries", "list", code=3)
    assert err == ("hookstream: cannot reach the API at http://127.0.0.1:9: connection refused;"
                   " is the fanout (which serves it) running? Or point HOOKSTREAM_API_URL at it")


def test_dead_letters_when_kafka_cannot_be_reached(
        db_url: str, served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    import hookstream.controlplane.dead_letters as routes

    monkeypatch.setattr(routes, "READ_TIMEOUT_S", 1.0)  # no need to wait the full 10 s
    settings: ApiSettings = api_settings(db_url, "127.0.0.1:9", served.topics.prefix)
    server = ApiServer(settings).start()
    try:
        served.monkeypatch.setattr(served, "url", f"http://127.0.0.1:{server.port}")
        err = served.refused("dead-letters", "list", key="operator", code=3)
        assert "(503 unavailable)" in err and "retry once the database and Kafka are back" in err
    finally:
        server.stop()
        # Its producer would go on reconnecting to a broker that never existed until it is
        # collected. aiohttp keeps every app that served a request in a cache of its
        # middleware chains (web_app._cached_build_middleware, 1024 entries): empty it,
        # drop the server, collect.
        from aiohttp import web_app

        cache = getattr(web_app, "_cached_build_middleware", None)
        if cache is not None:
            cache.cache_clear()
        del server
        gc.collect()
