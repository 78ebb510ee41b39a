"""Named SQL queries kept in ``.sql`` files: Python decides which query, PostgreSQL does the work.

A file holds blocks that start with ``-- name: <query_name>``; everything up to the
next such line is the query text.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)


def parse(text: str) -> dict[str, str]:
    parts = _NAME.split(text)
    # parts = [preamble, name1, body1, name2, body2, ...]
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise ValueError(f"query {name} defined twice")
        queries[name] = body.strip()
    return queries


@cache
def load(concern: str) -> dict[str, str]:
    return parse((resources.files("hookstream.io") / "sql" / f"{concern}.sql").read_text("utf-8"))
