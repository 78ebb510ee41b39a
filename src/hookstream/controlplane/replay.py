"""Bulk operations on one endpoint's deliveries: a replay (by time range, or by event
ids) and a recovery (re-enable, then replay what failed since the failure streak
began). Each is recorded and started here and runs in the background
(``hookstream.controlplane.operations``); reading one shows its progress."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from hookstream.controlplane import rules, store
from hookstream.controlplane import validation as v
from hookstream.controlplane.context import ControlPlane
from hookstream.controlplane.store import Row
from hookstream.controlplane.tasks import now_utc

RECOVER_LOOKBACK = timedelta(days=1)


async def start_endpoint_operation(cp: ControlPlane, scope: str | None,
                                   endpoint_id: uuid.UUID, kind: str, body: dict[str, Any], *,
                                   by_events: bool) -> Row:
    """A replay or a recovery, recorded and started: the endpoint locked, the range
    validated, a disabled endpoint re-enabled by a recovery, the operation row written;
    its work runs after. ``by_events``: a replay may name event ids (the JSON API)."""
    now = now_utc()
    async with cp.conn() as conn:
        ep = await store.get_endpoint(conn, endpoint_id, scope, lock=True)
        extra: dict[str, Any] = {}
        if kind == "replay":
            if (refusal := rules.replay_refusal("dead", ep["status"])) is not None:
                raise refusal
            replay = v.replay_range(body, now=now, oldest=cp.oldest(),
                                    default_statuses=v.REPLAYABLE, allowed=v.REPLAYABLE,
                                    by_events=by_events)
        else:
            replay = v.replay_range(
                body, now=now, oldest=cp.oldest(), default_statuses=v.RECOVERABLE,
                allowed=v.REPLAYABLE, since_required=False,
                default_since=ep["first_failure_at"] or now - RECOVER_LOOKBACK)
            extra["reenabled"] = ep["status"] != "active"
            if extra["reenabled"]:
                await store.set_endpoint_status(conn, endpoint_id, "active")
        op = await store.create_operation(
            conn, tenant=ep["tenant"], kind=kind, endpoint_id=endpoint_id, replay=replay,
            extra=extra, owner=cp.operations.owner, lease_s=cp.settings.operation_lease_s)
    cp.operations.start(op["id"])
    return op


async def get_operation(cp: ControlPlane, operation_id: uuid.UUID, scope: str | None) -> Row:
    async with cp.conn() as conn:
        return await store.get_operation(conn, operation_id, scope)
