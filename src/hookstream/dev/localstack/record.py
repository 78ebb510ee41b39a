"""What a local stack remembers about itself: ``stack.json`` in its own folder.

Each server writes its ports, addresses and paths there when it starts, so every stack
command (and the test suite and the demo, through ``localstack.env()``) finds the stack
that runs in this folder, whatever the shell's environment says now. The rules:

- a **running** server's ports are the ones it was started with (read from what the
  server itself was given: Kafka's rendered ``server.properties``, PostgreSQL's
  ``postmaster.pid``), never the environment's;
- a **stopped** server starts again on the ports it had, unless a port variable
  (HOOKSTREAM_STACK_KAFKA_PORT and the others) names other ports: the environment
  chooses, the record remembers;
- ``down --purge`` forgets a server together with its data.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from hookstream.dev.localstack.paths import StackError, ensure_dir, stack_dir

RECORD_NAME = "stack.json"
VERSION = 1


def record_path() -> Path:
    return stack_dir() / RECORD_NAME


def read() -> dict[str, Any]:
    """The record, or {} when the stack never started (or the file is unreadable)."""
    try:
        data = json.loads(record_path().read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write(data: dict[str, Any]) -> None:
    path = record_path()
    ensure_dir(path.parent)
    tmp = path.with_name(f".{RECORD_NAME}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)  # atomic: a reader never sees half a file


def remember(component: str, values: dict[str, Any]) -> None:
    """Record what ``component`` was started with (call under ``stack_lock``)."""
    data = read()
    data.update(version=VERSION, stack_dir=str(stack_dir()), logs=str(stack_dir() / "logs"),
                updated_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    data[component] = values
    _write(data)


def forget(component: str) -> None:
    data = read()
    if component in data:
        del data[component]
        _write(data)


def recorded_port(component: str, key: str = "port") -> int | None:
    value = read().get(component, {}).get(key)
    return value if isinstance(value, int) and 1 <= value <= 65535 else None


def wanted_port(env_name: str, component: str, key: str, default: int) -> int:
    """The port a stopped server starts on: the environment's, else the recorded, else
    the default."""
    raw = os.environ.get(env_name)
    if raw:
        try:
            port = int(raw)
        except ValueError:
            raise StackError(f"{env_name}={raw!r} is not a port number") from None
        if not 1 <= port <= 65535:
            raise StackError(f"{env_name}={raw!r} is not a port number (1-65535)")
        return port
    recorded = recorded_port(component, key)
    return recorded if recorded is not None else default


def requested_port(env_name: str) -> int | None:
    """The port the environment asks for explicitly, if it does."""
    return wanted_port(env_name, "", "", 0) if os.environ.get(env_name) else None


def environment_disagrees(env_name: str, actual: int) -> str | None:
    """A warning when the environment names another port than the running server's."""
    raw = os.environ.get(env_name)
    if raw and raw.strip() != str(actual):
        return (f"{env_name}={raw} but this stack's server runs on {actual} (started that "
                f"way; the record in {record_path()} says so): using {actual}")
    return None
