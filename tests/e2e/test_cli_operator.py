"""An operator's day with the command line, on the whole pipeline (the three services as
processes, the API served by the fanout, a receiver on loopback), every command run as a
process the way a terminal runs it:

bootstrap a tenant key (PostgreSQL), register an endpoint (the API), see a delivery; a
producer's malformed row is quarantined, listed with its reason, fixed and re-queued,
and reaches the receiver; a delivery is replayed; the secret is rotated. Every request
the receiver got is verified again with `standardwebhooks`, a Standard Webhooks library
we did not write, with the old and the new secret during the rotation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import psycopg
from standardwebhooks.webhooks import Webhook

from hookstream.dev.harness import free_port
from hookstream.dev.receiver import Arrival, Receiver
from hookstream.outbox import write_event
from tests.e2e.conftest import StartPipeline
from tests.helpers import scalar, wait_until


def cli(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HOOKSTREAM_")}
    return subprocess.run([sys.executable, "-m", "hookstream.cli", *argv], env={**clean, **env},
                          capture_output=True, text=True, timeout=60)


def cli_json(*argv: str, env: dict[str, str]) -> Any:
    done = cli(*argv, "--json", env=env)
    assert done.returncode == 0, (argv, done.stderr)
    return json.loads(done.stdout)


def standard_verify(secret: str, arrival: Arrival) -> Any:
    return Webhook(secret).verify(arrival.body, {
        "webhook-id": arrival.webhook_id, "webhook-timestamp": str(arrival.timestamp),
        "webhook-signature": arrival.signature})


def test_an_operators_day(db_url: str, receiver: Receiver,
                          start_pipeline: StartPipeline) -> None:
    port = free_port()
    start_pipeline(api_port=str(port))
    key = cli_json("tenants", "create", "acme", env={"HOOKSTREAM_DATABASE_URL": db_url})[
        "api_key"]["token"]
    api = {"HOOKSTREAM_API_URL": f"http://127.0.0.1:{port}", "HOOKSTREAM_API_KEY": key}
    ep = cli_json("endpoints", "create", "--url", receiver.url("cli"), "--types", "invoice.*",
                  env=api)
    receiver.add("cli", ep["secret"])

    with psycopg.connect(db_url) as conn:
        write_event(conn, tenant="acme", type="invoice.paid", payload={"n": 1})
        bad = write_event(conn, tenant="acme", type="invoice.paid", payload=b"{not json")
    wait_until(lambda: receiver.delivered_ids("cli"), 60, message="the first delivery")

    # The malformed row: quarantined with its reason, fixed, re-queued, delivered.
    quarantined = wait_until(
        lambda: cli_json("outbox", "quarantined", env=api)["data"], 30,
        message="the malformed row quarantined")
    assert [(r["event_id"], r["reason"][:27]) for r in quarantined] == [
        (str(bad), "payload is not valid JSON: ")]
    table = cli("outbox", "quarantined", env=api)
    assert str(bad) in table.stdout and "payload is not valid JSON" in table.stdout
    with psycopg.connect(db_url) as conn:
        conn.execute("UPDATE outbox SET payload = %s WHERE event_id = %s", (b'{"n": 2}', bad))
    requeued = cli("outbox", "requeue", str(bad), env=api)
    assert requeued.returncode == 0 and "back in line" in requeued.stdout
    wait_until(lambda: len(receiver.delivered_ids("cli")) == 2, 60,
               message="the fixed row delivered")
    assert cli_json("outbox", "show", str(bad), env=api)["state"] == "published"

    # The deliveries as the operator sees them, and one replayed.
    wait_until(lambda: scalar(db_url, "SELECT count(*) FROM deliveries WHERE status ="
                                      " 'delivered'") == 2, 30, message="both recorded")
    listed = cli_json("deliveries", "list", "--endpoint", ep["id"], env=api)["data"]
    assert sorted(d["status"] for d in listed) == ["delivered", "delivered"]
    first = listed[-1]["id"]  # newest first: the last one is the first delivery
    shown = cli("deliveries", "show", first, env=api)
    assert shown.returncode == 0 and "status:          delivered" in shown.stdout
    replayed = cli("deliveries", "replay", first, env=api)
    assert replayed.returncode == 0 and "queued for one more attempt" in replayed.stdout
    wait_until(lambda: sum(a.webhook_id == first for a in receiver.arrivals) == 2, 60,
               message="the replayed attempt")

    # A rotation: for the overlap every request carries both signatures.
    rotated = cli_json("endpoints", "rotate-secret", ep["id"], "--overlap-s", "3600", env=api)
    receiver.add("cli", rotated["secret"])
    with psycopg.connect(db_url) as conn:
        write_event(conn, tenant="acme", type="invoice.paid", payload={"n": 3})
    last = wait_until(lambda: next((a for a in receiver.arrivals
                                    if a.signature.count("v1,") == 2), None), 60,
                      message="a request signed with both secrets")

    assert len(receiver.arrivals) == 4 and all(a.verified for a in receiver.arrivals)
    for arrival in receiver.arrivals:  # the library we did not write agrees with ours
        assert "n" in standard_verify(ep["secret"], arrival)
    assert standard_verify(rotated["secret"], last) == {"n": 3}
    refused = cli("endpoints", "show", ep["id"], env={**api, "HOOKSTREAM_API_KEY": "hsk_nope"})
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1
