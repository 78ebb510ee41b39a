"""``GET /v1/dead-letters`` (operator keys): the ``<prefix>.dead`` topic, decoded
(``hookstream.controlplane.dead_letters``)."""

from __future__ import annotations

from aiohttp import web

from hookstream.api.handling import Ctx, Route, json_response
from hookstream.controlplane import dead_letters
from hookstream.controlplane import validation as v


async def list_dead_letters(c: Ctx) -> web.Response:
    q = c.query("since", "cursor", "limit")
    limit = v.limit_param(q)
    raw_cursor = v.single(q, "cursor")
    offsets = None if raw_cursor is None else dead_letters.decode_offsets(raw_cursor)
    since = v.time_param(q, "since")
    found = await dead_letters.read(c.settings, since=since, offsets=offsets, limit=limit)
    return json_response({
        "data": [dead_letters.dead_letter(r) for r in found.records],
        "next_cursor": None if found.next_offsets is None else dead_letters.encode_offsets(
            found.next_offsets)})


ROUTES: tuple[Route, ...] = (
    ("GET", "/v1/dead-letters", list_dead_letters, True),
)
