#!/usr/bin/env python3
"""Screenshots of the console's main pages for the README (docs/console/*.png).

Runs the real pipeline on the local stack (a fresh database and topics of its own, a
verifying receiver), fills it with a little of everything the pages show (healthy and
failing endpoints of two tenants, a dead letter, a quarantined outbox row, a finished
bulk replay), then photographs the pages in Debian's chromium:

    .venv/bin/python scripts/console_screenshots.py       # after `hookstream stack up`
"""

from __future__ import annotations

import sys
import tempfile
import time
import urllib.request
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import psycopg
from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hookstream.controlplane import auth  # noqa: E402
from hookstream.core.topics import Topics  # noqa: E402
from hookstream.dev import localstack  # noqa: E402
from hookstream.dev.harness import Pipeline, free_port, pipeline_env  # noqa: E402
from hookstream.dev.receiver import Behaviour, Receiver, ReceiverThread  # noqa: E402
from hookstream.endpoints import create_endpoint  # noqa: E402
from hookstream.io import queries  # noqa: E402
from hookstream.io.kafka import delete_topics, ensure_topics  # noqa: E402
from hookstream.ops.migrate import migrate  # noqa: E402
from hookstream.outbox import write_event  # noqa: E402
from tests.browser import FLAGS, chromium_path  # noqa: E402

OUT = ROOT / "docs" / "console"
DB = "hookstream_console_shots"


def key(db_url: str, tenant: str | None) -> str:
    q = queries.load("api")
    token = auth.new_token()
    with psycopg.connect(db_url) as conn:
        if tenant:
            conn.execute(q["create_tenant"], {"id": tenant, "name": tenant.title() + " Inc"})
        conn.execute(q["create_api_key"], {"tenant": tenant, "name": "screens",
                                           "prefix": auth.display_prefix(token),
                                           "sha": auth.hash_token(token)})
    return token


def call(port: int, path: str, token: str, body: object) -> dict[str, object]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=orjson.dumps(body),
                                 headers={"Authorization": f"Bearer {token}",
                                          "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return orjson.loads(resp.read())  # type: ignore[no-any-return]


def wait(db_url: str, sql: str, expected: object, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with psycopg.connect(db_url) as conn:
            if conn.execute(sql).fetchone()[0] == expected:  # type: ignore[index]
                return
        time.sleep(0.2)
    raise SystemExit(f"not reached: {sql}")


def main() -> int:
    localstack.up()
    env = localstack.env()
    admin = env["HOOKSTREAM_DATABASE_URL"]
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DB}")
    db_url = admin.rsplit("/", 1)[0] + "/" + DB
    migrate(db_url)
    topics = Topics(f"shots{uuid.uuid4().hex[:6]}")
    bootstrap = env["HOOKSTREAM_KAFKA_BOOTSTRAP"]
    ensure_topics(bootstrap, topics.specs(partitions=3))
    receiver = Receiver()
    rthread = ReceiverThread(receiver).start()
    endpoints = {}
    with psycopg.connect(db_url) as conn:
        for tenant, name, types, description, behaviour in (
                ("acme", "acme-billing", ["invoice.*"], "Billing service (production)", None),
                ("acme", "acme-orders", ["order.*"], "Order sync: answers 500 today",
                 Behaviour(status=500, body=b'{"error": "database is read-only"}')),
                ("acme", "acme-audit", ["*"], "Audit log mirror", None),
                ("globex", "globex-all", ["*"], "Globex's single endpoint", None)):
            ep = create_endpoint(conn, tenant=tenant, url=receiver.url(name),
                                 event_types=types, allow_insecure=True,
                                 description=description)
            receiver.add(name, ep.secret, behaviour)
            endpoints[name] = str(ep.endpoint_id)
    port = free_port()
    log_dir = Path(tempfile.mkdtemp(prefix="console-shots-"))
    pipeline = Pipeline(pipeline_env(database_url=db_url, bootstrap=bootstrap,
                                     topic_prefix=topics.prefix, allow_private_targets="true",
                                     api_port=str(port), max_attempts="1",
                                     api_operation_batch_size="3"), log_dir).start()
    try:
        operator = key(db_url, None)
        key(db_url, "acme")
        key(db_url, "globex")
        with psycopg.connect(db_url) as conn:
            for i in range(12):
                for tenant, type_ in (("acme", "invoice.paid"), ("acme", "order.shipped"),
                                      ("globex", "invoice.paid")):
                    if tenant == "globex" and i % 3:
                        continue
                    write_event(conn, tenant=tenant, type=type_,
                                payload={"id": f"{type_.split('.')[0]}_{1000 + i}",
                                         "amount": 1250 + i, "currency": "EUR"},
                                object_id=f"obj_{i}", object_version=1)
            conn.execute("INSERT INTO outbox (event_id, tenant, type, schema_version, payload,"
                         " quarantined_at, quarantine_reason) VALUES (gen_random_uuid(),"
                         " 'acme', 'invoice.paid', 9, 'not json {', now(),"
                         " 'unknown schema version 9')")
        # acme-orders fails: its circuit opens after five, the rest wait (held)
        wait(db_url, "SELECT count(*) FROM deliveries WHERE status = 'delivered'", 40)
        since = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
        call(port, f"/v1/endpoints/{endpoints['acme-billing']}/replay", operator,
             {"since": since})
        wait(db_url, "SELECT count(*) FROM operations WHERE status = 'succeeded'", 1)
        link = call(port, "/v1/portal-sessions", operator, {"tenant": "acme"})
        with psycopg.connect(db_url) as conn:
            dead = conn.execute("SELECT delivery_id FROM deliveries WHERE status = 'dead'"
                                " ORDER BY created_at DESC LIMIT 1").fetchone()[0]  # type: ignore[index]
            op = conn.execute("SELECT id FROM operations LIMIT 1").fetchone()[0]  # type: ignore[index]
        base = f"http://127.0.0.1:{port}"
        OUT.mkdir(parents=True, exist_ok=True)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium_path(), args=FLAGS)
            portal = browser.new_context(viewport={"width": 1360, "height": 860})
            page = portal.new_page()
            page.goto(str(link["url"]))
            page.wait_for_url(base + "/console/endpoints")
            shots = [("portal-endpoints", "/console/endpoints"),
                     ("portal-endpoint", f"/console/endpoints/{endpoints['acme-orders']}"),
                     ("portal-delivery", f"/console/deliveries/{dead}"),
                     ("portal-operation", f"/console/operations/{op}"),
                     ("portal-events", "/console/events")]
            for name, path in shots:
                page.goto(base + path)
                page.screenshot(path=str(OUT / f"{name}.png"), full_page=False)
            page.goto(base + f"/console/endpoints/{endpoints['acme-audit']}/secrets")
            page.fill("#overlap", "3600")
            page.click("#rotate")
            page.screenshot(path=str(OUT / "portal-secrets.png"))
            ops = browser.new_context(viewport={"width": 1360, "height": 860}).new_page()
            ops.goto(base + "/console/login")
            ops.fill("#api_key", operator)
            ops.click("button[type=submit]")
            ops.wait_for_url(base + "/console/ops")
            ops.screenshot(path=str(OUT / "operator-overview.png"), full_page=True)
            browser.close()
    finally:
        pipeline.stop()
        rthread.stop()
        delete_topics(bootstrap, [s.name for s in topics.specs()])
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {DB} WITH (FORCE)")
    print("\n".join(str(p.relative_to(ROOT)) for p in sorted(OUT.glob("*.png"))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
