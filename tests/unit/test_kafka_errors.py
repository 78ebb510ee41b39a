"""confluent-kafka's consumer errors become the project's own at the boundary: transient
(try again with the same consumer) or permanent (replace the consumer)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from hookstream.io.kafka import (
    BrokerUnavailable,
    KafkaPermanent,
    KafkaTransient,
    consumer_error,
    translated,
)


@pytest.mark.parametrize(("error", "expected"), [
    (KafkaError(KafkaError._TRANSPORT), KafkaTransient),
    (KafkaError(KafkaError._WAIT_COORD), KafkaTransient),
    (KafkaError(KafkaError._TIMED_OUT), KafkaTransient),
    (KafkaError(KafkaError.UNKNOWN_MEMBER_ID), KafkaTransient),
    (KafkaError(KafkaError._MAX_POLL_EXCEEDED), KafkaTransient),
    (KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART), KafkaTransient),
    (KafkaError(KafkaError._FATAL, "fenced", fatal=True), KafkaPermanent),
    # librdkafka reports some fatal conditions by the code alone, the flag unset: the
    # code decides (_CONSUMER_PERMANENT), or the consumer would be retried forever
    (KafkaError(KafkaError._FATAL, "fatal by code only"), KafkaPermanent),
    (KafkaError(KafkaError.FENCED_INSTANCE_ID, fatal=True), KafkaPermanent),
    (KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED), KafkaPermanent),
    (KafkaError(KafkaError._STATE), KafkaPermanent),
])
def test_consumer_errors_are_transient_or_permanent(error: KafkaError,
                                                    expected: type[Exception]) -> None:
    translated_error = consumer_error(error, "commit")
    assert type(translated_error) is expected
    assert str(translated_error).startswith(f"commit: {error.name()}")


def test_a_transient_error_is_a_broker_unavailable() -> None:
    # What callers catching the older name (the API's 503) keep catching.
    assert isinstance(consumer_error(KafkaError(KafkaError._TRANSPORT), "x"), BrokerUnavailable)
    assert not isinstance(consumer_error(KafkaError(KafkaError._FATAL, fatal=True), "x"),
                          BrokerUnavailable)


def test_translated_raises_the_projects_error_chained_to_the_driver_error() -> None:
    with pytest.raises(KafkaTransient) as caught, translated("seek"):
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
    assert isinstance(caught.value.__cause__, KafkaException)
    with pytest.raises(ValueError), translated("seek"):  # anything else passes through
        raise ValueError("not Kafka's")
