"""asyncio helpers: waiting on an event with a bound without losing a cancellation, and
calling a blocking client from the event loop on a thread that never blocks an exit.

``asyncio.wait_for`` of Python 3.11 returns the awaited result instead of raising
when the task is cancelled in the loop iteration in which what it waits for completes
(python/cpython#86296, fixed in 3.12): the cancellation is lost, and a loop written as
"wait for a wake-up or a timeout, then go on" never ends. It happened in CI: the
sweeper was cancelled while a delivery report set its event, went on sweeping, and the
``await`` of its task hung for 300 s. ``asyncio.timeout`` keeps the cancellation.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


async def wait_set(event: asyncio.Event, timeout_s: float) -> bool:
    """Until ``event`` is set (True) or ``timeout_s`` has passed (False); a cancellation
    always propagates."""
    try:
        async with asyncio.timeout(timeout_s):
            await event.wait()
        return True
    except TimeoutError:
        return event.is_set()


class CallThread:
    """One daemon thread that runs, in order, the calls handed to it from the event loop
    (every call into a client that is not thread-safe, e.g. a Kafka consumer).

    Not a ``ThreadPoolExecutor``: its workers are joined when the interpreter exits, so
    a call that never returns (a librdkafka commit to a coordinator that does not answer
    waits as long as it hangs) kept the process alive after SIGTERM until it was killed.
    Whoever awaits a call here bounds the wait; a call still blocked when the process
    ends is abandoned with its thread.
    """

    def __init__(self, name: str):
        self._calls: queue.SimpleQueue[tuple[concurrent.futures.Future[Any],
                                             Callable[..., Any], tuple[Any, ...]] | None] = \
            queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._calls.put((future, fn, args))
        return await asyncio.wrap_future(future)

    def stop(self) -> None:
        """No call after those already handed over; does not wait for them."""
        self._calls.put(None)

    def _serve(self) -> None:
        while (item := self._calls.get()) is not None:
            future, fn, args = item
            if not future.set_running_or_notify_cancel():
                continue  # its awaiter was cancelled before it ran
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # handed to the awaiter, whatever it is
                future.set_exception(exc)
