"""``hookstream demo``: the whole pipeline on the local stack, end to end, verified.

Brings the stack up, creates a fresh demo database and topics, registers endpoints of
two tenants at a local receiver that verifies every signature, starts the three
services as processes, writes sample outbox events and waits until every expected
(event, endpoint) pair was delivered exactly once as a row and verified at the receiver.
"""

from __future__ import annotations

import time
from collections import Counter

import psycopg

from hookstream.core.topics import Topics
from hookstream.dev import demo_store as store
from hookstream.dev import localstack
from hookstream.dev.harness import Pipeline, pipeline_env
from hookstream.dev.localstack.paths import logs_dir
from hookstream.dev.receiver import Receiver, ReceiverThread
from hookstream.endpoints import create_endpoint
from hookstream.io.kafka import delete_topics, ensure_topics
from hookstream.ops.migrate import migrate
from hookstream.outbox import write_event

DEMO_DB = "hookstream_demo"
PREFIX = "hookstream-demo"

# (tenant, receiver path, event-type filter)
ENDPOINTS = [
    ("acme", "acme-billing", ["invoice.*"]),
    ("acme", "acme-orders", ["order.shipped", "order.created"]),
    ("acme", "acme-everything", ["*"]),
    ("globex", "globex-all", ["*"]),
]
TYPES = ["invoice.paid", "invoice.created", "order.shipped", "user.disabled"]


def _expected(tenant: str, type_: str) -> list[str]:
    out = []
    for t, name, patterns in ENDPOINTS:
        if t != tenant:
            continue
        if any(p == "*" or p == type_ or (p.endswith(".*") and type_.startswith(p[:-1]))
               for p in patterns):
            out.append(name)
    return out


def _fresh_database(admin_url: str) -> str:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        store.recreate_database(conn, DEMO_DB)
    return admin_url.rsplit("/", 1)[0] + "/" + DEMO_DB


def run_demo(events: int = 20, keep_running: bool = False) -> int:
    t0 = time.monotonic()
    print("== bringing up the local stack (Kafka from Apache's jars, PostgreSQL) ...", flush=True)
    info = localstack.up()
    env = localstack.env()
    db_url = _fresh_database(env["HOOKSTREAM_DATABASE_URL"])
    migrate(db_url)
    bootstrap = env["HOOKSTREAM_KAFKA_BOOTSTRAP"]
    topics = Topics(PREFIX)
    delete_topics(bootstrap, [s.name for s in topics.specs()])
    time.sleep(1)  # topic deletion is asynchronous in the controller
    ensure_topics(bootstrap, topics.specs(partitions=3))
    print(f"   stack ready in {info['seconds']}s; database {db_url}; kafka {bootstrap}")

    receiver = Receiver()
    rthread = ReceiverThread(receiver).start()
    register_endpoints(db_url, receiver, "127.0.0.1")
    print(f"== receiver on 127.0.0.1:{receiver.port} with {len(ENDPOINTS)} endpoints "
          "(signatures verified on every request)")

    log_dir = logs_dir() / "demo"  # the stack's own folder, wherever it is
    pipeline = Pipeline(pipeline_env(database_url=db_url, bootstrap=bootstrap,
                                     topic_prefix=PREFIX, allow_private_targets="true"),
                        log_dir)
    print("== starting relay, fanout, dispatcher ...", flush=True)
    pipeline.start()
    try:
        ok = deliver_and_report(db_url, receiver, events)
        print("\nmetrics:  " + "  ".join(
            f"{k} {p.base_url}/metrics" for k, p in pipeline.processes.items()))
        print(f"logs:     {log_dir}/   stack: `hookstream stack status`, "
              f"`hookstream stack down`   (total {time.monotonic() - t0:.1f}s)")
        if keep_running:
            print("services keep running; Ctrl-C stops them")
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                pass
        return 0 if ok else 1
    finally:
        pipeline.stop()
        rthread.stop()


def register_endpoints(db_url: str, receiver: Receiver, host: str) -> None:
    """The demo's endpoints, at ``receiver`` as the dispatcher reaches it via ``host``."""
    with psycopg.connect(db_url) as conn:
        for tenant, name, patterns in ENDPOINTS:
            # Above the default 50/s so a larger `--events` run shows the pipeline's
            # speed rather than the token bucket's.
            ep = create_endpoint(conn, tenant=tenant, url=receiver.url(name, host),
                                 event_types=patterns, allow_insecure=True,
                                 rate_per_s=1000, burst=1000, max_in_flight=16)
            receiver.add(name, ep.secret)


def deliver_and_report(db_url: str, receiver: Receiver, events: int,
                       timeout_s: float = 60.0) -> bool:
    """Write ``events`` sample events as a producer would, wait until every expected
    delivery was recorded and verified at the receiver (or ``timeout_s``), print the
    summary; True when every delivery arrived once, verified."""
    expected: Counter[str] = Counter()
    written_at = time.monotonic()
    with psycopg.connect(db_url) as conn:
        for start in range(0, events, 50):
            # A producer's business transaction, with several events in it.
            with conn.transaction():
                for i in range(start, min(events, start + 50)):
                    tenant = "acme" if i % 3 else "globex"
                    type_ = TYPES[i % len(TYPES)]
                    write_event(conn, tenant=tenant, type=type_,
                                payload={"n": i, "type": type_, "amount_cents": 100 * i},
                                object_id=f"obj_{i % 5}", object_version=i)
                    for name in _expected(tenant, type_):
                        expected[name] += 1
    total = sum(expected.values())
    print(f"== wrote {events} outbox events → {total} expected deliveries; waiting ...",
          flush=True)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with psycopg.connect(db_url) as conn:
            delivered, _rows = store.delivery_progress(conn)
        if delivered >= total and len(receiver.delivered_ids()) >= total:
            break
        time.sleep(0.2)
    return _report(db_url, receiver, expected, time.monotonic() - written_at)


def _report(db_url: str, receiver: Receiver, expected: Counter[str], elapsed: float) -> bool:
    with psycopg.connect(db_url) as conn:
        rows = store.by_status(conn)
        by_status = {r[0]: r[1] for r in rows}
        pairs = sum(r[2] for r in rows)
        ids = store.delivered_ids(conn)
    print(f"\n{'endpoint':<18}{'expected':>9}{'received':>9}{'verified':>9}{'bad sig':>8}")
    per = receiver.summary()
    for name, _count in sorted(expected.items()):
        s = per.get(name, {})
        print(f"{name:<18}{expected[name]:>9}{s.get('requests', 0):>9}"
              f"{s.get('verified', 0):>9}{s.get('bad_signature', 0):>8}")
    total = sum(expected.values())
    delivered = by_status.get("delivered", 0)
    verified_ids = receiver.delivered_ids()
    ok = (delivered == total and pairs == sum(by_status.values()) == total
          and verified_ids == ids and all(a.verified for a in receiver.arrivals))
    print(f"\ndelivery rows: {dict(by_status)}  (one per (event, endpoint): "
          f"{pairs == sum(by_status.values())})")
    print(f"delivered {delivered}/{total} in {elapsed:.1f}s from the first commit "
          f"({total / max(elapsed, 1e-9):,.0f} deliveries/s); receiver verified "
          f"{len(verified_ids)} distinct webhook-ids -> {'OK' if ok else 'MISMATCH'}")
    return ok
