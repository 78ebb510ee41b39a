"""How long a one-shot set-up command (``migrate``, ``topics``) waits for its server to
come up: doubling pauses from ``first_s`` up to ``cap_s``, never past the bound.

Containers start in any order wherever compose does not honour health conditions
(podman-compose 1.x does not), so the set-up commands wait for their server themselves,
for a bounded time, and say so at every try; past the bound they fail as before.
"""

from __future__ import annotations

from collections.abc import Iterator


def pauses(bound_s: float, first_s: float = 0.5, cap_s: float = 5.0) -> Iterator[float]:
    """The pauses between tries, in order; they add up to at most ``bound_s`` (0: none,
    a single try). The last one is shortened to end exactly at the bound, so a server
    that comes up late in the wait still gets one try at the end of it."""
    if bound_s < 0 or first_s <= 0 or cap_s < first_s:
        raise ValueError(f"bound_s >= 0 and 0 < first_s <= cap_s, got {bound_s}, "
                         f"{first_s}, {cap_s}")
    left, pause = float(bound_s), float(first_s)
    while left > 0:
        step = min(pause, left)
        yield step
        left -= step
        pause = min(pause * 2, cap_s)
