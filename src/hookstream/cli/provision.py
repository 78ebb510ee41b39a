"""``hookstream migrate`` and ``hookstream topics``: the schema and the topics the services
need. Both are idempotent and fail within seconds when their server cannot be reached, or,
with ``--wait SECONDS``, keep trying for that long first (containers start in any order)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

from hookstream.cli.failures import REFUSED, USAGE, CommandError
from hookstream.core.settings import CommonSettings, from_env
from hookstream.core.topic_check import Mismatch, check_existing
from hookstream.core.topics import Topics, TopicSpec
from hookstream.io.kafka.errors import BrokerUnavailable
from hookstream.io.pg import DatabaseUnavailable, translating
from hookstream.policy.startup_wait import pauses

# An unreachable server is reported in seconds, not after the driver's own minutes.
CONNECT_TIMEOUT_S = 5

T = TypeVar("T")


def patiently(action: Callable[[], T], wait_s: float, server: str,
              sleep: Callable[[float], None] = time.sleep) -> T:
    """``action()``, tried again while its server is unreachable, for up to ``wait_s``
    seconds of pauses (hookstream.policy.startup_wait); each failed try is one line on
    stderr. Anything but unreachability (a refusal, a difference) fails at once."""
    waited = 0.0
    for pause in pauses(wait_s):
        try:
            return action()
        except (DatabaseUnavailable, BrokerUnavailable) as exc:
            reason = " ".join(str(exc).split())  # libpq's messages span lines
            print(f"hookstream: {server} not reachable yet ({reason}); trying again in "
                  f"{pause:g} s ({waited:g} of {wait_s:g} s waited)", file=sys.stderr,
                  flush=True)
        sleep(pause)
        waited += pause
    return action()


def migrate(settings: CommonSettings) -> list[str]:
    from hookstream.ops.migrate import migrate as apply

    with translating():
        return apply(settings.database_url, connect_timeout_s=CONNECT_TIMEOUT_S)


def topic_specs(settings: CommonSettings, partitions: int | None = None) -> list[TopicSpec]:
    """The topics the settings ask for; ``partitions`` (the command line's) overrides
    HOOKSTREAM_TOPIC_PARTITIONS."""
    return Topics(settings.topic_prefix).specs(
        settings.topic_partitions if partitions is None else partitions,
        settings.topic_replication_factor, settings.topic_min_insync_replicas)


def topics(settings: CommonSettings, partitions: int | None = None) -> list[str]:
    """Create the missing topics and check the existing ones against the settings; returns
    the names created. A difference raises TopicsDiffer (nothing is changed: shrinking
    partitions is impossible and re-replicating is a reassignment an operator plans)."""
    from hookstream.io.kafka import TopicRefused, check_reachable, describe_topics, ensure_topics

    specs = topic_specs(settings, partitions)
    check_reachable(settings.kafka_bootstrap, CONNECT_TIMEOUT_S)
    try:
        created = ensure_topics(settings.kafka_bootstrap, specs)
    except TopicRefused as exc:
        raise CommandError(f"{exc} (HOOKSTREAM_TOPIC_REPLICATION_FACTOR="
                           f"{settings.topic_replication_factor}, "
                           "HOOKSTREAM_TOPIC_MIN_INSYNC_REPLICAS="
                           f"{settings.topic_min_insync_replicas})", USAGE) from None
    existing = [s.name for s in specs if s.name not in created]
    differ = check_existing(specs, describe_topics(settings.kafka_bootstrap, existing))
    if differ:
        raise TopicsDiffer(created, differ)
    return created


def service_groups(settings: CommonSettings) -> list[str]:
    """The consumer groups of the services (the delay forwarder's is the dispatcher's +
    '-delay')."""
    return [settings.fanout_group_id, settings.dispatcher_group_id,
            f"{settings.dispatcher_group_id}-delay"]


def group_timeouts(settings: CommonSettings) -> list[str]:
    """Under the consumer protocol (KIP-848) the broker keeps each group's session timeout
    and heartbeat interval: set the settings' on the services' groups; returns the groups
    configured (none under the classic protocol, where each member sends its own)."""
    from hookstream.io.kafka import GroupConfigRefused, set_group_timeouts

    membership = settings.membership
    if not membership.broker_side:
        return []
    groups = service_groups(settings)
    try:
        set_group_timeouts(settings.kafka_bootstrap, groups, membership)
    except GroupConfigRefused as exc:
        raise CommandError(str(exc), USAGE) from None
    return groups


def print_groups(settings: CommonSettings, groups: list[str]) -> None:
    m = settings.membership
    if groups:
        print(f"group timeouts: session {m.session_timeout_ms} ms, heartbeat "
              f"{m.heartbeat_interval_ms} ms on {', '.join(groups)}")
    else:
        print("group timeouts: sent by each member (classic protocol)")


class TopicsDiffer(CommandError):
    """Existing topics are not what the settings ask for: each difference on its own line
    (stderr), then the one summary line of the error style."""

    def __init__(self, created: list[str], differ: list[Mismatch]) -> None:
        topics = sorted({m.topic for m in differ})
        super().__init__(
            f"{len(topics)} existing topic(s) differ from the settings (left unchanged; "
            "fix the topics or HOOKSTREAM_TOPIC_PARTITIONS / _REPLICATION_FACTOR / "
            "_MIN_INSYNC_REPLICAS)", REFUSED)
        self.created = created
        self.differ = differ


def _print_created(created: list[str]) -> None:
    print("topics created: " + (", ".join(created) if created else "none (all exist)"))


def cmd_migrate(args: argparse.Namespace) -> int:
    settings = from_env(CommonSettings)
    applied = patiently(lambda: migrate(settings), args.wait, "PostgreSQL")
    print("migrations applied: " + (", ".join(applied) if applied else "none (up to date)"))
    return 0


def cmd_topics(args: argparse.Namespace) -> int:
    settings = from_env(CommonSettings)
    try:
        created = patiently(lambda: topics(settings, args.partitions), args.wait, "Kafka")
    except TopicsDiffer as exc:
        _print_created(exc.created)
        for m in exc.differ:
            print(f"hookstream: {m.line()}", file=sys.stderr)
        raise
    _print_created(created)
    print_groups(settings, group_timeouts(settings))
    return 0


def _partitions(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {raw!r}") from None
    # 0 would make every topic unusable (and Kafka refuses it only after the request).
    if not 1 <= value <= 10_000:
        raise argparse.ArgumentTypeError(f"must be 1..10000, got {raw}")
    return value


def _seconds(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {raw!r}") from None
    if not 0 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"must be 0..3600 seconds, got {raw}")
    return value


WAIT_HELP = ("while the server cannot be reached, keep trying for up to this many seconds "
             "(one line per try on stderr; default 0: fail at once)")


def register(sub: Any) -> None:
    m = sub.add_parser(
        "migrate", help="apply pending SQL migrations (idempotent)",
        description="Apply the SQL migrations not yet applied to HOOKSTREAM_DATABASE_URL, "
                    "in order, each in its own transaction.")
    m.add_argument("--wait", type=_seconds, default=0.0, metavar="SECONDS", help=WAIT_HELP)
    m.set_defaults(fn=cmd_migrate)
    p = sub.add_parser(
        "topics", help="create the Kafka topics the services use (idempotent)",
        description="Create the topics (events, deliveries, delay tiers, dead letters) under "
                    "HOOKSTREAM_TOPIC_PREFIX on HOOKSTREAM_KAFKA_BOOTSTRAP with "
                    "HOOKSTREAM_TOPIC_REPLICATION_FACTOR and _MIN_INSYNC_REPLICAS. Existing "
                    "ones are left alone but checked: a partition count, replication "
                    "factor or min.insync.replicas other than the settings' is reported "
                    "and the command exits 1. Under the consumer group protocol (KIP-848) it "
                    "also sets the services' groups' session timeout and heartbeat interval "
                    "(HOOKSTREAM_KAFKA_SESSION_TIMEOUT_MS, _HEARTBEAT_INTERVAL_MS), which the "
                    "broker keeps.")
    p.add_argument("--partitions", type=_partitions, default=None,
                   help="partitions of the events, deliveries and delay-tier topics "
                        "(default HOOKSTREAM_TOPIC_PARTITIONS, 6)")
    p.add_argument("--wait", type=_seconds, default=0.0, metavar="SECONDS", help=WAIT_HELP)
    p.set_defaults(fn=cmd_topics)
