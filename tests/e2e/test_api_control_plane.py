"""The control plane end to end: the API served by the fanout process, an endpoint
registered through it, a real delivery, then a manual replay through it: the receiver
gets the same webhook-id again, and the attempt log shows a manual second attempt."""

from __future__ import annotations

import psycopg

from hookstream.dev.harness import free_port
from hookstream.dev.receiver import Receiver
from hookstream.outbox import write_event
from tests.e2e.conftest import StartPipeline, api_call, tenant_key
from tests.helpers import query, wait_until


def test_register_deliver_and_replay_through_the_api(
        db_url: str, receiver: Receiver, start_pipeline: StartPipeline) -> None:
    port = free_port()
    start_pipeline(api_port=str(port))
    token = tenant_key(db_url)
    code, ep = api_call(port, "POST", "/v1/endpoints", token,
                        {"url": receiver.url("api"), "event_types": ["invoice.*"]})
    assert code == 201, ep
    receiver.add("api", ep["secret"])
    with psycopg.connect(db_url) as conn:
        write_event(conn, tenant="acme", type="invoice.paid", payload={"n": 1},
                    object_id="inv_1", object_version=1)
    wait_until(lambda: receiver.delivered_ids("api"), 60, message="first delivery")
    (delivery_id,) = receiver.delivered_ids("api")
    # The receiver answers before the dispatcher's outcome write commits: wait for it.
    code, delivery = wait_until(
        lambda: (r := api_call(port, "GET", f"/v1/deliveries/{delivery_id}", token))[1].get(
            "status") == "delivered" and r, 30, message="delivery recorded as delivered")
    assert code == 200 and delivery["status"] == "delivered"

    code, replayed = api_call(port, "POST", f"/v1/deliveries/{delivery_id}/replay", token)
    assert code == 202 and replayed["status"] == "pending"
    wait_until(lambda: len([a for a in receiver.arrivals if a.verified]) == 2, 60,
               message="the replayed attempt")
    first, second = receiver.arrivals
    assert first.webhook_id == second.webhook_id == delivery_id and first.body == second.body
    wait_until(lambda: query(db_url, "SELECT status FROM deliveries") == [("delivered",)], 30)
    assert query(db_url, "SELECT attempt_no, manual, outcome FROM attempts ORDER BY attempt_no"
                 ) == [(1, False, "delivered"), (2, True, "delivered")]
    code, health = api_call(port, "GET", f"/v1/endpoints/{ep['id']}/health", token)
    assert code == 200 and health["recent"]["success_rate"] == 1.0
    code, events = api_call(port, "GET", f"/v1/events?endpoint_id={ep['id']}", token)
    assert [e["payload"] for e in events["data"]] == [{"n": 1}]
