"""A progress bar on stderr for long operations (``operations wait``, ``--wait``).

On a terminal the bar is redrawn in place; otherwise (a log, a pipe) one line is
written when the figures change, at most every ``quiet_s``, so a cron log shows the
operation moving without a line per poll. stdout stays free for the result.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

WIDTH = 30


def bar(done: int, total: int, width: int = WIDTH) -> str:
    """``[######........]  120/500  24%`` (a total of 0 is complete)."""
    fraction = 1.0 if total <= 0 else min(1.0, done / total)
    filled = round(fraction * width)
    return f"[{'#' * filled}{'.' * (width - filled)}] {done:>{len(str(total))}}/{total} " \
           f"{fraction:4.0%}"


class Progress:
    def __init__(self, stream: TextIO | None = None, *, quiet_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty()
        self.quiet_s = quiet_s
        self.clock = clock
        self._last: tuple[str, float] | None = None

    def update(self, label: str, done: int, total: int) -> None:
        line = f"{label} {bar(done, total)}"
        if self.live:
            self.stream.write("\r" + line)
            self.stream.flush()
            return
        now = self.clock()
        if self._last is None or (line != self._last[0] and now - self._last[1] >= self.quiet_s):
            self.stream.write(line + "\n")
            self.stream.flush()
            self._last = (line, now)

    def finish(self, label: str, done: int, total: int) -> None:
        line = f"{label} {bar(done, total)}"
        self.stream.write(("\r" + line if self.live else line) + "\n")
        self.stream.flush()
