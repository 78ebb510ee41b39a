"""The audiences of recent (tenant, type) pairs, kept for a moment: pure, no I/O.

Every fanout batch asked PostgreSQL how many endpoints each of its (tenant, type) pairs
reaches (plan.py cuts statements from that): one statement more on the path of every
event and in every saturated batch (issue #15; what it saves is not yet measured on its
own). The answer
changes only when endpoints do, so it is kept for ``ttl_s``. What a stale answer can do,
and why that is safe:

- An endpoint added since is still reached: the last keyset range of every audience is
  open-ended (``upto`` None), and the creating statement joins the endpoints table
  itself. A statement can then hold the added endpoints' rows beyond
  ``max_rows_per_statement`` until the entry expires.
- A disabled or deleted endpoint is excluded by the creating statement, whatever the
  plan said.
- A pair that reached nobody is never kept: its event gets no statement at all, so a
  stale "nobody" would miss the first endpoint of a new subscription. It is asked again
  every batch (one statement for the pairs missing, not one per pair).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping

from hookstream.fanout.plan import Audience

Key = tuple[str, str]


class AudienceCache:
    def __init__(self, ttl_s: float, *, max_keys: int = 100_000,
                 clock: Callable[[], float] = time.monotonic):
        self.ttl_s = ttl_s
        self.max_keys = max_keys
        self._clock = clock
        self._kept: dict[Key, tuple[float, Audience]] = {}  # key -> (expires at, audience)

    def split(self, keys: Iterable[Key]) -> tuple[dict[Key, Audience], list[Key]]:
        """The audiences known and fresh, and the keys to ask for (each once, in order)."""
        now = self._clock()
        known: dict[Key, Audience] = {}
        missing: dict[Key, None] = {}
        for key in keys:
            if key in known or key in missing:
                continue
            entry = self._kept.get(key)
            if entry is not None and entry[0] > now:
                known[key] = entry[1]
            else:
                missing[key] = None
        return known, list(missing)

    def keep(self, found: Mapping[Key, Audience]) -> None:
        """Keep what a query found, except audiences of nobody."""
        if self.ttl_s <= 0:
            return
        now = self._clock()
        if len(self._kept) + len(found) > self.max_keys:
            # Bounded memory however many tenants and types: expired entries first,
            # then everything (the next batches ask again, nothing is lost).
            self._kept = {k: v for k, v in self._kept.items() if v[0] > now}
            if len(self._kept) + len(found) > self.max_keys:
                self._kept = {}
        expires = now + self.ttl_s
        for key, audience in found.items():
            if audience.rows <= 0:
                self._kept.pop(key, None)  # an answer of before is not kept over this one
            elif key in self._kept or len(self._kept) < self.max_keys:
                self._kept[key] = (expires, audience)

    def __len__(self) -> int:
        return len(self._kept)
