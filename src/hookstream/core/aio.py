"""Waiting on an asyncio event with a bound, without losing a cancellation.

``asyncio.wait_for`` of Python 3.11 returns the awaited result instead of raising
when the task is cancelled in the loop iteration in which what it waits for completes
(python/cpython#86296, fixed in 3.12): the cancellation is lost, and a loop written as
"wait for a wake-up or a timeout, then go on" never ends. It happened in CI: the
sweeper was cancelled while a delivery report set its event, went on sweeping, and the
``await`` of its task hung for 300 s. ``asyncio.timeout`` keeps the cancellation.
"""

from __future__ import annotations

import asyncio


async def wait_set(event: asyncio.Event, timeout_s: float) -> bool:
    """Until ``event`` is set (True) or ``timeout_s`` has passed (False); a cancellation
    always propagates."""
    try:
        async with asyncio.timeout(timeout_s):
            await event.wait()
        return True
    except TimeoutError:
        return event.is_set()
