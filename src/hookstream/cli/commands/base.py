"""What every API command shares: the client built from ``HOOKSTREAM_API_URL`` and
``HOOKSTREAM_API_KEY``, the common arguments (``--json``, ``--limit``, ``--cursor``, times)
and printing a list or one object."""

from __future__ import annotations

import argparse
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from hookstream.cli import output
from hookstream.cli.client import ApiClient
from hookstream.cli.failures import USAGE, CommandError
from hookstream.core.settings import ClientSettings, from_env
from hookstream.core.times import parse_time

DEFAULT_LIMIT = 100


def client() -> ApiClient:
    settings = from_env(ClientSettings)
    if not settings.api_key:
        raise CommandError(
            "no API key: set HOOKSTREAM_API_KEY (an operator creates one with `hookstream "
            "apikeys create --operator` or `--tenant ID`) and HOOKSTREAM_API_URL (default "
            f"{settings.api_url})", USAGE)
    return ApiClient(settings.api_url, settings.api_key, settings.api_timeout_s)


def uuid_arg(raw: str) -> str:
    try:
        return str(uuid.UUID(raw))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a UUID: {raw!r}") from None


def time_arg(raw: str) -> str:
    """ISO 8601, ``now`` or ``now-2h``; sent to the API as ISO 8601 with an offset."""
    try:
        return parse_time(raw, datetime.now(UTC)).isoformat()
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a time: {raw!r} (ISO 8601 such as 2026-12-01T12:00:00Z, or now-2h)") from None


def positive_int(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number > 0, got {raw!r}")
    return value


def json_flag(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--json", action="store_true", help="print JSON (for scripts)")
    return p


def list_flags(p: argparse.ArgumentParser, default_limit: int = DEFAULT_LIMIT,
               ) -> argparse.ArgumentParser:
    json_flag(p)
    p.add_argument("--limit", type=positive_int, default=default_limit,
                   help=f"at most this many (default {default_limit}); pages are followed")
    p.add_argument("--cursor", help="continue where a previous listing stopped")
    return p


def print_list(args: argparse.Namespace, items: Sequence[Mapping[str, Any]],
               cursor: str | None, columns: Sequence[output.Column], noun: str) -> int:
    if args.json:
        output.as_json({"data": list(items), "next_cursor": cursor})
    else:
        output.listing(items, columns, noun=noun,
                       more=None if cursor is None else f"--cursor {cursor}")
    return 0


def print_one(args: argparse.Namespace, item: Mapping[str, Any],
              columns: Sequence[output.Column]) -> int:
    if args.json:
        output.as_json(item)
    else:
        print(output.block(item, columns))
    return 0
