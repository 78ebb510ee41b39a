"""The shared entry point of the three services: settings, logging, /metrics, signals."""

from __future__ import annotations

import gc
import logging
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any, Protocol, TypeVar, runtime_checkable

from prometheus_client import CollectorRegistry

from hookstream.core.settings import CommonSettings, SettingsError, from_env
from hookstream.core.topics import Topics
from hookstream.ops.db_metrics import delivery_stats_collector
from hookstream.ops.lag import LagSnapshot, consumer_lag_collector
from hookstream.ops.observability import ServiceHTTP, setup_logging
from hookstream.ops.sampling import BackgroundSampler, Sample, SampledCollector, SamplerHealth
from hookstream.ops.stack_dump import install as install_stack_dump


class Service(Protocol):
    stop: threading.Event
    healthy: bool
    last_error: str | None

    def run(self) -> None: ...


@runtime_checkable
class WatchesLag(Protocol):
    """A service that adapts to the pipeline's consumer lag (the fanout's batching):
    handed the lag sampler this process runs anyway, instead of sampling its own."""

    def watch_lag(self, latest: Callable[[], Sample[LagSnapshot] | None]) -> None: ...


S = TypeVar("S", bound=CommonSettings)


def run_service(
    name: str,
    settings_cls: type[S],
    build: Callable[[S, CollectorRegistry], Service],
    http_port: Callable[[S], int],
    *,
    delivery_stats: bool = False,
    preflight: Callable[[S], str | None] | None = None,
) -> int:
    """Every service exports the lag of every consumer group of the pipeline
    (``pipeline_groups``), not only its own, so a group's lag stays visible while its
    consumer is down; ``delivery_stats``: export the platform-wide gauges read from
    PostgreSQL (one service does it, see hookstream.ops.db_metrics); ``preflight``: a
    check that returns why the service must not start (one line, exit 2), or None."""
    try:
        settings = from_env(settings_cls)
    except SettingsError as exc:
        print(f"hookstream {name}: configuration error: {exc}", flush=True)
        return 2
    setup_logging(settings.log_level, settings.log_format, name)
    log = logging.getLogger(f"hookstream.{name}")
    if preflight is not None and (refusal := preflight(settings)) is not None:
        print(refusal, flush=True)
        return 2
    registry = CollectorRegistry()
    built: list[Service] = []

    # The pid tells whoever asks which process answered: the harness, which cannot reserve
    # the port it picks, must not take another process's answer on it for this one's.
    pid = os.getpid()

    def health() -> tuple[bool, dict[str, Any]]:
        if not built:
            return False, {"service": name, "pid": pid, "last_error": "starting"}
        return built[0].healthy, {"service": name, "pid": pid,
                                  "last_error": built[0].last_error}

    # The port first: a port already taken is one line and exit 2 before anything starts
    # (it was an OSError traceback after the service had connected everywhere).
    try:
        http = ServiceHTTP(settings.http_host, http_port(settings), registry, health)
    except OSError as exc:
        print(f"hookstream {name}: cannot listen on {settings.http_host}:{http_port(settings)}"
              f" for /metrics and /healthz ({exc.strerror or exc}); stop what uses it or set "
              f"{_port_variable(settings_cls)}", flush=True)
        return 2
    samplers = _observers(settings, registry, delivery_stats)
    service = build(settings, registry)
    if isinstance(service, WatchesLag):
        lag_sampler = samplers[0]  # the consumer-lag sampler comes first
        service.watch_lag(lambda: lag_sampler.latest)
    built.append(service)
    http.start()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("stopping", extra={"signal": signum})
        service.stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    install_stack_dump()  # SIGUSR1: every thread's stack and the loop's tasks, to the log
    tune_gc(settings.gc_gen0_threshold)
    log.info(f"{name} started", extra={"http_port": http.port})
    try:
        service.run()
    finally:
        http.stop()
        for sampler in samplers:
            sampler.stop()
    log.info(f"{name} stopped")
    return 0


def _port_variable(settings_cls: type) -> str:
    import dataclasses

    return next((f.metadata["env"] for f in dataclasses.fields(settings_cls)
                 if f.name == "http_port"), "its HTTP port setting")


def tune_gc(gen0_threshold: int) -> None:
    """The services allocate many short-lived objects per message and keep few: with
    Python's default young-generation threshold (700) the cyclic collector runs every few
    requests and re-walks the start-up heap on every older-generation pass. Everything
    alive now (modules, settings, clients) is frozen out of collection, and the young
    generation is collected every ``gen0_threshold`` allocations instead. Reference
    counting still frees almost everything at once; only cycles wait a little longer."""
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(gen0_threshold, gen1, gen2)


def pipeline_groups(settings: CommonSettings) -> dict[str, list[str]]:
    """Each consumer group the pipeline runs → the topics it consumes."""
    topics = Topics(settings.topic_prefix)
    return {settings.fanout_group_id: [topics.events],
            settings.dispatcher_group_id: [topics.deliveries],
            f"{settings.dispatcher_group_id}-delay": topics.tiers.topics}


def _observers(settings: S, registry: CollectorRegistry,
               delivery_stats: bool) -> list[BackgroundSampler[Any]]:
    tiers = Topics(settings.topic_prefix).tiers
    collectors: list[SampledCollector[Any]] = [consumer_lag_collector(
        settings.kafka_bootstrap, pipeline_groups(settings),
        interval_s=settings.lag_sample_interval_s,
        holds=dict(zip(tiers.topics, tiers.delays_s, strict=True)))]
    if delivery_stats:
        collectors.append(delivery_stats_collector(
            settings.database_url, interval_s=settings.db_metrics_interval_s,
            top_n=settings.db_metrics_top_endpoints, window_s=settings.db_metrics_window_s))
    for collector in collectors:
        registry.register(collector)
    samplers = [c.sampler for c in collectors]
    if samplers:
        registry.register(SamplerHealth(samplers))
    for sampler in samplers:
        sampler.start()
    return samplers
