"""What commands print: JSON for scripts (``--json``), aligned tables and ``key: value``
blocks for people. A column is a title and a function of the row, so one command's
rendering is a short list of what to show."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TextIO

import orjson

Column = tuple[str, Callable[[Mapping[str, Any]], Any]]
MAX_CELL = 60


def as_json(data: Any, out: TextIO | None = None) -> None:
    text = orjson.dumps(data, option=orjson.OPT_INDENT_2, default=str).decode()
    (out or sys.stdout).write(text + "\n")


def cell(value: Any, max_len: int | None = MAX_CELL) -> str:
    """One value as a table cell: times to the second, lists joined, long text cut."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list | tuple):
        return ",".join(cell(v) for v in value) or "-"
    text = str(value)
    if len(text) >= 20 and text[4:5] == "-" and text[10:11] == "T":  # an ISO 8601 time
        text = text[:19].replace("T", " ") + ("Z" if text.endswith(("Z", "+00:00")) else "")
    text = " ".join(text.split())
    return text if max_len is None or len(text) <= max_len else text[:max_len - 1] + "…"


def field(name: str) -> Callable[[Mapping[str, Any]], Any]:
    """A column function reading ``name`` (dotted for nested objects: "progress.total")."""
    def get(row: Mapping[str, Any]) -> Any:
        value: Any = row
        for part in name.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        return value

    return get


def table(rows: Sequence[Mapping[str, Any]], columns: Sequence[Column]) -> str:
    """Columns aligned; long text is cut except in the last column, which has the room."""
    last = len(columns) - 1
    grid = [[title.upper() for title, _ in columns]]
    grid += [[cell(get(row), None if i == last else MAX_CELL)
              for i, (_, get) in enumerate(columns)] for row in rows]
    widths = [max(len(line[i]) for line in grid) for i in range(len(columns))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip()
                     for line in grid)


def block(row: Mapping[str, Any], columns: Iterable[Column]) -> str:
    pairs = [(title, cell(get(row), None)) for title, get in columns]
    width = max(len(title) for title, _ in pairs)
    return "\n".join(f"{title + ':':<{width + 1}} {value}" for title, value in pairs)


def listing(items: Sequence[Mapping[str, Any]], columns: Sequence[Column], *, noun: str,
            more: str | None = None, out: TextIO | None = None) -> None:
    """A table of ``items`` (or a line saying there are none) and, when a page limit cut
    the list, how to get the rest."""
    stream = out or sys.stdout
    stream.write((table(items, columns) if items else f"no {noun}") + "\n")
    if more:
        print(f"(more {noun}: {more})", file=sys.stderr)
