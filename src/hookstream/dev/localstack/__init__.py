"""The local stack: a single-node Kafka and a private PostgreSQL on loopback, no Docker.

Command line::

    python -m hookstream.dev.localstack up [--only kafka|postgres]
    python -m hookstream.dev.localstack down [--only kafka|postgres]
    python -m hookstream.dev.localstack status [--json]
    python -m hookstream.dev.localstack env        # export HOOKSTREAM_... lines

From Python (the integration tests restart servers mid-test with these; a restart
keeps all data: same Kafka cluster id and log dirs, same PostgreSQL data dir)::

    from hookstream.dev import localstack
    localstack.up()            # both, waits until healthy; no-op for what already runs
    localstack.kafka_stop(); localstack.kafka_start()
    localstack.pg_stop(); localstack.pg_start()
    localstack.down()
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from hookstream.dev.localstack import kafka, postgres
from hookstream.dev.localstack.paths import StackError, logs_dir, stack_dir, stack_lock

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
    """Connection settings for the services and tests."""
    return {
        "HOOKSTREAM_DATABASE_URL": postgres.database_url(),
        "HOOKSTREAM_KAFKA_BOOTSTRAP": kafka.bootstrap(),
    }


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


def up(only: str | None = None) -> dict[str, Any]:
    """Bring up Kafka and/or PostgreSQL and wait until healthy. Idempotent."""
    components = _select(only)
    begun = time.monotonic()
    result: dict[str, Any] = {}
    with stack_lock():
        # Launch the JVM first: PostgreSQL starts while the broker boots.
        kafka_pid = None
        kafka_started = False
        if "kafka" in components:
            kafka_pid, kafka_started = kafka.launch()
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


def status() -> dict[str, Any]:
    """Running/healthy state of both servers, with their addresses and log files."""
    return {
        "kafka": kafka.status(),
        "postgres": postgres.status(),
        "env": env(),
        "stack_dir": str(stack_dir()),
        "logs": str(logs_dir()),
    }


# --------------------------------------------------------------------------- CLI


def _export_lines() -> list[str]:
    import shlex

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hookstream.dev.localstack",
        description="Local Kafka + PostgreSQL for hookstream, on loopback, without Docker.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p_up = sub.add_parser("up", help="start (idempotent) and wait until healthy")
    p_up.add_argument("--only", choices=COMPONENTS)
    p_up.add_argument("--json", action="store_true", help="print the result as JSON")
    p_down = sub.add_parser("down", help="stop what up started")
    p_down.add_argument("--only", choices=COMPONENTS)
    p_status = sub.add_parser("status", help="exit 0 if all are running and healthy, else 3")
    p_status.add_argument("--json", action="store_true")
    sub.add_parser("env", help="print export lines for the connection settings")
    args = parser.parse_args(argv)

    try:
        if args.command == "env":
            print("\n".join(_export_lines()))
            return 0
        if args.command == "up":
            result = up(args.only)
            if args.json:
                print(json.dumps(result, indent=2))
                return 0
            for name in COMPONENTS:
                if name in result:
                    print(_describe(name, result[name]))
            print(f"logs      {result['logs']}  (server.log, kafka.out, postgres.log)")
            print(f"up in {result['seconds']:.1f} s; connection settings:")
            print("\n".join(_export_lines()))
            return 0
        if args.command == "down":
            stopped = down(args.only)
            for name, was_running in stopped.items():
                print(f"{name:<9} {'stopped' if was_running else 'was not running'}")
            return 0
        # status
        info = status()
        if args.json:
            print(json.dumps(info, indent=2))
        else:
            for name in COMPONENTS:
                print(_describe(name, info[name]))
            print(f"stack     {info['stack_dir']}")
            print(f"logs      {info['logs']}")
        ok = all(info[n].get("healthy") is not False for n in COMPONENTS)
        return 0 if ok else 3
    except StackError as exc:
        print(f"localstack: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
