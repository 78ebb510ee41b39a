"""One frozen settings object per service, read from the environment once in ``main``.

Every variable is declared with its type, default and meaning in one place so a
bad value fails at start-up naming the variable, and so the compose-file test
can check that every ``HOOKSTREAM_*`` name the deployment sets is one the code
actually reads (``ALL_SETTINGS``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")

PREFIX = "HOOKSTREAM_"


class SettingsError(ValueError):
    """A configuration value is missing or malformed; the message names the variable."""


def _parse_bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off", ""}:
        return False
    raise ValueError(f"expected a boolean (true/false), got {raw!r}")


def _positive(cast: Callable[[str], T]) -> Callable[[str], T]:
    def parse(raw: str) -> T:
        value = cast(raw)
        if value <= 0:  # type: ignore[operator]
            raise ValueError(f"must be > 0, got {raw!r}")
        return value

    return parse


def _non_negative(cast: Callable[[str], T]) -> Callable[[str], T]:
    def parse(raw: str) -> T:
        value = cast(raw)
        if value < 0:  # type: ignore[operator]
            raise ValueError(f"must be >= 0, got {raw!r}")
        return value

    return parse


def _one_of(*choices: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        value = raw.strip().lower()
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {raw!r}")
        return value

    return parse


def env_field(name: str, default: Any, cast: Callable[[str], Any] = str, doc: str = "") -> Any:
    """A dataclass field bound to ``HOOKSTREAM_<name>``."""
    return field(default=default, metadata={"env": PREFIX + name, "cast": cast, "doc": doc})


S = TypeVar("S")


def from_env(cls: type[S], environ: Mapping[str, str] | None = None) -> S:
    """Build a settings dataclass from the environment, naming the variable on failure."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        var = f.metadata.get("env")
        if var is None or var not in env:
            continue
        raw = env[var]
        try:
            values[f.name] = f.metadata["cast"](raw)
        except (ValueError, TypeError) as exc:
            raise SettingsError(f"{var}={raw!r} is invalid: {exc}") from None
    try:
        return cls(**values)
    except ValueError as exc:
        raise SettingsError(str(exc)) from None


def env_names(cls: type) -> set[str]:
    return {f.metadata["env"] for f in dataclasses.fields(cls) if "env" in f.metadata}


pos_int = _positive(int)
pos_float = _positive(float)
nonneg_int = _non_negative(int)
nonneg_float = _non_negative(float)


@dataclass(frozen=True)
class CommonSettings:
    database_url: str = env_field(
        "DATABASE_URL", "postgresql://hookstream@127.0.0.1:55432/hookstream", doc="PostgreSQL DSN"
    )
    kafka_bootstrap: str = env_field(
        "KAFKA_BOOTSTRAP", "127.0.0.1:19092", doc="Kafka bootstrap servers"
    )
    topic_prefix: str = env_field(
        "TOPIC_PREFIX", "hookstream", doc="prefix of every topic (tests isolate with it)"
    )
    http_host: str = env_field("HTTP_HOST", "127.0.0.1", doc="address of /metrics and /healthz")
    log_level: str = env_field("LOG_LEVEL", "INFO")
    log_format: str = env_field("LOG_FORMAT", "json", doc="json or text")
    # Observability (hookstream.lag, hookstream.db_metrics): sampled in the background,
    # a scrape only reads the last sample.
    lag_sample_interval_s: float = env_field(
        "LAG_SAMPLE_INTERVAL_S", 5.0, pos_float, "how often consumer lag is read from Kafka")
    db_metrics_interval_s: float = env_field(
        "DB_METRICS_INTERVAL_S", 15.0, pos_float, "how often delivery gauges are read from SQL")
    db_metrics_top_endpoints: int = env_field(
        "DB_METRICS_TOP_ENDPOINTS", 10, pos_int,
        "only this many worst endpoints get an `endpoint` label")
    db_metrics_window_s: float = env_field(
        "DB_METRICS_WINDOW_S", 900.0, pos_float, "window of retry amplification and replays")
    gc_gen0_threshold: int = env_field(
        "GC_GEN0_THRESHOLD", 50_000, pos_int,
        "allocations between young-generation collections (Python's default 700 made the "
        "collector ~15 % of the dispatcher's CPU per attempt; BENCHMARKS.md)")

    def __post_init__(self) -> None:
        if self.log_format not in {"json", "text"}:
            raise ValueError(f"HOOKSTREAM_LOG_FORMAT must be json or text, got {self.log_format!r}")
        if not self.topic_prefix or any(c in self.topic_prefix for c in " /\\"):
            raise ValueError(
                f"HOOKSTREAM_TOPIC_PREFIX is not a valid topic prefix: {self.topic_prefix!r}")


