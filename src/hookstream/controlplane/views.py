"""Rows into the JSON shapes the OpenAPI document describes. Pure."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import orjson

from hookstream.controlplane.rules import circuit_state, success_rate
from hookstream.core.counts import COUNT_CAP

Row = Mapping[str, Any]
PAYLOAD_EXCERPT_BYTES = 4096


def endpoint(row: Row) -> dict[str, Any]:
    return {
        "id": row["id"],
        "tenant": row["tenant"],
        "url": row["url"],
        "description": row["description"],
        "status": row["status"],
        "event_types": row["event_types"],
        "rate_per_s": row["rate_per_s"],
        "burst": row["burst"],
        "max_in_flight": row["max_in_flight"],
        "coalesce": row["coalesce"],
        "config_version": row["config_version"],
        "consecutive_failures": row["consecutive_failures"],
        "first_failure_at": row["first_failure_at"],
        "paused_until": row["paused_until"],
        "disabled_reason": row["disabled_reason"],
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
    }


def secret_info(row: Row) -> dict[str, Any]:
    return {"version": row["version"], "created_at": row["created_at"],
            "expires_at": row["expires_at"], "active": row.get("active", True)}


def delivery(row: Row) -> dict[str, Any]:
    return {
        "id": row["delivery_id"],
        "event_id": row["event_id"],
        "event_type": row["event_type"],
        "endpoint_id": row["endpoint_id"],
        "tenant": row["tenant"],
        "endpoint_config_version": row["endpoint_config_version"],
        "status": row["status"],
        "attempts": row["attempts"],
        "next_attempt_at": row["next_attempt_at"],
        "expires_at": row["expires_at"],
        "last_error": row["last_error"],
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
        "delivered_at": row["delivered_at"],
    }


def attempt(row: Row) -> dict[str, Any]:
    return {
        "attempt_no": row["attempt_no"],
        "started_at": row["started_at"],
        "finished_at": row["finished_at"],
        "status_code": row["status_code"],
        "latency_ms": row["latency_ms"],
        "error_class": row["error_class"],
        "outcome": row["outcome"],
        "response_excerpt": row["response_excerpt"],
        "manual": row["manual"],
    }


def event(row: Row) -> dict[str, Any]:
    payload = bytes(row["payload"])
    try:
        parsed: Any = orjson.loads(payload)
    except orjson.JSONDecodeError:
        parsed = None
    return {
        "id": row["event_id"],
        "tenant": row["tenant"],
        "type": row["type"],
        "schema_version": row["schema_version"],
        "object_id": row["object_id"],
        "object_version": row["object_version"],
        "occurred_at": row["occurred_at"],
        "committed_at": row["committed_at"],
        # The exact bytes a webhook carried, and the JSON they hold when they hold JSON.
        "payload": parsed,
        "payload_base64": base64.b64encode(payload).decode("ascii"),
    }


def operation(row: Row) -> dict[str, Any]:
    return {
        "id": row["id"],
        "kind": row["kind"],
        "status": row["status"],
        "tenant": row["tenant"],
        "endpoint_id": row["endpoint_id"],
        "params": row["params"],
        "progress": {"total": row["total"], "processed": row["processed"],
                     "enqueued": row["enqueued"]},
        "error": row["error"],
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
        "finished_at": row["finished_at"],
    }


def health(ep: Row, counts: Row, last_error: Row | None, *, now: datetime,
           window_s: float) -> dict[str, Any]:
    oldest = counts["oldest_pending_at"]
    return {
        "endpoint_id": ep["id"],
        "status": ep["status"],
        "circuit": {
            "state": circuit_state(ep["status"], ep["paused_until"],
                                   ep["consecutive_failures"], now),
            "consecutive_failures": ep["consecutive_failures"],
            "first_failure_at": ep["first_failure_at"],
            "paused_until": ep["paused_until"],
            "disabled_reason": ep["disabled_reason"],
        },
        "pending": counts["pending"],
        "oldest_pending_age_s": None if oldest is None else max(
            0.0, round((now - oldest).total_seconds(), 3)),
        "in_flight": counts["in_flight"],
        "dead": counts["dead"],
        # pending, in_flight and dead stop at this (COUNT_CAP means "at least that many")
        "counts_capped_at": COUNT_CAP,
        "recent": {
            "window_s": window_s,
            "attempts": counts["finished"],
            "delivered": counts["delivered"],
            "success_rate": success_rate(counts["delivered"], counts["finished"]),
        },
        "last_error": None if last_error is None else {
            "delivery_id": last_error["delivery_id"],
            "attempt_no": last_error["attempt_no"],
            "at": last_error["finished_at"],
            "status_code": last_error["status_code"],
            "error_class": last_error["error_class"],
            "outcome": last_error["outcome"],
            "message": last_error["message"],
        },
    }


def tenant(row: Row) -> dict[str, Any]:
    return {"id": row["id"], "name": row["name"], "created_at": row["created_at"]}


def api_key(row: Row) -> dict[str, Any]:
    return {"id": row["id"], "tenant": row["tenant"], "operator": row["tenant"] is None,
            "name": row["name"], "prefix": row["prefix"], "created_at": row["created_at"],
            "revoked_at": row["revoked_at"]}


def outbox_row(row: Row) -> dict[str, Any]:
    state = ("published" if row.get("published_at") else
             "quarantined" if row["quarantined_at"] else "pending")
    view = {
        "event_id": row["event_id"], "tenant": row["tenant"], "type": row["type"],
        "schema_version": row["schema_version"], "object_id": row["object_id"],
        "object_version": row["object_version"], "occurred_at": row["occurred_at"],
        "created_at": row["created_at"], "state": state,
        "quarantined_at": row["quarantined_at"], "reason": row["quarantine_reason"],
        "payload_bytes": row["payload_bytes"],
    }
    if "published_at" in row:
        view["published_at"] = row["published_at"]
    if "payload" in row:
        # Whatever the producer wrote, JSON or not: the first bytes, to see what is wrong.
        view["payload_excerpt_base64"] = base64.b64encode(
            bytes(row["payload"][:PAYLOAD_EXCERPT_BYTES])).decode("ascii")
    return view
