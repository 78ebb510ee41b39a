"""hookstream.core.aio.wait_set on a real event loop: set, timed out, and — the reason it
exists — cancelled in the same loop iteration in which the event is set, where Python
3.11's ``asyncio.wait_for`` returned as if nothing had happened (the CI hang of
test_sweeper_pace: a sweeper that could not be stopped)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from hookstream.core.aio import wait_set


async def test_set_before_the_bound_and_not() -> None:
    event = asyncio.Event()
    asyncio.get_running_loop().call_later(0.01, event.set)
    assert await wait_set(event, 5.0) is True
    assert await wait_set(asyncio.Event(), 0.01) is False


async def _cancelled_as_the_event_is_set(
        wait: Callable[[asyncio.Event], Awaitable[object]]) -> bool:
    """A loop of waits, as the services' loops are; the event is set and the task
    cancelled in the same iteration. True if the task ended cancelled."""
    event = asyncio.Event()

    async def loop_of_waits() -> None:
        while True:
            await wait(event)
            event.clear()

    task = asyncio.create_task(loop_of_waits())
    await asyncio.sleep(0)  # the task is waiting on the event
    event.set()
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=1.0)
    if not done:
        task.cancel()  # the lost cancellation: stop it for good
        await asyncio.wait({task}, timeout=1.0)
        return False
    return task.cancelled()


async def test_a_cancellation_as_the_event_is_set_is_kept() -> None:
    assert await _cancelled_as_the_event_is_set(lambda e: wait_set(e, 5.0))


@pytest.mark.skipif(__import__("sys").version_info >= (3, 12),
                    reason="asyncio.wait_for keeps the cancellation from Python 3.12")
async def test_asyncio_wait_for_loses_that_cancellation_on_this_python() -> None:
    # Why wait_set exists: the same race with the standard library's wait_for.
    assert not await _cancelled_as_the_event_is_set(
        lambda e: asyncio.wait_for(e.wait(), 5.0))


async def test_calls_run_in_order_on_one_daemon_thread_and_raise_to_the_awaiter() -> None:
    import threading

    from hookstream.core.aio import CallThread

    calls = CallThread("kafka-test")
    seen: list[tuple[int, str]] = []

    def record(i: int) -> int:
        seen.append((i, threading.current_thread().name))
        return i * 2

    def fail() -> None:
        raise ValueError("from the client")

    results = await asyncio.gather(*(calls.call(record, i) for i in range(20)))
    assert results == [i * 2 for i in range(20)]
    assert [i for i, _ in seen] == list(range(20))
    assert {name for _, name in seen} == {"kafka-test"}
    with pytest.raises(ValueError, match="from the client"):
        await calls.call(fail)
    assert next(t for t in threading.enumerate() if t.name == "kafka-test").daemon
    calls.stop()


def test_a_call_that_never_returns_does_not_keep_the_process_alive(tmp_path: object) -> None:
    # The reason CallThread is not a ThreadPoolExecutor: the interpreter joins those
    # workers at exit, so a call blocked for good (a commit to a coordinator that never
    # answers) kept a stopped service alive until it was killed.
    import subprocess
    import sys
    import textwrap

    def run(executor: str) -> int | None:
        code = textwrap.dedent(f"""
            import asyncio, threading
            from concurrent.futures import ThreadPoolExecutor
            from hookstream.core.aio import CallThread

            async def main():
                never = threading.Event()
                if {executor!r} == "CallThread":
                    calls = CallThread("kafka")
                    pending = asyncio.ensure_future(calls.call(never.wait))
                else:
                    pool = ThreadPoolExecutor(max_workers=1)
                    pending = asyncio.get_running_loop().run_in_executor(pool, never.wait)
                try:
                    async with asyncio.timeout(0.2):
                        await asyncio.shield(pending)
                except TimeoutError:
                    print("gave up waiting", flush=True)

            asyncio.run(main())
        """)
        try:
            return subprocess.run([sys.executable, "-c", code], timeout=10,
                                  capture_output=True).returncode
        except subprocess.TimeoutExpired:
            return None  # still alive after its main had returned

    assert run("CallThread") == 0
    assert run("ThreadPoolExecutor") is None
