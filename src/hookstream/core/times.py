"""Times as operators type them: ISO 8601 (naive means UTC), ``now``, or relative to now
(``now-90m``, ``now-2h``, ``-1d``, ``now+30m``). Pure: the clock is an argument."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

_RELATIVE = re.compile(r"^(?:now)?([-+])(\d+(?:\.\d+)?)([smhd])$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_time(raw: str, now: datetime) -> datetime:
    """``-2h`` is taken too, though argparse only accepts it as ``--since=-2h``."""
    raw = raw.strip()
    if raw == "now":
        return now
    if m := _RELATIVE.match(raw):
        delta = timedelta(seconds=float(m.group(2)) * _UNIT_S[m.group(3)])
        return now - delta if m.group(1) == "-" else now + delta
    value = datetime.fromisoformat(raw)
    return value if value.tzinfo else value.replace(tzinfo=UTC)