@dataclass(frozen=True)
class RelaySettings(CommonSettings):
    http_port: int = env_field("RELAY_HTTP_PORT", 9101, pos_int)
    batch_size: int = env_field("RELAY_BATCH_SIZE", 500, pos_int, "outbox rows per publish round")
    poll_interval_s: float = env_field(
        "RELAY_POLL_INTERVAL_S", 1.0, pos_float, "fallback poll when no NOTIFY arrives"
    )
    max_payload_bytes: int = env_field(
        "RELAY_MAX_PAYLOAD_BYTES", 900_000, pos_int, "larger payloads are quarantined"
    )
    lanes: int = env_field(
        "RELAY_LANES", 2, pos_int,
        "publish rounds in flight at once (one connection each): one round locks and "
        "produces its rows while another waits for its acknowledgements",
    )
    ack_timeout_s: float = env_field(
        "RELAY_ACK_TIMEOUT_S", 30.0, pos_float,
        "a record not acknowledged within this is failed and republished by a later round",
    )
    max_backoff_s: float = env_field(
        "RELAY_MAX_BACKOFF_S", 5.0, pos_float, "cap of the reconnect backoff (broker or database)"
    )
    retention_s: float = env_field(
        "RELAY_RETENTION_S", 3 * 86_400.0, nonneg_float,
        "published rows are deleted from the outbox this long after publication",
    )
    purge_batch_size: int = env_field(
        "RELAY_PURGE_BATCH_SIZE", 5_000, pos_int, "rows per DELETE (short locks, short WAL bursts)"
    )
    purge_interval_s: float = env_field(
        "RELAY_PURGE_INTERVAL_S", 60.0, pos_float, "how often published rows are purged"
    )


@dataclass(frozen=True)
class FanoutSettings(CommonSettings):
    http_port: int = env_field("FANOUT_HTTP_PORT", 9102, pos_int)
    group_id: str = env_field("FANOUT_GROUP_ID", "hookstream-fanout")
    batch_size: int = env_field("FANOUT_BATCH_SIZE", 500, pos_int, "events consumed per round")
    retry_window_s: float = env_field("RETRY_WINDOW_S", 86_400.0, pos_float)
    max_rows_per_statement: int = env_field(
        "FANOUT_MAX_ROWS_PER_STATEMENT", 5_000, pos_int,
        "delivery rows created (and held in memory) per statement; a larger fan-out is "
        "split into endpoint id ranges",
    )
    max_backoff_s: float = env_field(
        "FANOUT_MAX_BACKOFF_S", 5.0, pos_float, "cap of the reconnect backoff (broker or database)"
    )


