"""``hookstream <command>``: the services, the schema, the local stack and the demo."""

from __future__ import annotations

import argparse
import sys

from hookstream.core.settings import CommonSettings, SettingsError, check_environment, from_env


def _common() -> CommonSettings:
    try:
        return from_env(CommonSettings)
    except SettingsError as exc:
        raise SystemExit(f"configuration error: {exc}") from None


def cmd_migrate(_: argparse.Namespace) -> int:
    from hookstream.ops.migrate import migrate

    applied = migrate(_common().database_url)
    print("migrations applied: " + (", ".join(applied) if applied else "none (up to date)"))
    return 0


def cmd_topics(args: argparse.Namespace) -> int:
    from hookstream.core.topics import Topics
    from hookstream.io.kafka import ensure_topics

    settings = _common()
    created = ensure_topics(settings.kafka_bootstrap,
                            Topics(settings.topic_prefix).specs(args.partitions))
    print("topics created: " + (", ".join(created) if created else "none (all exist)"))
    return 0


def cmd_stack(args: argparse.Namespace) -> int:
    from hookstream.dev import localstack

    code = localstack.main([args.action, *(["--only", args.only] if args.only else [])])
    if code == 0 and args.action == "up" and args.only is None:
        # A stack that is up is a stack the services can use: schema and topics included.
        import os

        os.environ.update({k: v for k, v in localstack.env().items() if k not in os.environ})
        cmd_migrate(args)
        args.partitions = 6
        cmd_topics(args)
        from hookstream.core.topics import Topics
        from hookstream.io.kafka import warm_group_coordinator

        settings = _common()
        took = warm_group_coordinator(settings.kafka_bootstrap,
                                      Topics(settings.topic_prefix).events)
        print(f"kafka group coordinator ready ({took:.1f}s)")
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hookstream", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("relay", "fanout", "dispatcher"):
        sub.add_parser(name, help=f"run the {name} service (settings from HOOKSTREAM_* env)")
    sub.add_parser("migrate", help="apply pending SQL migrations").set_defaults(fn=cmd_migrate)
    topics = sub.add_parser("topics", help="create the Kafka topics the services use")
    topics.add_argument("--partitions", type=int, default=6)
    topics.set_defaults(fn=cmd_topics)
    stack = sub.add_parser("stack", help="the local Kafka + PostgreSQL stack (no Docker)")
    stack.add_argument("action", choices=["up", "down", "status", "env"])
    stack.add_argument("--only", choices=["kafka", "postgres"])
    stack.set_defaults(fn=cmd_stack)
    demo = sub.add_parser("demo", help="stack up, services, sample receiver, sample events")
    demo.add_argument("--events", type=int, default=20)
    demo.add_argument("--keep-running", action="store_true",
                      help="leave the services running after the summary (Ctrl-C stops)")
    from hookstream.api.cli import register as register_control_plane

    register_control_plane(sub)  # tenants | apikeys | endpoints (hookstream.api.cli)
    from hookstream.ops.reconcile import register as register_reconcile

    register_reconcile(sub)  # reconcile (hookstream.ops.reconcile)
    args = parser.parse_args(argv)
    try:
        # Every command, the local stack's included, reads the environment file the
        # services share: a misspelt name is refused here, before a command quietly
        # runs on the default instead.
        check_environment()
    except SettingsError as exc:
        print(f"hookstream: configuration error: {exc}", file=sys.stderr)
        return 2
    if args.command in ("relay", "fanout", "dispatcher"):
        module = __import__(f"hookstream.{args.command}.main", fromlist=["main"])
        return int(module.main())
    if args.command == "demo":
        from hookstream.dev.demo import run_demo

        return run_demo(events=args.events, keep_running=args.keep_running)
    return int(args.fn(args))


if __name__ == "__main__":
    sys.exit(main())
