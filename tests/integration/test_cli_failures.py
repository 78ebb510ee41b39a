"""The error paths of the commands that talk to Kafka and PostgreSQL directly, on the real
stack, as processes (what an operator sees in a terminal): a wrong bootstrap fails in
seconds with one line and no client noise; creating topics prints no stray client line;
a service whose port is taken says so in one line; ``hookstream_emit('', ...)`` is
refused; ``reconcile`` says what it checked and warns when it checked nothing."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from hookstream.core.topics import Topics
from hookstream.io.kafka import delete_topics
from hookstream.outbox import write_event
from tests.conftest import Stack


def hookstream(*argv: str, env: dict[str, str], timeout_s: float = 60) -> \
        subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HOOKSTREAM_")}
    return subprocess.run([sys.executable, "-m", "hookstream.cli", *argv],
                          env={**clean, **env}, capture_output=True, text=True,
                          timeout=timeout_s)


def test_a_wrong_kafka_bootstrap_fails_in_seconds_in_one_line() -> None:
    started = time.monotonic()
    done = hookstream("topics", env={"HOOKSTREAM_KAFKA_BOOTSTRAP": "127.0.0.1:9"}, timeout_s=25)
    took = time.monotonic() - started
    assert done.returncode == 3 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "%" not in done.stderr, done.stderr
    assert done.stderr.startswith("hookstream: cannot use Kafka at 127.0.0.1:9: no answer "
                                  "within 5 s")
    assert "HOOKSTREAM_KAFKA_BOOTSTRAP" in done.stderr
    assert took < 15, took


def test_creating_topics_prints_no_client_line(stack: Stack) -> None:
    topics = Topics(f"t{uuid.uuid4().hex[:10]}")
    try:
        done = hookstream("topics", "--partitions", "1", env={
            "HOOKSTREAM_KAFKA_BOOTSTRAP": stack.bootstrap,
            "HOOKSTREAM_TOPIC_PREFIX": topics.prefix})
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(f"topics created: {topics.events}, ")
        assert done.stderr == ""  # no librdkafka line (%6|...|BGQUEUE|... Purging ...)
    finally:
        delete_topics(stack.bootstrap, [s.name for s in topics.specs()])


def test_a_service_whose_port_is_taken_says_so(stack: Stack, db_url: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = hookstream("relay", env={
            "HOOKSTREAM_DATABASE_URL": db_url, "HOOKSTREAM_KAFKA_BOOTSTRAP": stack.bootstrap,
            "HOOKSTREAM_TOPIC_PREFIX": f"t{uuid.uuid4().hex[:10]}",
            "HOOKSTREAM_RELAY_HTTP_PORT": str(port)})
    assert done.returncode == 2 and done.stderr == ""
    assert done.stdout == (f"hookstream relay: cannot listen on 127.0.0.1:{port} for /metrics"
                           " and /healthz (Address already in use); stop what uses it or set"
                           " HOOKSTREAM_RELAY_HTTP_PORT\n")


def test_an_event_for_no_tenant_is_refused(db_url: str) -> None:
    with psycopg.connect(db_url) as conn:
        for tenant in ("", "   "):
            with pytest.raises(psycopg.errors.CheckViolation) as refused:
                conn.execute("SELECT hookstream_emit(%s, 'invoice.paid', '{\"id\": 1}'::jsonb)",
                             (tenant,))
            assert "the tenant is empty, so the event would reach no endpoint" in str(
                refused.value)
            assert "e.g. hookstream_emit('acme'" in (refused.value.diag.message_hint or "")
            conn.rollback()
        with pytest.raises(psycopg.errors.CheckViolation, match="outbox_tenant_not_blank"):
            write_event(conn, tenant="", type="invoice.paid", payload={"id": 1})
        conn.rollback()
        (event_id,), = conn.execute(
            "SELECT hookstream_emit('acme', 'invoice.paid', '{\"id\": 1}'::jsonb, 'inv_1', 3)"
        ).fetchall()
        assert conn.execute("SELECT tenant, object_id, object_version, payload FROM outbox"
                            " WHERE event_id = %s", (event_id,)).fetchall() == [
            ("acme", "inv_1", 3, b'{"id": 1}')]


def _published(db_url: str, minutes_ago: float) -> None:
    at = datetime.now(UTC) - timedelta(minutes=minutes_ago)
    with psycopg.connect(db_url) as conn:
        conn.execute("INSERT INTO outbox (event_id, tenant, type, payload, created_at,"
                     " published_at) VALUES (gen_random_uuid(), 'acme', 'invoice.paid', '{}',"
                     " %s, %s)", (at, at))
        conn.execute("INSERT INTO events (event_id, tenant, type, schema_version, occurred_at,"
                     " committed_at, payload, payload_sha256) SELECT event_id, tenant, type, 1,"
                     " created_at, created_at, payload, sha256(payload) FROM outbox")


def test_reconcile_says_what_it_checked(db_url: str) -> None:
    env = {"HOOKSTREAM_DATABASE_URL": db_url}
    empty = hookstream("reconcile", env=env)
    assert empty.returncode == 0
    assert empty.stdout.startswith("checked: outbox rows published ")
    assert "0 published, 0 quarantined" in empty.stdout
    assert "nothing to check in this window" in empty.stdout and "no gaps" not in empty.stdout
    assert empty.stderr == ("warning: no outbox row was published or quarantined in the window:"
                            " nothing was checked (a quiet period, or the wrong window?)\n")
    recent = hookstream("reconcile", "--since", "now-3m", "--until", "now", env=env)
    assert recent.returncode == 0
    assert "the whole window is inside the grace period" in recent.stderr
    assert "give an --until at least 300 s ago" in recent.stderr

    _published(db_url, minutes_ago=90)
    found = hookstream("reconcile", env=env)
    assert found.returncode == 0 and found.stderr == ""
    assert "1 published, 0 quarantined" in found.stdout and "no gaps" in found.stdout
    cut = hookstream("reconcile", "--since", "now-2h", "--until", "now", "--json", env=env)
    assert cut.returncode == 0 and '"checked": true' in cut.stdout
    assert "cut at" in cut.stdout  # the warning is in the JSON too
    backwards = hookstream("reconcile", "--since", "now-1h", "--until", "now-2h", env=env)
    assert backwards.returncode == 2 and "must be after --since" in backwards.stderr
