"""``hookstream migrate`` and ``hookstream topics``: the schema and the topics the services
need. Both are idempotent and fail within seconds when their server cannot be reached."""

from __future__ import annotations

import argparse
from typing import Any

from hookstream.core.settings import CommonSettings, from_env
from hookstream.core.topics import Topics
from hookstream.io.pg import translating

# An unreachable server is reported in seconds, not after the driver's own minutes.
CONNECT_TIMEOUT_S = 5


def migrate(settings: CommonSettings) -> list[str]:
    from hookstream.ops.migrate import migrate as apply

    with translating():
        return apply(settings.database_url, connect_timeout_s=CONNECT_TIMEOUT_S)


def topics(settings: CommonSettings, partitions: int) -> list[str]:
    from hookstream.io.kafka import check_reachable, ensure_topics

    check_reachable(settings.kafka_bootstrap, CONNECT_TIMEOUT_S)
    return ensure_topics(settings.kafka_bootstrap,
                         Topics(settings.topic_prefix).specs(partitions))


def cmd_migrate(_args: argparse.Namespace) -> int:
    applied = migrate(from_env(CommonSettings))
    print("migrations applied: " + (", ".join(applied) if applied else "none (up to date)"))
    return 0


def cmd_topics(args: argparse.Namespace) -> int:
    created = topics(from_env(CommonSettings), args.partitions)
    print("topics created: " + (", ".join(created) if created else "none (all exist)"))
    return 0


def _partitions(raw: str) -> int:
    value = int(raw)
    if not 1 <= value <= 10_000:
        raise argparse.ArgumentTypeError(f"must be 1..10000, got {raw}")
    return value


def register(sub: Any) -> None:
    sub.add_parser(
        "migrate", help="apply pending SQL migrations (idempotent)",
        description="Apply the SQL migrations not yet applied to HOOKSTREAM_DATABASE_URL, "
                    "in order, each in its own transaction.").set_defaults(fn=cmd_migrate)
    p = sub.add_parser(
        "topics", help="create the Kafka topics the services use (idempotent)",
        description="Create the topics (events, deliveries, delay tiers, dead letters) under "
                    "HOOKSTREAM_TOPIC_PREFIX on HOOKSTREAM_KAFKA_BOOTSTRAP; existing ones "
                    "are left alone.")
    p.add_argument("--partitions", type=_partitions, default=6,
                   help="partitions of a new topic (default 6)")
    p.set_defaults(fn=cmd_topics)
