"""One frozen settings object per service, read from the environment once in ``main``.

Every variable is declared with its type, default and meaning in one place so a
bad value fails at start-up naming the variable, and so the compose-file test
can check that every ``HOOKSTREAM_*`` name the deployment sets is one the code
actually reads (``ALL_SETTINGS``). ``from_env`` also refuses a ``HOOKSTREAM_*``
variable that no part of hookstream reads: a misspelt name would otherwise be
ignored and its default used without a word.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from hookstream.core.group import PROTOCOLS, Membership
from hookstream.core.secretbox import Keyring, parse_keyring
from hookstream.policy.retention import MIN_HISTORY_DAYS

T = TypeVar("T")

PREFIX = "HOOKSTREAM_"
MAX_PORT = 65_535

# The claim lease must outlive the whole attempt it covers: the HTTP call (at most
# HOOKSTREAM_REQUEST_TIMEOUT_S) plus the write of its outcome, which waits for the batch
# ahead of it, flushes any retry or dead-letter record to Kafka and then runs one
# statement. A lease that expires first lets the reaper hand the delivery back while
# its request is still in flight, and the receiver gets the same webhook twice although
# nothing failed. 10 s leaves room for a slow broker acknowledgement and a busy database.
LEASE_MARGIN_S = 10.0

# HOOKSTREAM_* variables read outside the settings classes. The services, the CLI and
# the local stack share one environment file, so the unknown-variable check accepts
# these too; tests/unit/test_settings.py greps the tree so that a newly read variable
# missing here fails the tests instead of being refused at start-up.
OTHER_ENV_NAMES: frozenset[str] = frozenset({
    "HOOKSTREAM_REPO_ROOT",  # hookstream.dev.localstack.paths: the repository root
    "HOOKSTREAM_STACK_DIR",  # localstack.paths, demo, benchmarks: the local stack's folder
    "HOOKSTREAM_TEST_WORKERS",  # Makefile, scripts/test.sh: the main lane's pytest-xdist workers
    "HOOKSTREAM_STACK_KAFKA_PORT",  # localstack.kafka: the broker's port
    "HOOKSTREAM_STACK_KAFKA_CONTROLLER_PORT",  # localstack.kafka: the controller's port
    "HOOKSTREAM_STACK_PG_PORT",  # localstack.postgres: the server's port
    "HOOKSTREAM_PG_BINDIR",  # localstack.postgres: where initdb and pg_ctl are
    "HOOKSTREAM_EXTERNAL_DATABASE_URL",  # localstack.postgres: use this server, start none
    "HOOKSTREAM_BENCH_PROFILE",  # benchmarks/dispatcher.py: attach py-spy
    "HOOKSTREAM_CONTAINERS_CACHE",  # scripts/container_standins.sh: the rootfs cache
    "HOOKSTREAM_DEMO_PG_PORT",  # scripts/containers.sh: the demo's PostgreSQL on the host
    # tests/e2e/fakedns: a test-only resolver override loaded into the dispatcher process
    # by the SSRF test (names → loopback, without touching the machine's resolver).
    "HOOKSTREAM_TEST_DNS",
})


class SettingsError(ValueError):
    """A configuration value is missing or malformed; the message names the variable."""


def _parse_bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off", ""}:
        return False
    raise ValueError(f"expected a boolean (true/false), got {raw!r}")


def _finite(raw: str) -> float:
    """float() also accepts nan, inf and literals that overflow to inf (1e999). A nan
    duration fails every comparison (a nan deadline fails every attempt), an infinite
    one is no limit at all (an infinite deadline is none): neither is a setting."""
    value = float(raw)
    if not math.isfinite(value):
        raise ValueError(f"must be a finite number, got {raw!r}")
    return value


def _port(minimum: int) -> Callable[[str], int]:
    """A TCP port; refused here rather than as a traceback from bind() later."""

    def parse(raw: str) -> int:
        value = int(raw)
        if not minimum <= value <= MAX_PORT:
            raise ValueError(f"must be a port in {minimum}..{MAX_PORT}, got {raw!r}")
        return value

    return parse


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


def env_field(name: str, default: Any, cast: Callable[[str], Any] = str, doc: str = "",
              *, secret: bool = False) -> Any:
    """A dataclass field bound to ``HOOKSTREAM_<name>``; a ``secret`` one's value is never
    echoed in an error."""
    return field(default=default, metadata={"env": PREFIX + name, "cast": cast, "doc": doc,
                                            "secret": secret})


S = TypeVar("S")


def from_env(cls: type[S], environ: Mapping[str, str] | None = None) -> S:
    """Build a settings dataclass from the environment, naming the variable on failure.

    The whole environment is checked, not only ``cls``'s variables: every entry point
    builds its settings here, so each refuses a misspelt name at start-up."""
    env = os.environ if environ is None else environ
    check_environment(env)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        var = f.metadata.get("env")
        if var is None or var not in env:
            continue
        raw = env[var]
        try:
            values[f.name] = f.metadata["cast"](raw)
        except (ValueError, TypeError) as exc:
            shown = "<hidden>" if f.metadata.get("secret") else repr(raw)
            raise SettingsError(f"{var}={shown} is invalid: {exc}") from None
    try:
        return cls(**values)
    except ValueError as exc:
        raise SettingsError(str(exc)) from None


def check_environment(environ: Mapping[str, str] | None = None) -> None:
    """Refuse ``HOOKSTREAM_*`` variables nothing reads, suggesting the nearest name."""
    env = os.environ if environ is None else environ
    known = known_env_names()
    unknown = sorted(name for name in env if name.startswith(PREFIX) and name not in known)
    if unknown:
        # One line for all of them: the operator fixes the file once, not once per restart.
        raise SettingsError(" | ".join(_unknown_message(n, env[n], known) for n in unknown))


def _unknown_message(name: str, raw: str, known: set[str]) -> str:
    # The value is left out: a misspelt database URL variable would print its password.
    del raw
    message = f"{name} is not a hookstream setting"
    # Compared without the prefix every name shares, which would make any two look alike.
    nearest = difflib.get_close_matches(
        name.removeprefix(PREFIX), sorted(k.removeprefix(PREFIX) for k in known), n=1)
    return f"{message}; did you mean {PREFIX}{nearest[0]}?" if nearest else message


def env_names(cls: type) -> set[str]:
    return {f.metadata["env"] for f in dataclasses.fields(cls) if "env" in f.metadata}


def _origin(raw: str) -> str:
    """scheme://host[:port], nothing else: the value goes into a Content-Security-Policy
    header, where a quote, semicolon or path would change the policy."""
    if not re.fullmatch(r"https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?", raw):
        raise ValueError(f"expected an origin like https://app.example.com, got {raw!r}")
    return raw.lower()


def origin_list(raw: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(_origin(part) for part in raw.replace(",", " ").split()))


def origin_or_empty(raw: str) -> str:
    return "" if not raw.strip() else _origin(raw.strip().rstrip("/"))


def http_url_or_empty(raw: str) -> str:
    """An http(s) URL that may carry a path (a Grafana behind a path prefix)."""
    value = raw.strip().rstrip("/")
    if value and not re.fullmatch(r"https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[\w.~%/-]*)?",
                                  value):
        raise ValueError(f"expected an http(s) URL, got {raw!r}")
    return value


pos_int = _positive(int)
pos_float = _positive(_finite)
nonneg_int = _non_negative(int)
nonneg_float = _non_negative(_finite)
tcp_port = _port(1)
tcp_port_or_any = _port(0)  # 0: the OS picks a free port


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
    # Every service exports every group's lag (hookstream.ops.lag), so all of them read the
    # group ids: lag stays visible while the group's own consumer is down.
    fanout_group_id: str = env_field("FANOUT_GROUP_ID", "hookstream-fanout",
                                     doc="consumer group of the fanout")
    dispatcher_group_id: str = env_field(
        "DISPATCHER_GROUP_ID", "hookstream-dispatcher",
        doc="consumer group of the dispatcher (its delay forwarder's is this + '-delay')")
    # Group membership (issue #16, hookstream.core.group): how fast a dead member's
    # partitions are taken over. Under the consumer protocol the broker keeps the
    # timeouts as the group's configuration (`hookstream topics` sets them; the broker
    # refuses values below its group.consumer.min.session.timeout.ms, 45 s by default).
    kafka_group_protocol: str = env_field(
        "KAFKA_GROUP_PROTOCOL", "consumer", _one_of(*PROTOCOLS),
        "consumer (KIP-848, Kafka 4) or classic (the join/sync protocol)")
    kafka_session_timeout_ms: int = env_field(
        "KAFKA_SESSION_TIMEOUT_MS", 3_000, pos_int,
        "a member silent this long loses its partitions (the takeover time after a kill)")
    kafka_heartbeat_interval_ms: int = env_field(
        "KAFKA_HEARTBEAT_INTERVAL_MS", 500, pos_int, "how often members heartbeat")
    http_host: str = env_field("HTTP_HOST", "127.0.0.1", doc="address of /metrics and /healthz")
    # Read by the API (how far back it lists) and by the relay's history maintenance
    # (hookstream.ops.retention), which drops whole days past it.
    history_days: int = env_field(
        "HISTORY_DAYS", 30, pos_int,
        "days of events, deliveries and attempts kept (whole days are dropped past it; "
        "at least 2: retries run for 24 h)")
    log_level: str = env_field("LOG_LEVEL", "INFO")
    log_format: str = env_field("LOG_FORMAT", "json", doc="json or text")
    # Observability (hookstream.ops.lag, hookstream.ops.db_metrics): sampled in the background,
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
    # Topic layout (issue #16). The defaults fit the single-broker local stack; a cluster
    # sets RF 3 / min ISR 2 so acks=all means "on two brokers" and one broker may be lost
    # without refusing writes. `hookstream topics` creates with these and refuses to call
    # an existing topic that differs "done".
    topic_partitions: int = env_field(
        "TOPIC_PARTITIONS", 6, pos_int,
        "partitions of the events, deliveries and delay-tier topics")
    topic_replication_factor: int = env_field(
        "TOPIC_REPLICATION_FACTOR", 1, pos_int, "replicas of every topic's partitions")
    topic_min_insync_replicas: int = env_field(
        "TOPIC_MIN_INSYNC_REPLICAS", 1, pos_int,
        "replicas that must have a record before acks=all acknowledges it")
    gc_gen0_threshold: int = env_field(
        "GC_GEN0_THRESHOLD", 50_000, pos_int,
        "allocations between young-generation collections (Python's default 700 made the "
        "collector ~15 % of the dispatcher's CPU per attempt; benchmarks/dispatcher.py)")

    @property
    def membership(self) -> Membership:
        return Membership(self.kafka_group_protocol, self.kafka_session_timeout_ms,
                          self.kafka_heartbeat_interval_ms)

    def __post_init__(self) -> None:
        self.membership  # noqa: B018 - validates the three together (raises ValueError)
        if self.history_days < MIN_HISTORY_DAYS:
            raise ValueError(
                f"HOOKSTREAM_HISTORY_DAYS must be at least {MIN_HISTORY_DAYS} (retries run for "
                f"24 h after an event's commit), not {self.history_days}")
        if self.topic_min_insync_replicas > self.topic_replication_factor:
            # Kafka accepts this and then refuses every acks=all write: fail at start instead.
            raise ValueError(
                "HOOKSTREAM_TOPIC_MIN_INSYNC_REPLICAS must not exceed "
                f"HOOKSTREAM_TOPIC_REPLICATION_FACTOR ({self.topic_min_insync_replicas} > "
                f"{self.topic_replication_factor}): no acks=all write could succeed")
        if self.log_format not in {"json", "text"}:
            raise ValueError(f"HOOKSTREAM_LOG_FORMAT must be json or text, got {self.log_format!r}")
        if not self.topic_prefix or any(c in self.topic_prefix for c in " /\\"):
            raise ValueError(
                f"HOOKSTREAM_TOPIC_PREFIX is not a valid topic prefix: {self.topic_prefix!r}")


@dataclass(frozen=True)
class RelaySettings(CommonSettings):
    http_port: int = env_field("RELAY_HTTP_PORT", 9101, tcp_port)
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
    history_maintain_interval_s: float = env_field(
        "HISTORY_MAINTAIN_INTERVAL_S", 600.0, pos_float,
        "how often the relay makes the history's day partitions ahead and drops expired days")
    history_days_ahead: int = env_field(
        "HISTORY_DAYS_AHEAD", 3, pos_int, "day partitions made ahead of today")


@dataclass(frozen=True)
class FanoutSettings(CommonSettings):
    http_port: int = env_field("FANOUT_HTTP_PORT", 9102, tcp_port)

    batch_size: int = env_field("FANOUT_BATCH_SIZE", 500, pos_int, "events consumed per round")
    batch_gather_s: float = env_field(
        "FANOUT_BATCH_GATHER_S", 0.0, nonneg_float,
        "once a round has events, wait at most this long for more (latency for fewer,"
        " larger database batches; 0, the default: take what is there — batches still"
        " grow with load, since what arrives while one is written forms the next)")
    max_gather_s: float = env_field(
        "FANOUT_MAX_GATHER_S", 0.5, nonneg_float,
        "cap of the wait for company while the dispatchers are seconds behind (5 % of the"
        " least-behind partition's lag: larger batches cost those deliveries nothing and"
        " spare the saturated machine round trips; 0: never wait for that reason)")
    gather_from_per_s: float = env_field(
        "FANOUT_GATHER_FROM_PER_S", 1_500.0, nonneg_float,
        "deliveries/s (this process's, over the last second) above which a started batch"
        " waits for company, up to FANOUT_LOAD_GATHER_S at twice this rate: fewer, larger"
        " batches make every hop downstream cheaper when the machine is loaded; below it"
        " latency is the sum of the hops. Set it near half of what one dispatcher of your"
        " machines sustains; 0: never wait for that reason")
    load_gather_s: float = env_field(
        "FANOUT_LOAD_GATHER_S", 0.1, nonneg_float,
        "cap of the wait for company at high load (see FANOUT_GATHER_FROM_PER_S): the"
        " latency at most added to the deliveries of a loaded fanout")
    commit_interval_s: float = env_field(
        "FANOUT_COMMIT_INTERVAL_S", 0.5, nonneg_float,
        "offsets of finished batches (rows committed, tasks acknowledged) are committed at"
        " most this often: a crash re-reads at most this much (its deliveries exist, their"
        " tasks claim nothing); 0: after every batch, a broker write per batch")
    retry_window_s: float = env_field("RETRY_WINDOW_S", 86_400.0, pos_float)
    audience_ttl_s: float = env_field(
        "FANOUT_AUDIENCE_TTL_S", 1.0, nonneg_float,
        "how long the endpoint count of a (tenant, type) is reused to plan statements (an"
        " endpoint added meanwhile is still reached, a statement may hold its rows beyond"
        " the cap below until then; one that reached nobody is always asked again;"
        " 0: ask every batch)")
    max_rows_per_statement: int = env_field(
        "FANOUT_MAX_ROWS_PER_STATEMENT", 5_000, pos_int,
        "delivery rows created (and held in memory) per statement; a larger fan-out is "
        "split into endpoint id ranges",
    )
    max_backoff_s: float = env_field(
        "FANOUT_MAX_BACKOFF_S", 5.0, pos_float, "cap of the reconnect backoff (broker or database)"
    )

    @property
    def group_id(self) -> str:
        return self.fanout_group_id


@dataclass(frozen=True)
class DispatcherSettings(CommonSettings):
    http_port: int = env_field("DISPATCHER_HTTP_PORT", 9103, tcp_port)

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
    secret_keys: Keyring = env_field(
        "SECRET_KEYS", Keyring(), parse_keyring,
        "keys sealing endpoint signing secrets at rest: id:base64(32 bytes)[,id:key...], "
        "the first seals, all open (required; `hookstream secrets new-key` makes one)",
        secret=True)
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
    sweep_after_s: float = env_field(
        "SWEEP_AFTER_S", 120.0, pos_float,
        "a pending delivery overdue by this much has lost its task: the sweeper re-queues it")
    sweep_interval_s: float = env_field(
        "SWEEP_INTERVAL_S", 5.0, pos_float,
        "how often the sweeper looks (also how soon a resumed endpoint's held work is sent)")
    sweep_batch: int = env_field(
        "SWEEP_BATCH", 1000, pos_int, "deliveries re-queued per sweep at most")
    endpoint_refresh_s: float = env_field(
        "ENDPOINT_REFRESH_S", 5.0, pos_float, "how often endpoint settings are re-read")
    event_loop: str = env_field(
        "DISPATCHER_EVENT_LOOP", "uvloop", _one_of("uvloop", "asyncio"),
        "uvloop (libuv: fewer CPU cycles per HTTP attempt) or asyncio's own loop")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.lease_s < self.request_timeout_s + LEASE_MARGIN_S:  # see LEASE_MARGIN_S
            raise ValueError(
                f"HOOKSTREAM_LEASE_S={self.lease_s:g} must be at least "
                f"HOOKSTREAM_REQUEST_TIMEOUT_S={self.request_timeout_s:g} + {LEASE_MARGIN_S:g} s: "
                "a shorter lease expires while its request is in flight and the webhook is "
                "sent twice")

    @property
    def group_id(self) -> str:
        return self.dispatcher_group_id


@dataclass(frozen=True)
class ApiSettings(CommonSettings):
    """The control-plane HTTP API (hookstream.api), served inside the fanout process."""

    api_enabled: bool = env_field(
        "API_ENABLED", True, _parse_bool, "serve the control-plane API from the fanout process")
    api_host: str = env_field("API_HOST", "127.0.0.1", doc="address the API listens on")
    api_port: int = env_field(
        "API_PORT", 8080, tcp_port_or_any, "port of the API (0: any free port)")
    allow_private_targets: bool = env_field(
        "ALLOW_PRIVATE_TARGETS", False, _parse_bool,
        "development only: accept http:// and loopback/private endpoint URLs")
    secret_keys: Keyring = env_field(
        "SECRET_KEYS", Keyring(), parse_keyring,
        "keys sealing endpoint signing secrets at rest: id:base64(32 bytes)[,id:key...], "
        "the first seals, all open (required; `hookstream secrets new-key` makes one)",
        secret=True)
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
    # The browser console (hookstream.api.console), served by the same app and port.
    console_enabled: bool = env_field(
        "CONSOLE_ENABLED", True, _parse_bool, "serve the browser console under /console")
    console_frame_ancestors: tuple[str, ...] = env_field(
        "CONSOLE_FRAME_ANCESTORS", (), origin_list,
        "origins allowed to embed the console in a frame (space-separated, e.g. "
        "https://app.example.com); none: framing refused")
    console_public_url: str = env_field(
        "CONSOLE_PUBLIC_URL", "", origin_or_empty,
        "scheme://host[:port] portal links start with (default: the request's own); "
        "https here also marks session cookies Secure")
    console_grafana_url: str = env_field(
        "CONSOLE_GRAFANA_URL", "", http_url_or_empty,
        "Grafana's base URL, for the operator console's dashboard links")
    console_session_ttl_s: float = env_field(
        "CONSOLE_SESSION_TTL_S", 12 * 3600.0, pos_float,
        "how long a console sign-in with an API key lasts")


@dataclass(frozen=True)
class ClientSettings:
    """The command line as a client of the control-plane API (``hookstream deliveries``,
    ``endpoints``, ``events`` ...). It reads no database or Kafka setting: a tenant's
    operator has a key and a URL, nothing else."""

    api_url: str = env_field(
        "API_URL", "http://127.0.0.1:8080",
        doc="where the control-plane API answers (the fanout's HOOKSTREAM_API_PORT)")
    api_key: str = env_field(
        "API_KEY", "", doc="an API key (hsk_...): a tenant's, or an operator's for every tenant")
    api_timeout_s: float = env_field(
        "API_TIMEOUT_S", 10.0, pos_float, "how long the command line waits for one API answer")

    def __repr__(self) -> str:  # never print the key
        return f"ClientSettings(api_url={self.api_url!r}, api_key=<{len(self.api_key)} chars>)"


ALL_SETTINGS: tuple[type, ...] = (RelaySettings, FanoutSettings, DispatcherSettings, ApiSettings,
                                  ClientSettings)


@dataclass(frozen=True)
class SettingDoc:
    env: str
    default: str
    doc: str


def describe(*classes: type) -> list[SettingDoc]:
    """Every variable the given settings classes read, with its default as one would
    write it in the environment (for ``--help``: generated, so it never drifts)."""
    seen: dict[str, SettingDoc] = {}
    for cls in classes:
        for f in dataclasses.fields(cls):
            var = f.metadata.get("env")
            if var is None or var in seen:
                continue
            seen[var] = SettingDoc(var, _as_env_text(f.default), f.metadata.get("doc", ""))
    return list(seen.values())


def _as_env_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return "(empty)" if value == "" else str(value)


def all_env_names() -> set[str]:
    names: set[str] = set()
    for cls in ALL_SETTINGS:
        names |= env_names(cls)
    return names


def known_env_names() -> set[str]:
    """Every HOOKSTREAM_* name some part reads: the union over all services (one shared
    environment file) and the variables read outside the settings classes."""
    return all_env_names() | OTHER_ENV_NAMES
