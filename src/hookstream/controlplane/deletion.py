"""Deleting an endpoint: answered at once, its history removed in the background.

``DELETE /v1/endpoints/{id}`` (``endpoints.delete_endpoint``) marks the endpoint
``deleted`` (one row, one short transaction) and records a ``delete`` operation in the
same transaction, then answers 202 with it. From that commit the endpoint is gone for
everyone who matters: the fanout's endpoint matching skips it (no new delivery), the
dispatcher's claim refuses its deliveries (no new attempt, whatever its cached state
says), the sweeper and the gauges skip it, and the API answers 404 for it and its
deliveries. Its pending deliveries therefore never run again; they end by being removed
with the rest.

The operation then removes the history in batches (``DELETE_BATCH_SIZE`` deliveries and
their attempts per transaction, so no lock or WAL burst lasts long; rows someone else
holds are skipped and taken by a later batch, so it never waits in a lock queue), and
the endpoint row with its secrets last. Nothing but the remaining rows is state: a batch that
committed is gone, one that did not is done again, so an instance that dies mid-way
loses nothing; its lease runs out and any instance's operation sweeper takes the
operation over (``Operations.adopt_orphans``). A repeated DELETE answers with the same
operation (also once it finished: operations outlive the endpoint row); one that failed
is started afresh by the next DELETE.
"""

from __future__ import annotations

import enum
from typing import Any

from hookstream.controlplane import store

# Deliveries per transaction: a few thousand rows (and their attempts) hold row locks for
# milliseconds and write a few MB of WAL; small enough for replicas and vacuum to follow.
DELETE_BATCH_SIZE = 5000
# How long the job waits when only rows locked by others are left (SKIP LOCKED skipped
# them): their holders' transactions are short.
BLOCKED_WAIT_S = 0.2
_NO_CURSOR: dict[str, Any] = {"created_at": None, "delivery_id": None}


class Step(enum.Enum):
    MORE = "more"  # a batch went; go on
    BLOCKED = "blocked"  # what is left is locked by others for now: wait, then go on
    DONE = "done"  # the endpoint and its history are gone, the operation finished


async def step(conn: store.Conn, op: store.Row, owner: str, *, batch_size: int,
               lease_s: float) -> Step:
    """One batch of a delete operation, in the caller's transaction (which holds the
    operation row locked)."""
    endpoint_id = op["endpoint_id"]
    removed = await store.delete_history_batch(conn, endpoint_id, batch_size)
    if removed:
        await store.operation_progress(conn, op, owner, cursor=_NO_CURSOR, processed=removed,
                                       enqueued=0, lease_s=lease_s)
        return Step.MORE
    if await store.history_remains(conn, endpoint_id):
        await store.operation_progress(conn, op, owner, cursor=_NO_CURSOR, processed=0,
                                       enqueued=0, lease_s=lease_s)  # the lease stays ours
        return Step.BLOCKED
    await store.remove_deleted_endpoint(conn, endpoint_id)
    await store.finish_operation(conn, op["id"], owner, "succeeded")
    return Step.DONE
