"""The ``hookstream`` command: the services, the schema, the local stack, the demo, and
the operator's commands (bootstrap through PostgreSQL, everything else through the
control-plane API).

Every command reports a failure the same way (``hookstream.cli.failures``): one line on
stderr, a non-zero exit, the traceback only with ``--debug``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback
from importlib import metadata

from hookstream.cli import failures

DESCRIPTION = """\
Committed business events to signed webhooks, through Kafka.

  hookstream stack up                start the local Kafka + PostgreSQL (+ schema, topics)
  hookstream relay|fanout|dispatcher run a service (--help lists its settings)
  hookstream tenants create acme     bootstrap (PostgreSQL): tenants, API keys
  hookstream deliveries list ...     daily work (the API: HOOKSTREAM_API_URL,
                                     HOOKSTREAM_API_KEY): endpoints, deliveries,
                                     events, operations, outbox, dead letters

Lists and shows print a table; --json prints what the API returns, for scripts.
Exit codes: 0 ok, 1 refused or not found, 2 bad usage or configuration,
3 a server (PostgreSQL, Kafka, the API) cannot be reached.
"""


def version() -> str:
    try:
        return metadata.version("hookstream")
    except metadata.PackageNotFoundError:  # run from a tree that was never installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hookstream", description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"hookstream {version()}")
    parser.add_argument("--debug", action="store_true",
                        help="on failure print the traceback; show the Kafka client's log")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    from hookstream.cli import history, provision, secrets, services, stack
    from hookstream.cli.commands import bootstrap, reconcile
    from hookstream.cli.commands import register as register_api_commands

    services.register(sub)
    provision.register(sub)
    secrets.register(sub)
    history.register(sub)
    stack.register(sub)
    demo = sub.add_parser(
        "demo", help="the pipeline end to end on the local stack, verified",
        description="Bring the stack up, start the three services and a receiver that "
                    "verifies every signature, write sample events, wait until each was "
                    "delivered once, print a summary.")
    demo.add_argument("--events", type=int, default=20, help="events to write (default 20)")
    demo.add_argument("--keep-running", action="store_true",
                      help="leave the services running after the summary (Ctrl-C stops)")
    demo.set_defaults(fn=_demo)
    bootstrap.register(sub)  # tenants | apikeys (PostgreSQL)
    register_api_commands(sub)  # endpoints | deliveries | events | operations | outbox ...
    reconcile.register(sub)
    return parser


def _demo(args: argparse.Namespace) -> int:
    from hookstream.dev.demo import run_demo

    return run_demo(events=args.events, keep_running=args.keep_running)


def _quiet_clients(debug: bool) -> None:
    """The Kafka client's own log lines (connect attempts, 'purging' notices) reach the
    terminal only with --debug; our warnings always do."""
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    client = logging.getLogger("hookstream.io.kafka.client")
    client.propagate = debug
    if not debug:
        client.addHandler(logging.NullHandler())


def _targets() -> dict[str, str]:
    """What the failing command talked to, for the one-line message (never a password)."""
    from hookstream.core.settings import ClientSettings, CommonSettings, from_env

    try:
        common, client = from_env(CommonSettings), from_env(ClientSettings)
    except Exception:  # the configuration error itself is what gets reported
        return {"database_url": "the configured database", "kafka_bootstrap": "?",
                "api_url": "?"}
    return {"database_url": common.database_url, "kafka_bootstrap": common.kafka_bootstrap,
            "api_url": client.api_url}


def _take_debug(argv: list[str]) -> tuple[list[str], bool]:
    """``--debug`` anywhere on the line (``hookstream migrate --debug`` too), not only
    before the command; after ``--`` it is an argument like any other."""
    head, sep, tail = (argv[:argv.index("--")], ["--"], argv[argv.index("--") + 1:]) \
        if "--" in argv else (argv, [], [])
    return [a for a in head if a != "--debug"] + sep + tail, "--debug" in head


def main(argv: list[str] | None = None) -> int:
    argv, debug = _take_debug(list(sys.argv[1:] if argv is None else argv))
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # usage errors (2), --help and --version (0): a return code
        return exc.code if isinstance(exc.code, int) else 2
    debug = debug or args.debug
    from hookstream.cli.services import SERVICES

    if args.command in SERVICES:
        # A service checks its own environment, logs JSON, and a crash of one keeps its
        # traceback in that log: none of the command line's error handling applies.
        return int(args.fn(args))
    _quiet_clients(debug)
    try:
        from hookstream.core.settings import check_environment

        # Every command, the local stack's included, reads the environment file the
        # services share: a misspelt name is refused here, before a command quietly
        # runs on the default instead.
        check_environment()
        return int(args.fn(args))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `hookstream ... | head`: the reader left. Nothing to report; point stdout at
        # /dev/null so the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as exc:
        return _report(exc, debug)


def _report(exc: Exception, debug: bool) -> int:
    if debug:
        traceback.print_exc()
    explained = failures.describe(exc, **_targets())
    if explained is None:
        line = (f"internal error: {type(exc).__name__}: {exc}".splitlines()[0]
                + ("" if debug else "; run with --debug for the traceback, and report it"))
        print(f"hookstream: {line}", file=sys.stderr)
        return 1
    print(f"hookstream: {explained.line}", file=sys.stderr)
    return explained.exit_code
