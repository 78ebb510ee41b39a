"""HTML form fields into the inputs the API's own validation takes. Pure.

A form sends text; the API validates JSON values. These functions only convert
(numbers, lists, checkboxes, the browser's ``datetime-local`` format), then the console
hands the result to ``hookstream.controlplane.validation`` so both front doors apply one set of
rules. A conversion that fails is the same 400 naming the field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from hookstream.controlplane.errors import invalid

# <input type="datetime-local"> sends "2024-06-01T12:30" (or with seconds) and no offset;
# the console labels such fields UTC.
_LOCAL = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?")


def text(form: Mapping[str, str], name: str) -> str | None:
    value = form.get(name)
    return None if value is None else value.strip()


def time_value(raw: str | None) -> str | None:
    """An ISO 8601 time for ``validation.timestamp``: a value without an offset is UTC."""
    if raw is None or not raw.strip():
        return None
    raw = raw.strip()
    return raw + "+00:00" if _LOCAL.fullmatch(raw) else raw


def _number(raw: str, name: str, cast: type) -> Any:
    try:
        return cast(raw)
    except ValueError:
        raise invalid(name, "must be a number" if cast is float else "must be an integer") \
            from None


def event_types(raw: str) -> list[str]:
    """``invoice.*, order.paid`` or one per line."""
    return [t for t in re.split(r"[\s,]+", raw) if t]


def endpoint_body(form: Mapping[str, str], *, with_tenant: bool) -> dict[str, Any]:
    """The JSON body of a create or a full edit (every field the form shows)."""
    body: dict[str, Any] = {}
    if (url := text(form, "url")) is not None:
        body["url"] = url
    if (description := form.get("description")) is not None:
        body["description"] = description
    if (types := text(form, "event_types")) is not None:
        body["event_types"] = event_types(types)
    for name, cast in (("rate_per_s", float), ("burst", int), ("max_in_flight", int)):
        raw = text(form, name)
        if raw:
            body[name] = _number(raw, name, cast)
    body["coalesce"] = form.get("coalesce") == "on"  # an unticked box sends nothing
    if with_tenant and (tenant := text(form, "tenant")):
        body["tenant"] = tenant
    return body


def replay_body(form: Mapping[str, str], statuses: list[str]) -> dict[str, Any]:
    body: dict[str, Any] = {}
    for name in ("since", "until"):
        if (value := time_value(form.get(name))) is not None:
            body[name] = value
    if statuses:
        body["statuses"] = statuses
    return body


def overlap_s(form: Mapping[str, str]) -> dict[str, Any]:
    raw = text(form, "overlap_s")
    return {} if not raw else {"overlap_s": _number(raw, "overlap_s", float)}


FORM_FIELDS = ("tenant", "url", "description", "event_types", "rate_per_s", "burst",
               "max_in_flight")


def endpoint_values(source: Mapping[str, Any] | None) -> dict[str, Any]:
    """What an endpoint form shows: an endpoint row's values, or what was typed (after a
    refusal), as text; ``coalesce`` as a bool."""
    if source is None:
        return {**dict.fromkeys(FORM_FIELDS, ""), "event_types": "*", "coalesce": True}
    values: dict[str, Any] = {}
    for name in FORM_FIELDS:
        value = source.get(name)
        if isinstance(value, list):
            value = ", ".join(value)
        values[name] = "" if value is None else str(value)
    coalesce = source.get("coalesce")
    values["coalesce"] = coalesce if isinstance(coalesce, bool) else coalesce == "on"
    return values
