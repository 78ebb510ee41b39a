"""``hookstream relay | fanout | dispatcher``: the services, and a ``--help`` that lists
every setting each one reads with its default, generated from the settings classes
(``hookstream.core.settings``) so the help never drifts from the code."""

from __future__ import annotations

import argparse
import textwrap
from typing import Any

from hookstream.core.settings import (
    ApiSettings,
    DispatcherSettings,
    FanoutSettings,
    RelaySettings,
    describe,
)

SERVICES: dict[str, tuple[str, tuple[type, ...]]] = {
    "relay": ("publish committed outbox rows to Kafka", (RelaySettings,)),
    "fanout": ("events → one delivery row and task per subscribed endpoint; serves the "
               "control-plane API", (FanoutSettings, ApiSettings)),
    "dispatcher": ("deliver tasks as signed webhooks: fair, rate-limited, retried",
                   (DispatcherSettings,)),
}


def settings_help(*classes: type, width: int = 100) -> str:
    docs = describe(*classes)
    name_width = max(len(d.env) for d in docs)
    lines = ["settings (environment variables, read once at start; default after '='):"]
    for d in docs:
        head = f"  {d.env:<{name_width}} = {d.default}"
        if not d.doc:
            lines.append(head)
            continue
        lines.append(head)
        lines += textwrap.wrap(d.doc, width, initial_indent=" " * 6,
                               subsequent_indent=" " * 6)
    return "\n".join(lines)


def run_service(args: argparse.Namespace) -> int:
    module = __import__(f"hookstream.{args.command}.main", fromlist=["main"])
    return int(module.main())


def register(sub: Any) -> None:
    for name, (summary, classes) in SERVICES.items():
        p = sub.add_parser(
            name, help=f"run the {name}: {summary}",
            description=textwrap.fill(
                f"Run the {name} service: {summary}. Logs JSON to stderr, serves /metrics "
                "and /healthz, drains on SIGTERM. A HOOKSTREAM_* variable that nothing "
                "reads is refused, with the nearest valid name.", 100),
            epilog=settings_help(*classes),
            formatter_class=argparse.RawDescriptionHelpFormatter)
        p.set_defaults(fn=run_service)
