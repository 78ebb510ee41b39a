"""``hookstream stack up | down | status | env``: the local stack (``hookstream.dev.localstack``)
plus, after a full ``up``, the schema, the topics and a ready group coordinator, so a
stack that is up is one the services and the tests can use at once."""

from __future__ import annotations

import argparse
from typing import Any

from hookstream.cli import provision
from hookstream.core.settings import CommonSettings, from_env


def _stack_settings() -> CommonSettings:
    """The settings the services would read, connected to this stack: the stack's own
    addresses (from its record) unless the environment names others explicitly."""
    import os

    from hookstream.dev import localstack

    env = {**localstack.env(), **{k: v for k, v in os.environ.items()
                                  if k.startswith("HOOKSTREAM_")}}
    return from_env(CommonSettings, env)


def cmd_stack(args: argparse.Namespace) -> int:
    from hookstream.dev import localstack

    code = localstack.run(args)
    if code == 0 and args.stack_action == "up" and args.only is None:
        from hookstream.io.kafka import warm_group_coordinator

        settings = _stack_settings()
        applied = provision.migrate(settings)
        created = provision.topics(settings)
        groups = provision.group_timeouts(settings)
        took = warm_group_coordinator(settings.kafka_bootstrap,
                                      provision.Topics(settings.topic_prefix).events)
        if not args.json:
            print("migrations applied: " + (", ".join(applied) if applied else "none"))
            print("topics created: " + (", ".join(created) if created else "none (all exist)"))
            provision.print_groups(settings, groups)
            print(f"kafka group coordinator ready ({took:.1f}s)")
    return code


def register(sub: Any) -> None:
    stack = sub.add_parser(
        "stack", help="the local Kafka + PostgreSQL (no Docker): up, down, status, env",
        description="Kafka from Maven jars (one node, or a KRaft cluster with up --brokers "
                    "3) and a private PostgreSQL on loopback, with their state in "
                    "HOOKSTREAM_STACK_DIR (default "
                    "<repo>/.stack). The stack records the ports it started with in that "
                    "folder (stack.json), and every stack command, the test suite and the "
                    "demo use them.")
    from hookstream.dev import localstack

    localstack.add_commands(stack.add_subparsers(dest="stack_action", required=True,
                                                 metavar="ACTION"))
    stack.set_defaults(fn=cmd_stack)
