"""The one place that knows confluent-kafka: its configuration keys (``config``), the
admin requests (``admin``), the produce primitive (``producer``), the consumers
(``consumer``), and its errors translated into the project's own (``errors``).

Callers import from here; the modules are split by role only.
"""

from hookstream.io.kafka.admin import (
    check_reachable,
    delete_topics,
    describe_topics,
    ensure_topics,
    group_timeouts,
    set_group_timeouts,
    warm_group_coordinator,
)
from hookstream.io.kafka.config import (
    client_log,
    consumer_config,
    membership_config,
    producer_config,
)
from hookstream.io.kafka.consumer import (
    CLOSE_WAIT_S,
    STATS_INTERVAL_MS,
    TP,
    GroupConsumer,
    Rebalanced,
    consume_available,
    stuck_error,
    watching,
)
from hookstream.io.kafka.errors import (
    BrokerUnavailable,
    GroupConfigRefused,
    KafkaFailure,
    KafkaPermanent,
    KafkaTransient,
    TopicRefused,
    consumer_error,
    translated,
    without_errors,
)
from hookstream.io.kafka.producer import (
    Failed,
    Publisher,
    Record,
    Sending,
    failure_of,
    publish_until_acked,
    publish_until_acked_sync,
)

__all__ = [
    "CLOSE_WAIT_S",
    "STATS_INTERVAL_MS",
    "TP",
    "BrokerUnavailable",
    "Failed",
    "GroupConfigRefused",
    "GroupConsumer",
    "KafkaFailure",
    "KafkaPermanent",
    "KafkaTransient",
    "Publisher",
    "Rebalanced",
    "Record",
    "Sending",
    "TopicRefused",
    "check_reachable",
    "client_log",
    "consume_available",
    "consumer_config",
    "consumer_error",
    "delete_topics",
    "describe_topics",
    "ensure_topics",
    "failure_of",
    "group_timeouts",
    "membership_config",
    "producer_config",
    "publish_until_acked",
    "publish_until_acked_sync",
    "set_group_timeouts",
    "stuck_error",
    "translated",
    "warm_group_coordinator",
    "watching",
    "without_errors",
]
