"""How fast this host's cores are right now: a fixed piece of the dispatcher's kind of work.

The same code on this kind of machine has run at very different speeds from one session to
the next: at 1,000 deliveries/s the pipeline kept both cores 57 % busy on the morning of
2026-12-06 and 90–92 % busy that evening, every process's CPU per delivery 1.5–1.9×
higher, with no steal time to show for it (benchmarks/pipeline.py; BENCHMARKS.md,
"How figures travel with the host"). A
figure like "4,000 deliveries/s on these two cores" then says little unless the speed it
was measured at travels with it.

The speed also moves within seconds, at idle: the same unit timed back to back took
16–38 ms of CPU that evening (process CPU time equal to wall time, so not preemption:
the neighbours on the physical cores). One timing before a run is therefore not enough.
Every pipeline run samples the yardstick through its load (``Sampler``: a small piece
every half second, ~0.5 % of a core) and reports the median and spread, and its CPU per
delivery in units of that median.

One unit: ``UNIT_EVENTS`` webhook bodies built, serialised with orjson, signed with
HMAC-SHA256, encoded and parsed back — the Python-level work of an attempt, without the
I/O. Timed in CPU time (a core's speed, not the scheduler's mood).

That unit alone has misread the host: on 2026-12-07 it read 16–19 ms (a fast host) while
the dispatcher took 0.25 CPU-ms per delivery against 0.17 on a fast day and a bare
aiohttp client 0.14 CPU-ms per loopback request against 0.106 — the slowness was in the
system calls and the kernel's loopback path, which the unit never enters. So a second
unit beside it: ``LOOPBACK_ROUND_TRIPS`` request/response exchanges (600 bytes out, 150
back, a webhook's sizes) over a TCP connection on 127.0.0.1, both ends in one thread,
timed in that thread's CPU time (user and system: four system calls and the loopback
delivery per exchange).

    .venv/bin/python -m benchmarks.host_speed
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import socket
import statistics
import threading
import time
import uuid
from collections.abc import Callable

import orjson

UNIT_EVENTS = 2_000
REPETITIONS = 7
# The sampler's piece: a tenth of a unit (~2–4 ms of CPU), scaled back to a unit.
PIECE_EVENTS = 200
SAMPLE_EVERY_S = 0.5
_KEY = bytes(range(32))
LOOPBACK_ROUND_TRIPS = 1_000
# The sampler's loopback piece: a tenth of a unit too, scaled back to one.
LOOPBACK_PIECE = 100
_REQUEST, _RESPONSE = b"r" * 600, b"a" * 150


def unit(events: int = UNIT_EVENTS) -> int:
    """One unit of work; returns a value derived from all of it (so none is skipped)."""
    acc = 0
    for i in range(events):
        body = orjson.dumps({"event_id": str(uuid.UUID(int=i)), "type": "invoice.paid",
                             "tenant": f"t{i % 20:02d}", "seq": i,
                             "data": {"amount": i * 7, "currency": "EUR", "lines": [i, i + 1]}})
        signed = f"msg_{i}.{1_700_000_000 + i}.".encode() + body
        mac = base64.b64encode(hmac.new(_KEY, signed, hashlib.sha256).digest())
        acc += len(orjson.loads(body)["event_id"]) + mac[0]
    return acc


class Loopback:
    """A TCP connection to itself on 127.0.0.1 (both ends here): what the loopback unit
    exchanges its messages over. Nagle off on both ends, as an HTTP client and server
    set it."""

    def __init__(self) -> None:
        with socket.create_server(("127.0.0.1", 0)) as listener:
            self.client = socket.create_connection(listener.getsockname())
            self.server, _ = listener.accept()
        for end in (self.client, self.server):
            end.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def round_trips(self, n: int = LOOPBACK_ROUND_TRIPS) -> int:
        """``n`` exchanges; returns the bytes received (so none is skipped)."""
        got_total = 0
        for _ in range(n):
            self.client.sendall(_REQUEST)
            got_total += _receive(self.server, len(_REQUEST))
            self.server.sendall(_RESPONSE)
            got_total += _receive(self.client, len(_RESPONSE))
        return got_total

    def close(self) -> None:
        self.client.close()
        self.server.close()


def _receive(end: socket.socket, size: int) -> int:
    got = 0
    while got < size:
        chunk = end.recv(65_536)
        if not chunk:
            raise ConnectionError("the loopback connection closed mid-exchange")
        got += len(chunk)
    return got


def measure_loopback(repetitions: int = REPETITIONS) -> float:
    """Milliseconds of CPU (this thread's, user and system) per loopback unit now."""
    pair = Loopback()
    try:
        return measure(repetitions, clock=time.thread_time, work=pair.round_trips)
    finally:
        pair.close()


def median_ms(timings_s: list[float]) -> float:
    """The yardstick's figure: the median repetition, in milliseconds per unit."""
    if not timings_s:
        raise ValueError("no repetitions timed")
    return round(1000 * statistics.median(timings_s), 2)


def measure(repetitions: int = REPETITIONS,
            clock: Callable[[], float] = time.process_time,
            work: Callable[[], object] = unit) -> float:
    """Milliseconds of CPU per unit on this core now (lower is faster). A first, untimed
    unit warms the caches and the allocator."""
    work()
    timings = []
    for _ in range(repetitions):
        t0 = clock()
        work()
        timings.append(clock() - t0)
    return median_ms(timings)


def spread(samples_ms: list[float]) -> dict[str, float | int]:
    """Median and 10th/90th percentiles of sampled ms per unit (empty: no samples)."""
    if not samples_ms:
        return {"samples": 0}
    if len(samples_ms) == 1:
        only = round(samples_ms[0], 2)
        return {"samples": 1, "p10": only, "p50": only, "p90": only}
    deciles = statistics.quantiles(samples_ms, n=10, method="inclusive")
    return {"samples": len(samples_ms), "p10": round(deciles[0], 2),
            "p50": round(statistics.median(samples_ms), 2), "p90": round(deciles[-1], 2)}


class Sampler(threading.Thread):
    """Times a piece of each unit every ``every_s`` in this thread's own CPU time (other
    threads of the process and the GIL do not count), until stopped."""

    def __init__(self, every_s: float = SAMPLE_EVERY_S, events: int = PIECE_EVENTS,
                 round_trips: int = LOOPBACK_PIECE):
        super().__init__(name="host-speed", daemon=True)
        self._every_s, self._events, self._round_trips = every_s, events, round_trips
        self._stop_event = threading.Event()
        self.samples_ms: list[float] = []
        self.loopback_samples_ms: list[float] = []

    def run(self) -> None:
        scale = UNIT_EVENTS / self._events
        loopback_scale = LOOPBACK_ROUND_TRIPS / self._round_trips
        pair = Loopback()
        try:
            while not self._stop_event.wait(self._every_s):
                t0 = time.thread_time()
                unit(self._events)
                t1 = time.thread_time()
                pair.round_trips(self._round_trips)
                t2 = time.thread_time()
                self.samples_ms.append(1000 * (t1 - t0) * scale)
                self.loopback_samples_ms.append(1000 * (t2 - t1) * loopback_scale)
        finally:
            pair.close()

    def stop(self) -> dict[str, float | int]:
        """Stops sampling; the CPU unit's spread (``loopback_spread`` has the other)."""
        self._stop_event.set()
        self.join(5)
        return spread(self.samples_ms)

    def loopback_spread(self) -> dict[str, float | int]:
        return spread(self.loopback_samples_ms)


def in_units(cpu_ms_per_delivery: float, unit_ms: float) -> float:
    """CPU per delivery as a fraction of one yardstick unit: comparable across hosts of
    different speed, as far as the work resembles the unit's."""
    if unit_ms <= 0:
        raise ValueError(f"yardstick unit must take time, got {unit_ms} ms")
    return round(cpu_ms_per_delivery / unit_ms, 5)


if __name__ == "__main__":
    sampler = Sampler()
    sampler.start()
    time.sleep(10)
    s = sampler.stop()
    print(f"host speed yardstick: {measure()} ms CPU per unit ({UNIT_EVENTS:,} signed bodies)"
          f" back to back; sampled over 10 s: p10 / p50 / p90 {s.get('p10')} / {s.get('p50')}"
          f" / {s.get('p90')} ms")
    lo = sampler.loopback_spread()
    print(f"loopback yardstick: {measure_loopback()} ms CPU per unit"
          f" ({LOOPBACK_ROUND_TRIPS:,} TCP round trips on 127.0.0.1) back to back; sampled"
          f" over 10 s: p10 / p50 / p90 {lo.get('p10')} / {lo.get('p50')} / {lo.get('p90')} ms")
