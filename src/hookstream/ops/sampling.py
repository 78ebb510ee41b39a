"""Slow measurements taken on a background thread, so a scrape only reads memory.

A Prometheus scrape must never wait on Kafka or PostgreSQL: a broker that hangs would
otherwise turn into a scrape timeout, ``up == 0``, and the one dashboard that should
explain the outage would go blank. A :class:`BackgroundSampler` calls its ``sample``
function every ``interval_s`` and keeps the latest result; its collector turns that
result into metric families at scrape time, and drops it once it is older than
``max_age_s`` (a value frozen at the last success is worse than no value: it looks
healthy). How the sampler itself is doing is exported under the ``sampler`` label.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class Sample(Generic[T]):
    value: T
    taken_at: float  # epoch seconds, when the sample was finished


class BackgroundSampler(Generic[T]):
    """Runs ``sample()`` every ``interval_s`` on a daemon thread; keeps the latest result."""

    def __init__(self, name: str, sample: Callable[[], T], *, interval_s: float,
                 max_age_s: float | None = None, close: Callable[[], None] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be > 0")
        self.name = name
        self.interval_s = interval_s
        # Three missed rounds (and never less than a minute) before the data counts as stale.
        self.max_age_s = max_age_s if max_age_s is not None else max(60.0, 3 * interval_s)
        self._sample = sample
        self._close = close
        self._clock = clock
        self._latest: Sample[T] | None = None
        self._errors = 0
        self._last_duration_s = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the measuring side ---------------------------------------------------------
    def run_once(self) -> bool:
        """Take one sample now (the thread's body; tests call it directly)."""
        started = time.monotonic()
        try:
            value = self._sample()
        except Exception as exc:
            # Anything a driver throws must not kill the thread: the next round may work,
            # and the error counter plus the ageing timestamp tell the operator meanwhile.
            self._errors += 1
            log.warning("sampling failed", extra={"sampler": self.name, "error": str(exc)})
            return False
        finally:
            self._last_duration_s = time.monotonic() - started
        self._latest = Sample(value, self._clock())
        return True

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.run_once()
            self._stop.wait(self.interval_s)

    def start(self) -> BackgroundSampler[T]:
        self._thread = threading.Thread(target=self._loop, name=f"sampler-{self.name}",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        if self._close is not None and (self._thread is None or not self._thread.is_alive()):
            self._close()

    # -- the scraping side: memory only -----------------------------------------------
    @property
    def latest(self) -> Sample[T] | None:
        return self._latest

    @property
    def errors(self) -> int:
        return self._errors

    @property
    def last_duration_s(self) -> float:
        return self._last_duration_s

    def fresh(self) -> T | None:
        latest = self._latest  # one read: the thread may replace it meanwhile
        if latest is None or self._clock() - latest.taken_at > self.max_age_s:
            return None
        return latest.value


class SamplerHealth(Collector):
    """How every sampler of a process is doing, one series per sampler (one collector per
    registry: a metric family may appear only once in an exposition)."""

    def __init__(self, samplers: Iterable[BackgroundSampler[Any]]) -> None:
        self.samplers = list(samplers)

    def collect(self) -> Iterator[Metric]:
        last = GaugeMetricFamily(
            "hookstream_sampler_last_success_timestamp_seconds",
            "When the background sampler last finished a sample", labels=["sampler"])
        duration = GaugeMetricFamily(
            "hookstream_sampler_duration_seconds", "How long the last sampling round took",
            labels=["sampler"])
        errors = CounterMetricFamily(
            "hookstream_sampler_errors", "Sampling rounds that failed", labels=["sampler"])
        for s in self.samplers:
            latest = s.latest
            last.add_metric([s.name], latest.taken_at if latest else 0.0)
            duration.add_metric([s.name], s.last_duration_s)
            errors.add_metric([s.name], float(s.errors))
        yield from (last, duration, errors)


class SampledCollector(Collector, Generic[T]):
    """A Prometheus collector over a sampler: ``families`` renders a fresh sample."""

    def __init__(self, sampler: BackgroundSampler[T],
                 families: Callable[[T, float], Iterable[Metric]],
                 clock: Callable[[], float] = time.time) -> None:
        self.sampler = sampler
        self._families = families
        self._clock = clock

    def collect(self) -> Iterator[Metric]:
        value = self.sampler.fresh()
        if value is not None:
            yield from self._families(value, self._clock())

    def describe(self) -> Iterator[Metric]:
        # Without describe() the registry would call collect() at registration time
        # to learn the names; that is harmless here but empty before the first sample.
        return iter(())
