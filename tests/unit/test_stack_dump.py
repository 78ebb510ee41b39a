"""A stuck process tells where it waits: SIGUSR1 → every thread's stack and the loop's tasks
(hookstream.ops.stack_dump), and the harness asks for them before killing a hung service."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from hookstream.dev.harness import ServiceProcess
from hookstream.ops.stack_dump import TASKS_HEADER

# A process shaped like the dispatcher when it hangs: a thread blocked in a call that
# never returns, an asyncio task awaiting something that never comes, SIGTERM ignored.
HUNG = textwrap.dedent("""
    import asyncio, signal, sys, threading
    from hookstream.ops.stack_dump import install

    def blocked_in_kafka_commit(never):
        never.wait()

    async def waiting_for_an_ack(never):
        await never.wait()

    async def main():
        install()
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        threading.Thread(target=blocked_in_kafka_commit, args=(threading.Event(),),
                         name="kafka_0", daemon=True).start()
        asyncio.create_task(waiting_for_an_ack(asyncio.Event()), name="writer")
        print("ready", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())
""")


def _start(log_path: Path) -> subprocess.Popen[bytes]:
    log = log_path.open("ab")
    proc = subprocess.Popen([sys.executable, "-c", HUNG], stdout=log, stderr=subprocess.STDOUT)
    log.close()
    return proc


def _wait_ready(log_path: Path, proc: subprocess.Popen[bytes]) -> None:
    import time

    deadline = time.monotonic() + 20
    while b"ready" not in log_path.read_bytes():
        assert proc.poll() is None, log_path.read_text()
        assert time.monotonic() < deadline, "the hung process never started"
        time.sleep(0.05)


def test_a_hung_service_is_killed_with_its_stacks_in_the_problem(tmp_path: Path) -> None:
    log_path = tmp_path / "dispatcher.log"
    service = ServiceProcess("dispatcher", {}, log_path)
    service.proc = _start(log_path)
    _wait_ready(log_path, service.proc)

    service.terminate(timeout_s=1.0)

    problem = service.exit_problem()
    assert problem is not None and "hung shutdown" in problem
    # The blocked thread, by the function it is blocked in (faulthandler names threads
    # by their id)…
    assert "Thread 0x" in problem
    assert "blocked_in_kafka_commit" in problem
    # …and the task awaiting forever, by its name and coroutine.
    assert TASKS_HEADER in problem
    assert "name='writer'" in problem and "waiting_for_an_ack" in problem


def test_a_service_that_stops_in_time_is_not_asked_for_stacks(tmp_path: Path) -> None:
    log_path = tmp_path / "relay.log"
    service = ServiceProcess("relay", {}, log_path)
    log = log_path.open("ab")
    service.proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                                    stdout=log, stderr=subprocess.STDOUT)
    log.close()

    service.terminate(timeout_s=10.0)

    assert service.hung_s is None
    assert service.proc.returncode == -15
    assert "Thread 0x" not in log_path.read_text()
