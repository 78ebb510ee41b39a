"""The local stack: Kafka (one node, or ``--brokers 3``) and a private PostgreSQL on
loopback, no Docker.

Command line::

    hookstream stack up [--only kafka|postgres] [--brokers N] [--json]
    hookstream stack down [--only kafka|postgres] [--purge]
    hookstream stack status [--json]
    hookstream stack env        # export HOOKSTREAM_... lines

(``python -m hookstream.dev.localstack`` takes the same commands, without the schema
and topics that ``hookstream stack up`` adds.) The stack remembers its ports in its own
folder (``record``): see that module for which port wins.

From Python (the integration tests restart servers mid-test with these; a restart
keeps all data: same Kafka cluster id and log dirs, same PostgreSQL data dir)::

    from hookstream.dev import localstack
    localstack.up()            # both, waits until healthy; no-op for what already runs
    localstack.kafka_stop(); localstack.kafka_start()
    localstack.pg_stop(); localstack.pg_start()
    localstack.down()
    localstack.purge()         # delete the data of what is stopped
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from typing import Any

from hookstream.dev.localstack import kafka, postgres, record
from hookstream.dev.localstack.paths import (
    StackError,
    logs_dir,
    remove_tree,
    stack_dir,
    stack_lock,
)

__all__ = [
    "COMPONENTS",
    "StackError",
    "down",
    "env",
    "kafka_start",
    "kafka_stop",
    "main",
    "pg_start",
    "pg_stop",
    "purge",
    "status",
    "up",
]

COMPONENTS = ("kafka", "postgres")


def _select(only: str | None) -> tuple[str, ...]:
    if only is None:
        return COMPONENTS
    name = {"pg": "postgres", "postgresql": "postgres"}.get(only, only)
    if name not in COMPONENTS:
        raise ValueError(f"only= must be one of {COMPONENTS} or None, not {only!r}")
    return (name,)


def env() -> dict[str, str]:
    """Connection settings for the services and tests (with the stack's development
    signing key); on a cluster also the topic replication it can hold (3 / 2 from three
    brokers), so `hookstream topics` in a shell that evaluated `stack env` creates and
    checks what the cluster is for."""
    from hookstream.dev.localstack.devkeys import development_keys

    settings = {
        "HOOKSTREAM_DATABASE_URL": postgres.database_url(),
        "HOOKSTREAM_KAFKA_BOOTSTRAP": kafka.bootstrap(),
        # the stack's generated development key (localstack.devkeys), never production's
        "HOOKSTREAM_SECRET_KEYS": development_keys(),
    }
    count = kafka.brokers()
    if count > 1:
        replication, min_isr = kafka.replication_for(count)
        settings["HOOKSTREAM_TOPIC_REPLICATION_FACTOR"] = str(replication)
        settings["HOOKSTREAM_TOPIC_MIN_INSYNC_REPLICAS"] = str(min_isr)
    return settings


def kafka_start() -> dict[str, Any]:
    """Start the local Kafka (no-op if running) and wait until it answers."""
    return kafka.start()


def kafka_stop() -> bool:
    """Stop the local Kafka (SIGTERM, SIGKILL after 30 s); True if it was running."""
    return kafka.stop()


def pg_start() -> dict[str, Any]:
    """Start the local PostgreSQL (no-op if running or external) and ensure the database."""
    return postgres.start()


def pg_stop() -> bool:
    """Stop the local PostgreSQL (pg_ctl -m fast); True if it was running."""
    return postgres.stop()


def up(only: str | None = None, brokers: int | None = None) -> dict[str, Any]:
    """Bring up Kafka (``brokers`` nodes; None: as it was, else 1) and/or PostgreSQL and
    wait until healthy. Idempotent."""
    components = _select(only)
    begun = time.monotonic()
    result: dict[str, Any] = {}
    with stack_lock():
        # Launch the JVM first: PostgreSQL starts while the broker boots.
        kafka_pid = None
        kafka_started = False
        if "kafka" in components:
            kafka_pid, kafka_started = kafka.launch(brokers)
        if "postgres" in components:
            result["postgres"] = postgres.start()
        if "kafka" in components:
            kafka.wait_ready(kafka_pid)
            info = kafka.status(check_health=False)
            info.update(healthy=True, started=kafka_started)
            result["kafka"] = info
    result["env"] = env()
    result["stack_dir"] = str(stack_dir())
    result["logs"] = str(logs_dir())
    result["seconds"] = round(time.monotonic() - begun, 2)
    return result


def down(only: str | None = None) -> dict[str, bool]:
    """Stop what ``up`` started; returns {component: was_running}."""
    components = _select(only)
    stopped: dict[str, bool] = {}
    with stack_lock():
        if "kafka" in components:
            stopped["kafka"] = kafka.stop()
        if "postgres" in components:
            stopped["postgres"] = postgres.stop()
    return stopped


def purge(only: str | None = None) -> dict[str, int]:
    """Delete the data of stopped servers (all of the stack's state without ``only``:
    data, logs and the record); returns {what: bytes freed}. Refuses a running server."""
    components = _select(only)
    freed: dict[str, int] = {}
    with stack_lock():
        if "kafka" in components:
            freed["kafka"] = kafka.purge()
        if "postgres" in components:
            freed["postgres"] = postgres.purge()
            # The development key sealed only what was in that database: it goes with it
            # (the next `up` makes a new one).
            from hookstream.dev.localstack.devkeys import FILE_NAME

            (stack_dir() / FILE_NAME).unlink(missing_ok=True)
        if only is None:
            freed["logs"] = remove_tree(logs_dir())
            record.record_path().unlink(missing_ok=True)
    return freed


def status() -> dict[str, Any]:
    """Running/healthy state of both servers, with their addresses and log files."""
    return {
        "kafka": kafka.status(),
        "postgres": postgres.status(),
        "env": env(),
        "stack_dir": str(stack_dir()),
        "logs": str(logs_dir()),
        "record": str(record.record_path()),
    }


# --------------------------------------------------------------------------- CLI


def _export_lines() -> list[str]:
    return [f"export {k}={shlex.quote(v)}" for k, v in env().items()]


def _describe(name: str, info: dict[str, Any]) -> str:
    if info.get("external"):
        return f"{name:<9} external  {info['url']}  (HOOKSTREAM_EXTERNAL_DATABASE_URL; not managed)"
    if not info.get("running"):
        return f"{name:<9} stopped"
    where = info.get("bootstrap") or info.get("url")
    health = "healthy" if info.get("healthy") else "NOT HEALTHY"
    extra = ""
    if "started" in info:
        extra = "  (started)" if info["started"] else "  (already running)"
    return f"{name:<9} running   pid {info.get('pid')}  {where}  {health}{extra}"


def _warn(info: dict[str, Any]) -> None:
    for name in COMPONENTS:
        for warning in info.get(name, {}).get("warnings", ()):
            print(f"warning: {warning}", file=sys.stderr)


def _size(n: int) -> str:
    value = float(n)
    for unit in ("bytes", "KB", "MB"):
        if value < 1024:
            return f"{n:,} bytes" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GB"


def _brokers(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {raw!r}") from None
    if not 1 <= value <= kafka.MAX_BROKERS:
        raise argparse.ArgumentTypeError(f"must be 1..{kafka.MAX_BROKERS}, got {raw}")
    return value


def add_commands(sub: Any) -> None:
    """The stack's subcommands, on a subparsers object (``hookstream stack`` and
    ``python -m hookstream.dev.localstack`` share them)."""
    p = sub.add_parser(
        "up", help="start Kafka and PostgreSQL (idempotent) and wait until they answer",
        description="Start the local Kafka and PostgreSQL on loopback (no-op for what already "
                    "runs) and wait until both answer. Ports: HOOKSTREAM_STACK_KAFKA_PORT, "
                    "HOOKSTREAM_STACK_KAFKA_CONTROLLER_PORT, HOOKSTREAM_STACK_PG_PORT when set, "
                    "else the ports this stack had last time, else 19092/19093/55432; "
                    "state in HOOKSTREAM_STACK_DIR (default <repo>/.stack).")
    p.add_argument("--only", choices=COMPONENTS, help="start only this server")
    p.add_argument("--brokers", type=_brokers, default=None,
                   help="Kafka nodes, each broker and controller, on loopback (node N on the "
                        f"ports + {kafka.NODE_PORT_STEP}*(N-1)); fixed until down --purge "
                        "(default: as the stack was, else 1)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p = sub.add_parser(
        "down", help="stop them (--purge: and delete their data and logs)",
        description="Stop what `up` started. --purge then deletes the servers' data, settings "
                    "and logs and forgets their ports (the resolved Kafka jars are kept).")
    p.add_argument("--only", choices=COMPONENTS, help="stop only this server")
    p.add_argument("--purge", action="store_true",
                   help="also delete the data (topics, databases) and logs")
    p = sub.add_parser(
        "status", help="is each server running and answering (exit 0 if so, else 3)",
        description="Each server's state, pid, address and log, from the stack's own record "
                    "of its ports. Exit 0 when everything runs and answers, 3 otherwise.")
    p.add_argument("--json", action="store_true", help="print the state as JSON")
    sub.add_parser(
        "env", help="print export lines for the connection settings",
        description='Print `export HOOKSTREAM_DATABASE_URL=... HOOKSTREAM_KAFKA_BOOTSTRAP=...` '
                    'for this stack: eval "$(hookstream stack env)".')


def run(args: argparse.Namespace) -> int:
    """Carry out a parsed stack command; raises StackError when it cannot."""
    action = args.stack_action
    if action == "env":
        _warn({"kafka": kafka.status(check_health=False),
               "postgres": postgres.status(check_health=False)})
        print("\n".join(_export_lines()))
        return 0
    if action == "up":
        result = up(args.only, args.brokers)
        if args.json:
            print(json.dumps(result, indent=2))
            return 0
        _warn(result)
        for name in COMPONENTS:
            if name in result:
                print(_describe(name, result[name]))
        print(f"logs      {result['logs']}  (server.log, kafka.out, postgres.log)")
        print(f"up in {result['seconds']:.1f} s; connection settings:")
        print("\n".join(_export_lines()))
        return 0
    if action == "down":
        stopped = down(args.only)
        for name, was_running in stopped.items():
            print(f"{name:<9} {'stopped' if was_running else 'was not running'}")
        if args.purge:
            for name, freed in purge(args.only).items():
                print(f"{name:<9} purged ({_size(freed)} freed)")
        return 0
    info = status()
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        _warn(info)
        for name in COMPONENTS:
            print(_describe(name, info[name]))
        print(f"stack     {info['stack_dir']}  (ports recorded in {info['record']})")
        print(f"logs      {info['logs']}")
    ok = all(info[n].get("healthy") is not False for n in COMPONENTS)
    return 0 if ok else 3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hookstream.dev.localstack",
        description="Local Kafka + PostgreSQL for hookstream, on loopback, without Docker.",
    )
    add_commands(parser.add_subparsers(dest="stack_action", required=True))
    args = parser.parse_args(argv)
    try:
        return run(args)
    except StackError as exc:
        print(f"localstack: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
