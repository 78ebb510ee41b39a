"""Templates into responses: one Jinja2 environment, autoescaping on for every template
(not only *.html), undefined names an error rather than an empty string.

Everything a customer controls (URLs, descriptions, payloads, response excerpts, error
texts) reaches a page only through ``{{ }}``, which escapes it; no template marks data
safe. Filters format times, ages and payloads; none of them returns markup.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from typing import Any

import jinja2
import orjson

from hookstream.api.console.paging import link

PACKAGE = "hookstream.api.console"


def when(value: datetime | None) -> str:
    if value is None:
        return "—"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") + "Z"


def input_time(value: datetime | None) -> str:
    """The value of an ``<input type="datetime-local">`` (UTC, to the second)."""
    return "" if value is None else value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")


def age(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    s = max(0, int(seconds))
    for unit, size in (("d", 86_400), ("h", 3600), ("min", 60)):
        if s >= size:
            return f"{s // size} {unit}" if unit == "d" or s % size < 60 or unit == "min" \
                else f"{s // size} {unit} {s % size // 60} min"
    return f"{s} s"


def percent(rate: float | None) -> str:
    return "—" if rate is None else f"{rate * 100:.1f} %"


def payload_text(raw: bytes | memoryview | None) -> str:
    """The stored bytes as a person reads them: indented JSON when they are JSON, else
    the text with undecodable bytes replaced (the page escapes it either way)."""
    if raw is None:
        return ""
    data = bytes(raw)
    try:
        return orjson.dumps(orjson.loads(data), option=orjson.OPT_INDENT_2).decode()
    except orjson.JSONDecodeError:
        return data.decode("utf-8", "replace")


@dataclass(frozen=True)
class StaticFile:
    body: bytes
    content_type: str
    version: str


_TYPES = {".js": "text/javascript", ".css": "text/css", ".txt": "text/plain",
          ".svg": "image/svg+xml"}


@cache
def static_files() -> dict[str, StaticFile]:
    folder = resources.files(PACKAGE) / "static"
    files: dict[str, StaticFile] = {}
    for entry in folder.iterdir():
        suffix = "." + entry.name.rsplit(".", 1)[-1]
        if entry.is_file() and suffix in _TYPES:
            body = entry.read_bytes()
            files[entry.name] = StaticFile(body, _TYPES[suffix],
                                           hashlib.sha256(body).hexdigest()[:12])
    return files


def static_url(name: str) -> str:
    # the content hash in the URL: a new release is fetched, an old one cached forever
    return f"/console/static/{name}?v={static_files()[name].version}"


@cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader(PACKAGE, "templates"),
        autoescape=True, undefined=jinja2.StrictUndefined,
        trim_blocks=True, lstrip_blocks=True)
    env.filters.update(when=when, age=age, percent=percent, payload_text=payload_text,
                       input_time=input_time)
    env.globals.update(static=static_url, link=link)
    return env


def render_html(template: str, context: dict[str, Any]) -> str:
    return environment().get_template(template).render(**context)