@dataclass(frozen=True)
class DispatcherSettings(CommonSettings):
    http_port: int = env_field("DISPATCHER_HTTP_PORT", 9103, pos_int)
    group_id: str = env_field("DISPATCHER_GROUP_ID", "hookstream-dispatcher")
    request_timeout_s: float = env_field(
        "REQUEST_TIMEOUT_S", 5.0, pos_float, "whole-call deadline: DNS, connect, TLS, headers"
    )
    response_body_cap_bytes: int = env_field("RESPONSE_BODY_CAP_BYTES", 1024, nonneg_int)
    max_in_flight: int = env_field(
        "DISPATCHER_MAX_IN_FLIGHT", 512, pos_int, "process-wide cap of concurrent attempts"
    )
    lease_s: float = env_field("LEASE_S", 60.0, pos_float, "claim lease of one attempt")
    allow_private_targets: bool = env_field(
        "ALLOW_PRIVATE_TARGETS",
        False,
        _parse_bool,
        "development only: allow http:// and loopback/private receivers",
    )
    user_agent: str = env_field("USER_AGENT", "hookstream/0.1")
    max_queued: int = env_field(
        "DISPATCHER_MAX_QUEUED", 20_000, pos_int,
        "tasks held in memory; past it the dispatcher stops reading until work drains")
    backlog_horizon_s: float = env_field(
        "BACKLOG_HORIZON_S", 5.0, pos_float,
        "an endpoint keeps in memory what it can drain in this time; the rest is deferred")
    tenant_max_in_flight: int = env_field("TENANT_MAX_IN_FLIGHT", 64, pos_int)
    tenant_rate_per_s: float = env_field("TENANT_RATE_PER_S", 2_000.0, pos_float)
    tenant_burst: int = env_field("TENANT_BURST", 4_000, pos_int)
    retry_base_s: float = env_field("RETRY_BASE_S", 30.0, pos_float, "first retry delay")
    retry_cap_s: float = env_field("RETRY_CAP_S", 6 * 3600.0, pos_float, "longest retry delay")
    retry_floor_s: float = env_field(
        "RETRY_FLOOR_S", 5.0, pos_float, "no retry sooner than this: never immediate")
    retry_jitter: float = env_field("RETRY_JITTER", 0.5, nonneg_float)
    retry_window_s: float = env_field("RETRY_WINDOW_S", 86_400.0, pos_float)
    max_attempts: int = env_field("MAX_ATTEMPTS", 15, pos_int)
    circuit_failure_threshold: int = env_field("CIRCUIT_FAILURE_THRESHOLD", 5, pos_int)
    circuit_base_pause_s: float = env_field("CIRCUIT_BASE_PAUSE_S", 30.0, pos_float)
    circuit_max_pause_s: float = env_field("CIRCUIT_MAX_PAUSE_S", 3600.0, pos_float)
    disable_after_s: float = env_field(
        "DISABLE_AFTER_S", 3 * 86_400.0, pos_float,
        "an endpoint failing continuously this long is disabled and its owner told")
    paused_recheck_s: float = env_field(
        "PAUSED_RECHECK_S", 300.0, pos_float,
        "a paused endpoint's tasks wait in the delay tiers and are looked at again this often")
    endpoint_refresh_s: float = env_field(
        "ENDPOINT_REFRESH_S", 5.0, pos_float, "how often endpoint settings are re-read")
    event_loop: str = env_field(
        "DISPATCHER_EVENT_LOOP", "uvloop", _one_of("uvloop", "asyncio"),
        "uvloop (libuv: fewer CPU cycles per HTTP attempt) or asyncio's own loop")


@dataclass(frozen=True)
class ApiSettings(CommonSettings):
    """The control-plane HTTP API (hookstream.api), served inside the fanout process."""

    api_enabled: bool = env_field(
        "API_ENABLED", True, _parse_bool, "serve the control-plane API from the fanout process")
    api_host: str = env_field("API_HOST", "127.0.0.1", doc="address the API listens on")
    api_port: int = env_field("API_PORT", 8080, nonneg_int, "port of the API (0: any free port)")
    allow_private_targets: bool = env_field(
        "ALLOW_PRIVATE_TARGETS", False, _parse_bool,
        "development only: accept http:// and loopback/private endpoint URLs")
    history_days: int = env_field(
        "HISTORY_DAYS", 30, pos_int, "how far back events and deliveries can be queried")
    secret_overlap_s: float = env_field(
        "SECRET_OVERLAP_S", 86_400.0, nonneg_float,
        "default time a rotated-out signing secret stays valid")
    operation_batch_size: int = env_field(
        "API_OPERATION_BATCH_SIZE", 500, pos_int, "deliveries per batch of a bulk replay")
    operation_lease_s: float = env_field(
        "API_OPERATION_LEASE_S", 30.0, pos_float,
        "an operation whose worker is silent this long is resumed by another instance")
    db_pool_size: int = env_field("API_DB_POOL_SIZE", 4, pos_int)
    max_import_items: int = env_field("API_MAX_IMPORT_ITEMS", 1000, pos_int)


ALL_SETTINGS: tuple[type, ...] = (RelaySettings, FanoutSettings, DispatcherSettings, ApiSettings)


def all_env_names() -> set[str]:
    names: set[str] = set()
    for cls in ALL_SETTINGS:
        names |= env_names(cls)
    return names
