"""How the services' consumers belong to their groups (issue #16): which group protocol,
and how long a silent member keeps its partitions.

The session timeout sets how long a killed member's partitions stall (benchmarks/
takeover.py: takeover ≈ the session timeout, whatever the protocol). Kafka 4's consumer
protocol (KIP-848, ``group.protocol=consumer``) is the default here: at 3 s / 0.5 s it took
over a killed member's partitions in ~3 s and resumed within 1 s of a broker restart,
where the classic protocol needed ~8 s and static membership was fenced (fatal) by one
broker restart in seven. Under KIP-848 the timeouts are the *group's* configuration,
kept by the broker (``hookstream topics`` sets them; the local stack and docker-compose
also make them the broker's defaults); under the classic protocol each member asks for
them itself.
"""

from __future__ import annotations

from dataclasses import dataclass

PROTOCOLS = ("consumer", "classic")


@dataclass(frozen=True, slots=True)
class Membership:
    protocol: str = "consumer"
    session_timeout_ms: int = 3_000
    heartbeat_interval_ms: int = 500

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"group protocol must be one of {', '.join(PROTOCOLS)}, "
                             f"got {self.protocol!r}")
        if not 0 < self.heartbeat_interval_ms < self.session_timeout_ms:
            # A member that heartbeats less often than its session lasts is expired
            # between two heartbeats: every member would flap.
            raise ValueError(
                f"the heartbeat interval ({self.heartbeat_interval_ms} ms) must be below "
                f"the session timeout ({self.session_timeout_ms} ms)")

    @property
    def broker_side(self) -> bool:
        """True when the broker holds the timeouts (KIP-848), False when each member
        sends them in its join request (classic)."""
        return self.protocol == "consumer"


DEFAULT_MEMBERSHIP = Membership()
