"""Which claim statement a batch gets: the one without the takeover's update only when
every task carries lease version 0 (dispatcher.sql, claim_first, says why that is safe;
tests/integration/test_expired_lease_claim.py runs both against the database)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from hookstream.dispatcher.store import claim_statement
from hypothesis import given
from hypothesis import strategies as st

from hookstream.core.codec import DeliveryTask, TaskKind

NOW = datetime(2026, 12, 4, tzinfo=UTC)


def _task(lease_version: int, kind: TaskKind = TaskKind.NEW) -> DeliveryTask:
    return DeliveryTask(delivery_id=uuid.uuid4(), event_id=uuid.uuid4(),
                        endpoint_id=uuid.uuid4(), tenant="t", kind=kind, due_at=NOW,
                        committed_at=NOW, lease_version=lease_version)


def test_first_attempts_take_the_claim_without_the_takeover() -> None:
    assert claim_statement([_task(0), _task(0)]) == "claim_first"


def test_one_task_past_its_first_claim_takes_the_whole_claim() -> None:
    # e.g. the reaper's task of a lost attempt, in a batch with new deliveries
    assert claim_statement([_task(0), _task(1, TaskKind.RETRY), _task(0)]) == "claim"


@given(st.lists(st.sampled_from(list(TaskKind)), min_size=1, max_size=8),
       st.lists(st.integers(min_value=0, max_value=3), min_size=1, max_size=8))
def test_the_choice_is_by_lease_version_alone(kinds: list[TaskKind],
                                              versions: list[int]) -> None:
    # A task's kind says nothing about whether its row was claimed before (a replay or
    # a swept task can be either): only the version does.
    tasks = [_task(v, k) for k, v in zip(kinds, versions, strict=False)]
    expected = "claim_first" if all(t.lease_version == 0 for t in tasks) else "claim"
    assert claim_statement(tasks) == expected
