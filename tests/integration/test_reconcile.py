"""``hookstream reconcile`` on the real database: a consistent history has no gap, and each
way of breaking it is found exactly, as its own kind, naming the broken row."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from hookstream.endpoints import type_matches
from hookstream.ops.reconcile import attempt_counts, receiver_gaps, reconcile

Conn = psycopg.Connection[Any]

# (tenant, event_types, status) — the disabled one gets no rows and must not be missed.
ENDPOINTS = {
    "acme-all": ("acme", ["*"], "active"),
    "acme-invoices": ("acme", ["invoice.*"], "active"),
    "acme-paid": ("acme", ["invoice.paid"], "active"),
    "acme-paused": ("acme", ["order.*"], "paused"),
    "acme-off": ("acme", ["*"], "disabled"),
    "globex-all": ("globex", ["*"], "active"),
}
TYPES = ["invoice.paid", "invoice.created", "order.shipped", "invoiced.x"]


@dataclass
class History:
    endpoints: dict[str, uuid.UUID]
    events: list[uuid.UUID]
    deliveries: dict[tuple[uuid.UUID, str], uuid.UUID]  # (event, endpoint name) → delivery


def build_history(conn: Conn, events: int = 24) -> History:
    """What the pipeline leaves behind half an hour after a burst: every outbox row
    published and stored, one delivery per subscribed endpoint, each in a final or an
    explained state, attempt rows matching."""
    t0 = datetime.now(UTC) - timedelta(minutes=40)
    eps: dict[str, uuid.UUID] = {}
    for name, (tenant, types, status) in ENDPOINTS.items():
        (eps[name],) = conn.execute(
            "INSERT INTO endpoints (tenant, url, event_types, status, created_at)"
            " VALUES (%s, %s, %s, %s, %s) RETURNING id",
            (tenant, f"https://{name}.example/hook", types, status, t0)).fetchone()  # type: ignore[misc]
    h = History(eps, [], {})
    for i in range(events):
        ev = uuid.uuid4()
        tenant = "acme" if i % 3 else "globex"
        etype = TYPES[i % len(TYPES)]
        committed = t0 + timedelta(seconds=i)
        conn.execute(
            "INSERT INTO outbox (event_id, tenant, type, payload, created_at, published_at)"
            " VALUES (%s, %s, %s, '{}', %s, %s)",
            (ev, tenant, etype, committed, committed + timedelta(seconds=1)))
        conn.execute(
            "INSERT INTO events (event_id, tenant, type, schema_version, occurred_at,"
            " committed_at, payload, payload_sha256, stored_at)"
            " VALUES (%s, %s, %s, 1, %s, %s, '{}', sha256('{}'), %s)",
            (ev, tenant, etype, committed, committed, committed + timedelta(seconds=2)))
        h.events.append(ev)
        for name, (ep_tenant, types, status) in ENDPOINTS.items():
            if ep_tenant != tenant or status == "disabled" \
                    or not any(type_matches(p, etype) for p in types):
                continue
            h.deliveries[(ev, name)] = _delivery(conn, ev, eps[name], tenant, committed, i,
                                                 paused=status == "paused")
    # Nothing was touched recently: an endpoint with an overdue pending row is idle.
    conn.execute("UPDATE deliveries SET updated_at = now() - interval '30 minutes'")
    return h


def _delivery(conn: Conn, event: uuid.UUID, endpoint: uuid.UUID, tenant: str,
              committed: datetime, i: int, *, paused: bool) -> uuid.UUID:
    # A spread of explained end states; the row's attempts match its attempt rows.
    if paused:
        status, outcomes, next_at = "pending", [], committed  # waits for the pause to end
    else:
        status, outcomes, next_at = [
            ("delivered", ["delivered"], committed),
            ("delivered", ["retry", "retry", "delivered"], committed),
            ("dead", ["retry", "dead"], committed),
            ("failed", ["failed"], committed),
            ("pending", ["retry"], datetime.now(UTC) + timedelta(minutes=20)),
            ("superseded", [], committed),
        ][i % 6]
    (d,) = conn.execute(
        "INSERT INTO deliveries (event_id, endpoint_id, tenant, endpoint_config_version,"
        " status, attempts, next_attempt_at, expires_at, created_at, delivered_at,"
        " committed_at) VALUES (%s, %s, %s, 1, %s, %s, %s, %s, %s, %s, %s)"
        " RETURNING delivery_id",
        (event, endpoint, tenant, status, len(outcomes), next_at,
         committed + timedelta(days=1), committed,
         committed if status == "delivered" else None,
         committed)).fetchone()  # type: ignore[misc]
    for n, outcome in enumerate(outcomes, 1):
        conn.execute(
            "INSERT INTO attempts (delivery_id, attempt_no, started_at, finished_at,"
            " status_code, outcome, committed_at) VALUES (%s, %s, %s, %s, %s, %s, %s)",
            (d, n, committed + timedelta(seconds=n), committed + timedelta(seconds=n),
             200 if outcome == "delivered" else 500, outcome, committed))
    return d


def run(db_url: str) -> dict[str, tuple[int, list[str]]]:
    with psycopg.connect(db_url) as conn:
        report = reconcile(conn, since=datetime.now(UTC) - timedelta(hours=2),
                           until=datetime.now(UTC), grace_s=60, stall_s=300)
    return {g.kind: (g.total, g.sample) for g in report.gaps}


@pytest.fixture
def history(db_url: str) -> History:
    with psycopg.connect(db_url) as conn:
        return build_history(conn)


def test_a_consistent_history_has_no_gap(db_url: str, history: History) -> None:
    with psycopg.connect(db_url) as conn:
        report = reconcile(conn, since=datetime.now(UTC) - timedelta(hours=2),
                           until=datetime.now(UTC), grace_s=60, stall_s=300)
    assert report.ok, report.gaps
    assert report.counts["published"] == 24
    assert report.counts["deliveries"] == len(history.deliveries)
    assert sum(report.states.values()) == len(history.deliveries)
    # every explained state of the history is recognised as such
    assert {"delivered", "dead", "failed", "superseded", "pending: retry scheduled",
            "pending: endpoint paused"} <= set(report.states)
    # the disabled endpoint and the 'invoiced.x' type (not under 'invoice.*') got no row
    assert not any(name == "acme-off" for _, name in history.deliveries)
    assert not any(name == "acme-invoices" for ev, name in history.deliveries
                   if ev in history.events[3::4])


def _missing_delivery(conn: Conn, h: History) -> str:
    # a prefix-wildcard subscription whose row the fanout "forgot"
    ev = next(e for e, name in h.deliveries if name == "acme-invoices")
    d = h.deliveries[(ev, "acme-invoices")]
    # with its attempts, as ON DELETE CASCADE did before the history was partitioned (0014)
    conn.execute("DELETE FROM attempts WHERE delivery_id = %s", (d,))
    conn.execute("DELETE FROM deliveries WHERE delivery_id = %s", (d,))
    return f"{ev}/{h.endpoints['acme-invoices']}"


def _unpublished(conn: Conn, h: History) -> str:
    ev = uuid.uuid4()
    conn.execute("INSERT INTO outbox (event_id, tenant, type, payload, created_at)"
                 " VALUES (%s, 'acme', 'invoice.paid', '{}', now() - interval '1 hour')", (ev,))
    # a young unpublished row and a quarantined one are not gaps
    conn.execute("INSERT INTO outbox (event_id, tenant, type, payload)"
                 " VALUES (gen_random_uuid(), 'acme', 'invoice.paid', '{}')")
    conn.execute("INSERT INTO outbox (event_id, tenant, type, payload, created_at,"
                 " quarantined_at, quarantine_reason) VALUES (gen_random_uuid(), 'acme',"
                 " 'bad', 'x', now() - interval '1 hour', now() - interval '1 hour', 'JSON')")
    return str(ev)


def _stuck_in_flight(conn: Conn, h: History) -> str:
    d = next(d for (_, name), d in h.deliveries.items() if name == "acme-all")
    # claimed by a worker that died; the reaper never released it
    conn.execute("UPDATE deliveries SET status = 'in_flight', attempts = attempts + 1,"
                 " lease_expires_at = now() - interval '1 hour' WHERE delivery_id = %s", (d,))
    conn.execute("INSERT INTO attempts (delivery_id, attempt_no, started_at, outcome,"
                 " committed_at)"
                 " SELECT delivery_id, attempts, now() - interval '61 minutes', 'in_flight',"
                 " committed_at FROM deliveries WHERE delivery_id = %s", (d,))
    return str(d)


def _published_not_stored(conn: Conn, h: History) -> str:
    ev = uuid.uuid4()
    conn.execute("INSERT INTO outbox (event_id, tenant, type, payload, created_at, published_at)"
                 " VALUES (%s, 'acme', 'invoice.paid', '{}', now() - interval '20 minutes',"
                 " now() - interval '20 minutes')", (ev,))
    return str(ev)


def _pending_stalled(conn: Conn, h: History) -> str:
    d = next(d for (_, name), d in h.deliveries.items() if name == "globex-all")
    conn.execute("UPDATE deliveries SET status = 'pending', next_attempt_at = now()"
                 " - interval '30 minutes' WHERE delivery_id = %s", (d,))
    return str(d)


def _attempt_row_lost(conn: Conn, h: History) -> str:
    # a delivered row whose only attempt row vanished
    (d,) = conn.execute("SELECT delivery_id FROM deliveries WHERE status = 'delivered'"
                        " AND attempts = 1 ORDER BY created_at LIMIT 1").fetchone()  # type: ignore[misc]
    conn.execute("DELETE FROM attempts WHERE delivery_id = %s", (d,))
    return str(d)


@pytest.mark.parametrize(("breakage", "expected"), [
    (_missing_delivery, {"missing_delivery"}),
    (_unpublished, {"unpublished_outbox"}),
    (_stuck_in_flight, {"in_flight_lease_expired"}),
    (_published_not_stored, {"published_not_stored"}),
    (_pending_stalled, {"pending_stalled"}),
    (_attempt_row_lost, {"attempt_rows_mismatch", "delivered_without_success"}),
])
def test_each_broken_history_shows_exactly_its_gap(
        db_url: str, history: History, breakage: Callable[[Conn, History], str],
        expected: set[str]) -> None:
    with psycopg.connect(db_url) as conn:
        key = breakage(conn, history)
    gaps = run(db_url)
    assert set(gaps) == expected
    for kind in expected:
        total, sample = gaps[kind]
        assert total == 1 and len(sample) == 1, kind
        # Delivery-state gaps name the endpoint too: "<delivery> (endpoint <id>)".
        assert sample[0] == key or sample[0].startswith(f"{key} (endpoint "), kind


def test_an_overdue_delivery_is_a_gap_even_while_its_endpoint_is_busy(
        db_url: str, history: History) -> None:
    # An endpoint with work in flight used to explain any overdue row as "backlog
    # draining", and only 15 minutes counted as stalled: after a bad day thousands of
    # deliveries overdue 5-15 minutes read as "no gaps". Deferred work carries its due
    # time now, so five minutes overdue is a gap, endpoint named.
    d = next(d for (_, name), d in history.deliveries.items() if name == "globex-all")
    with psycopg.connect(db_url) as conn:
        endpoint = conn.execute("SELECT endpoint_id FROM deliveries WHERE delivery_id = %s",
                                (d,)).fetchone()[0]  # type: ignore[index]
        conn.execute("UPDATE deliveries SET status = 'pending', next_attempt_at = now()"
                     " - interval '5 minutes' WHERE delivery_id = %s", (d,))
        conn.execute("UPDATE deliveries SET status = 'in_flight', lease_expires_at = now()"
                     " + interval '1 minute' WHERE endpoint_id = %s AND delivery_id <> %s",
                     (endpoint, d))
    gaps = run(db_url)
    assert gaps["pending_stalled"] == (1, [f"{d} (endpoint {endpoint})"])


def _park(conn: Conn, d: str) -> str:
    (endpoint,) = conn.execute(
        "UPDATE deliveries SET status = 'pending', parked = true, next_attempt_at = now()"
        " + interval '10 minutes' WHERE delivery_id = %s RETURNING endpoint_id",
        (d,)).fetchone()  # type: ignore[misc]
    return str(endpoint)


def test_work_parked_for_an_endpoint_that_takes_none_is_a_gap(
        db_url: str, history: History) -> None:
    # Issue #47: a restarted dispatcher parked healthy endpoints' backlogs minutes ahead
    # and they got no request for 110 s; reconcile said "no gaps" because the parked rows
    # were not yet due. Work held for later while its endpoint takes nothing (nothing in
    # flight, no attempt within --stall-s) is a gap, endpoint named.
    d = next(d for (_, name), d in history.deliveries.items() if name == "globex-all")
    with psycopg.connect(db_url) as conn:
        endpoint = _park(conn, d)
    assert run(db_url) == {"held_while_idle": (1, [f"{d} (endpoint {endpoint})"])}


def test_work_parked_for_an_endpoint_that_is_serving_is_not_a_gap(
        db_url: str, history: History) -> None:
    # A slow customer's backlog parked at its drain pace while it works through it.
    mine = [d for (_, name), d in history.deliveries.items() if name == "globex-all"]
    with psycopg.connect(db_url) as conn:
        _park(conn, mine[0])
        conn.execute("UPDATE deliveries SET status = 'in_flight', lease_expires_at = now()"
                     " + interval '1 minute' WHERE delivery_id = %s", (mine[1],))
    assert run(db_url) == {}
    with psycopg.connect(db_url) as conn:  # its attempt ended a moment ago
        conn.execute("UPDATE deliveries SET status = 'pending', lease_expires_at = NULL,"
                     " next_attempt_at = now() + interval '1 minute' WHERE delivery_id = %s",
                     (mine[1],))
        conn.execute("UPDATE attempts SET started_at = now() - interval '10 seconds'"
                     " WHERE delivery_id = %s", (mine[1],))
    assert run(db_url) == {}


def test_the_command_exits_non_zero_on_a_gap(db_url: str, history: History) -> None:
    cmd = [sys.executable, "-m", "hookstream.cli", "reconcile", "--since", "now-2h",
           "--until", "now", "--grace-s", "60", "--json"]
    env = {"HOOKSTREAM_DATABASE_URL": db_url, "PATH": "/usr/bin:/bin"}
    ok = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stderr
    with psycopg.connect(db_url) as conn:
        key = _unpublished(conn, history)
    broken = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert broken.returncode == 1, broken.stderr
    assert key in broken.stdout


def test_a_receiver_duplicate_without_a_second_attempt_row_is_found(
        db_url: str, history: History) -> None:
    # The database cannot know what a receiver saw: the harness counts webhook-ids at
    # its receivers and compares them with the attempt rows.
    with psycopg.connect(db_url) as conn:
        rows = dict(conn.execute("SELECT delivery_id::text, attempts FROM deliveries"
                                 " WHERE attempts > 0").fetchall())
        counts = attempt_counts(conn, rows)
    assert counts == rows
    received = Counter({k: n for k, n in rows.items()})  # one request per attempt row
    assert receiver_gaps(received, counts) == []
    once = next(k for k, n in rows.items() if n == 1)
    received[once] += 1  # delivered twice, one attempt row
    gaps = receiver_gaps(received, counts)
    assert [(g.kind, g.total, g.sample) for g in gaps] == [
        ("receiver_duplicate_unexplained", 1, [once])]
