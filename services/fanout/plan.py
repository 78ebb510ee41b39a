"""How a batch of events is cut into delivery-creating statements: pure, no I/O.

A statement creates (and returns, so its tasks can be produced) at most about
``max_rows`` delivery rows, whatever the fan-out: an event whose (tenant, type) matches
more endpoints than that is split into endpoint id ranges (keyset pages), and small
events are packed together so the common case (a few endpoints per event) stays one
statement per batch. Memory is bounded by ``max_rows`` rows, not by the tenant's size.

The sizes come from a counting query run just before; an endpoint added or disabled in
between only makes a statement a little larger or smaller than planned.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Slice:
    """One event's endpoints with ``after < id <= upto`` (None: unbounded)."""

    event: int  # index into the batch's accepted events
    after: uuid.UUID | None
    upto: uuid.UUID | None
    rows: int  # matching endpoints in the range (upper bound of rows created)


@dataclass(frozen=True, slots=True)
class Audience:
    """The endpoints one (tenant, type) reaches: how many, and every ``page``-th id."""

    rows: int
    boundaries: tuple[uuid.UUID, ...] = ()  # ids at positions page, 2*page, ... (sorted)


def ranges(audience: Audience, page: int) -> list[tuple[uuid.UUID | None, uuid.UUID | None, int]]:
    """Keyset pages ``(after, upto, rows)`` covering every matching endpoint once."""
    if audience.rows <= 0:
        return []
    # A boundary at the very last endpoint would leave an empty last page.
    cuts = [b for i, b in enumerate(audience.boundaries, 1) if i * page < audience.rows]
    out: list[tuple[uuid.UUID | None, uuid.UUID | None, int]] = []
    after: uuid.UUID | None = None
    for cut in cuts:
        out.append((after, cut, page))
        after = cut
    out.append((after, None, audience.rows - page * len(cuts)))
    return out


def plan(
    keys: Sequence[tuple[str, str]],
    audiences: Mapping[tuple[str, str], Audience],
    max_rows: int,
) -> list[list[Slice]]:
    """Statements (lists of slices) for events whose (tenant, type) are ``keys``.

    Events that reach nobody get no slice at all. Slices keep the events' order; a
    statement holds slices summing to at most ``max_rows`` rows, except that a single
    slice is never split further (its size is at most one page, i.e. ``max_rows``).
    """
    statements: list[list[Slice]] = []
    current: list[Slice] = []
    current_rows = 0
    for index, key in enumerate(keys):
        audience = audiences.get(key)
        if audience is None:
            continue
        for after, upto, rows in ranges(audience, max_rows):
            if current and current_rows + rows > max_rows:
                statements.append(current)
                current, current_rows = [], 0
            current.append(Slice(index, after, upto, rows))
            current_rows += rows
    if current:
        statements.append(current)
    return statements
