"""Which endpoints get series of their own: bounded, and stable from one sample to the next.

Exporting every endpoint would make the cardinality the customer count; exporting only
the worst N of each sample (as before) made a series appear and vanish whenever the
ranking moved (96 ``endpoint`` values in 25 minutes of a slow-customer run), left a gap
instead of 0 when an endpoint recovered, and dropped endpoints behind an open circuit.

Here an endpoint that ranks among the worst ``slots`` of its pool (held: paused,
disabled or circuit open; or not held) is *tracked*: it keeps its series — at its
current figures, 0 once healthy — until it has been out of the worst list for
``keep_s``. Each pool tracks at most ``capacity`` endpoints; past that, the ones out of
the list the longest give way. Pure: the sampler feeds it rankings and the time.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

DEFAULT_KEEP_S = 3600.0


@dataclass(frozen=True)
class Ranked:
    endpoint: str
    tenant: str
    held: bool
    oldest_age_s: float  # 0: nothing waiting


@dataclass
class _Entry:
    tenant: str
    held: bool
    last_worst_at: float


@dataclass
class EndpointTracker:
    slots: int
    keep_s: float = DEFAULT_KEEP_S
    capacity: int = 0  # per pool; 0 means 2 × slots
    _entries: dict[str, _Entry] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.slots < 1 or self.keep_s < 0:
            raise ValueError("slots must be ≥ 1 and keep_s ≥ 0")
        if self.capacity == 0:
            self.capacity = 2 * self.slots
        if self.capacity < self.slots:
            raise ValueError("capacity must be at least slots")

    def update(self, worst: Iterable[Ranked], now: float,
               gone: Iterable[str] = ()) -> dict[str, tuple[str, bool]]:
        """Feed the current ranking (worst first; only endpoints with waiting work count)
        and the endpoints that no longer exist; returns the tracked endpoints → (tenant,
        held)."""
        for endpoint in gone:
            self._entries.pop(endpoint, None)
        taken = {False: 0, True: 0}
        for r in worst:
            if r.oldest_age_s <= 0 or taken[r.held] >= self.slots:
                continue
            taken[r.held] += 1
            self._entries[r.endpoint] = _Entry(r.tenant, r.held, now)
        for endpoint, e in list(self._entries.items()):
            if now - e.last_worst_at > self.keep_s:
                del self._entries[endpoint]
        for held in (False, True):
            pool = [(e.last_worst_at, ep) for ep, e in self._entries.items() if e.held is held]
            if len(pool) > self.capacity:
                # Those in the current list have last_worst_at == now: never evicted here.
                for _at, endpoint in sorted(pool)[:len(pool) - self.capacity]:
                    del self._entries[endpoint]
        return {ep: (e.tenant, e.held) for ep, e in self._entries.items()}

    def note_held(self, endpoint: str, held: bool) -> None:
        """A tracked endpoint changed pool (paused, circuit opened or closed)."""
        if (e := self._entries.get(endpoint)) is not None:
            e.held = held
