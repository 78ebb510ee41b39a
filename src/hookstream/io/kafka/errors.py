"""What the Kafka boundary raises: confluent-kafka's errors as the project's own, under
one root (``KafkaFailure``). Nothing above ``hookstream.io.kafka`` sees confluent-kafka's
exception types.

- ``BrokerUnavailable``: Kafka could not be reached or did not answer in time; running
  again later may succeed. ``KafkaTransient`` (a record or a consumer call that failed
  for now) is one.
- ``KafkaPermanent``: this record, or this consumer instance, cannot go on as it is.
- ``TopicRefused``, ``GroupConfigRefused``: the cluster refused an admin request as
  asked; running it again changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from confluent_kafka import KafkaError, KafkaException, Message


class KafkaFailure(RuntimeError):
    """Anything the Kafka boundary raises on purpose (the root of the classes below)."""


class BrokerUnavailable(KafkaFailure):
    """Kafka could not be reached or did not acknowledge in time (transient)."""


class TopicRefused(KafkaFailure):
    """The cluster refused to create a topic as asked (not transient: running again
    changes nothing), e.g. a replication factor above its number of brokers."""


class GroupConfigRefused(KafkaFailure):
    """The broker refused the group's timeouts (not transient), e.g. below its
    group.consumer.min.session.timeout.ms."""


class KafkaTransient(BrokerUnavailable):
    """The broker refused a record or did not acknowledge it in time; a retry may succeed."""


class KafkaPermanent(KafkaFailure):
    """The broker will never accept this record as it is (too large, not authorised...)."""


# -- consumer calls ----------------------------------------------------------------------
# A consumer call fails with KafkaTransient (try again later, with the same consumer) or
# KafkaPermanent (this consumer instance cannot go on: close it and make a new one).
# Nothing above this boundary sees confluent-kafka's exception types.

_CONSUMER_PERMANENT = frozenset({
    KafkaError._FATAL, KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.GROUP_AUTHORIZATION_FAILED, KafkaError._INVALID_ARG,
    KafkaError._UNKNOWN_PARTITION, KafkaError._STATE,
})


def consumer_error(err: KafkaError | object, doing: str) -> KafkaTransient | KafkaPermanent:
    """confluent-kafka's error of a consumer call, as the project's own exception."""
    if not isinstance(err, KafkaError):
        return KafkaTransient(f"{doing}: {err}")
    text = f"{doing}: {err.name()}: {err.str()}"
    if err.fatal() or err.code() in _CONSUMER_PERMANENT:
        return KafkaPermanent(text)
    return KafkaTransient(text)


@contextmanager
def translated(doing: str) -> Iterator[None]:
    """``with translated("commit"): ...`` raises consumer_error() for a KafkaException."""
    try:
        yield
    except KafkaException as exc:
        raise consumer_error(exc.args[0] if exc.args else exc, doing) from exc


def without_errors(messages: Sequence[Message], doing: str = "consume"
                   ) -> tuple[list[Message], KafkaTransient | KafkaPermanent | None]:
    """The records of a consume call, and its first error event translated (None when
    there was none; end-of-partition events are not errors)."""
    good: list[Message] = []
    error: KafkaTransient | KafkaPermanent | None = None
    for msg in messages:
        err = msg.error()
        if err is None:
            good.append(msg)
        elif error is None and err.code() != KafkaError._PARTITION_EOF:
            error = consumer_error(err, doing)
    return good, error

