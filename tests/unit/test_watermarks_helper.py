"""The tests' watermark helper: a broker that has not yet elected a fresh topic's
leader answers NOT_LEADER_FOR_PARTITION for a moment (it failed a CI run from inside
``wait_until``); the helper asks again, and gives up only at its deadline."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from tests.helpers import watermarks


class NotLeaderYet:
    """Stands in for a consumer (this tests the helper's retry, not the broker): refuses
    ``refusals`` times, then answers."""

    def __init__(self, refusals: int):
        self.refusals, self.calls = refusals, 0

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
        self.calls += 1
        if self.calls <= self.refusals:
            raise KafkaException(KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION))
        return 0, 7


def test_a_broker_not_yet_leading_the_partition_is_asked_again() -> None:
    consumer = NotLeaderYet(refusals=2)
    assert watermarks(consumer, TopicPartition("t", 0), timeout_s=5) == (0, 7)  # type: ignore[arg-type]
    assert consumer.calls == 3


def test_a_broker_that_never_answers_fails_at_the_deadline_with_its_error() -> None:
    with pytest.raises(KafkaException, match="NOT_LEADER"):
        watermarks(NotLeaderYet(refusals=10**6), TopicPartition("t", 0), timeout_s=0.5)  # type: ignore[arg-type]
