"""What a stuck service is doing, on demand: ``kill -USR1 <pid>`` writes every thread's
Python stack to stderr (the service's log), then the stack of every asyncio task of the
event loop running on the main thread (the dispatcher's pump, writer, committer...).

A hung shutdown or a consumer that stopped consuming shows only its silence in the log;
the stacks say which call it waits in. The test harness asks for them before it SIGKILLs
a service that did not exit after SIGTERM, so a CI run that hangs once explains itself.
The threads come from ``faulthandler`` (C level: it answers even when the interpreter
is blocked in a native call, e.g. librdkafka's); the tasks from a Python handler that
runs as soon as the main thread executes Python again.
"""

from __future__ import annotations

import asyncio
import faulthandler
import signal
import sys
from types import FrameType

DUMP_SIGNAL = signal.SIGUSR1
TASKS_HEADER = "asyncio tasks of the main thread's loop"


def install(signum: int = DUMP_SIGNAL) -> None:
    """Dump stacks on ``signum``. The Python handler is installed first: faulthandler's
    C handler writes the threads, then chains to it."""
    signal.signal(signum, _dump_tasks)
    faulthandler.register(signum, file=sys.stderr, all_threads=True, chain=True)


def _dump_tasks(_signum: int, _frame: FrameType | None) -> None:
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return  # no loop on the main thread (the relay, the fanout): threads say it all
    tasks = asyncio.all_tasks(loop)
    print(f"{TASKS_HEADER} ({len(tasks)}):", file=sys.stderr)
    for task in sorted(tasks, key=lambda t: t.get_name()):
        task.print_stack(limit=12, file=sys.stderr)
    sys.stderr.flush()
