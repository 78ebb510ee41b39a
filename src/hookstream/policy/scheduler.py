"""Fair scheduling of ready deliveries: who gets the next free slot.

Seed 000's incident came from one FIFO queue shared by all endpoints: the slow one's
backlog grew fastest, so every free worker picked it next until all 16 were stuck on
it. Here every endpoint has its own lane with an in-flight cap and a token bucket, and
lanes are served round robin — the first ready delivery of every endpoint of a tenant
before the second of any — while tenants are served by weighted round robin with their
own in-flight quota and rate, so one tenant with thousands of broken endpoints cannot
take the fleet either.

Pure: no I/O, no clock (``now`` comes in on every call). Blocked lanes and tenants are
parked (at their cap until a release, or on a timer until tokens or a hold expire), so
a take never scans the ones that cannot send: the cost per taken item is O(log n).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from enum import Enum
from typing import Generic, TypeVar

from hookstream.policy.token_bucket import TokenBucket

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Limits:
    rate_per_s: float
    burst: float
    max_in_flight: int
    weight: int = 1  # tenants only: picks per turn of the round robin


class _State(Enum):
    IDLE = "idle"  # nothing queued (lane) / no ready lane (tenant)
    READY = "ready"  # in its ring
    CAPPED = "capped"  # at its in-flight cap: waits for a release
    WAITING = "waiting"  # on a timer: tokens or a hold


class _Lane(Generic[T]):
    __slots__ = ("bucket", "cap", "in_flight", "key", "not_before", "queue", "state", "tenant",
                 "timer", "touched")

    def __init__(self, key: Hashable, tenant: str, limits: Limits, now: float):
        self.key = key
        self.tenant = tenant
        self.queue: deque[T] = deque()
        self.in_flight = 0
        self.cap = limits.max_in_flight
        self.bucket = TokenBucket(limits.rate_per_s, limits.burst, now)
        self.not_before = 0.0
        self.state = _State.IDLE
        self.timer = 0  # sequence number of the live timer; older heap entries are stale
        self.touched = now


class _Tenant:
    __slots__ = ("bucket", "cap", "credit", "in_flight", "name", "ready", "state", "timer",
                 "weight")

    def __init__(self, name: str, limits: Limits, now: float):
        self.name = name
        self.ready: deque[Hashable] = deque()
        self.in_flight = 0
        self.cap = limits.max_in_flight
        self.weight = max(1, limits.weight)
        self.credit = self.weight
        self.bucket = TokenBucket(limits.rate_per_s, limits.burst, now)
        self.state = _State.IDLE
        self.timer = 0


class FairScheduler(Generic[K, T]):
    def __init__(self, max_in_flight: int, tenant_limits: Callable[[str], Limits]):
        if max_in_flight <= 0:
            raise ValueError("max_in_flight must be > 0")
        self.max_in_flight = max_in_flight
        self._tenant_limits = tenant_limits
        self._lanes: dict[Hashable, _Lane[T]] = {}
        self._tenants: dict[str, _Tenant] = {}
        self._ring: deque[str] = deque()
        self._timers: list[tuple[float, int, bool, Hashable]] = []  # (at, seq, is_tenant, key)
        self._seq = itertools.count(1)
        self.in_flight = 0
        self.queued = 0

    # -- configuration -----------------------------------------------------------------
    def set_endpoint(self, key: K, tenant: str, limits: Limits, now: float) -> None:
        """Create the endpoint's lane, or apply new limits to it (keeps its queue)."""
        lane = self._lanes.get(key)
        if lane is None:
            if tenant not in self._tenants:
                self._tenants[tenant] = _Tenant(tenant, self._tenant_limits(tenant), now)
            self._lanes[key] = _Lane(key, tenant, limits, now)
            return
        if lane.bucket.burst != limits.burst:
            lane.bucket.set_burst(limits.burst, now)
        lane.bucket.set_rate(limits.rate_per_s, now)
        lane.cap = limits.max_in_flight
        if lane.state is _State.CAPPED and lane.in_flight < lane.cap:
            self._make_ready(lane)
        self._rearm(lane)

    def set_rate(self, key: K, rate_per_s: float, now: float) -> None:
        """Adaptive throttling lowers (or restores) an endpoint's effective rate."""
        lane = self._lanes[key]
        lane.bucket.set_rate(rate_per_s, now)
        self._rearm(lane)

    def has_endpoint(self, key: K) -> bool:
        return key in self._lanes

    # -- queueing ----------------------------------------------------------------------
    def push(self, key: K, item: T, now: float) -> None:
        lane = self._lanes[key]
        lane.queue.append(item)
        lane.touched = now
        self.queued += 1
        if lane.state is _State.IDLE:
            self._make_ready(lane)

    def queued_for(self, key: K) -> int:
        lane = self._lanes.get(key)
        return len(lane.queue) if lane else 0

    def in_flight_for(self, key: K) -> int:
        lane = self._lanes.get(key)
        return lane.in_flight if lane else 0

    def tenant_in_flight(self, tenant: str) -> int:
        t = self._tenants.get(tenant)
        return t.in_flight if t else 0

    def pop_excess(self, key: K, keep: int, age: Callable[[T], float] | None = None) -> list[T]:
        """Remove and return the items beyond ``keep`` (to defer them): the newest
        arrivals, or with ``age`` (smaller = older) the youngest, so an old item that
        arrives late (back from a delay) is kept ahead of younger ones. The lane is then
        served oldest first; the excess comes back oldest first too."""
        lane = self._lanes[key]
        if len(lane.queue) <= keep:
            return []
        if age is not None:
            lane.queue = deque(sorted(lane.queue, key=age))  # stable: ties keep arrival order
        out: list[T] = []
        while len(lane.queue) > keep:
            out.append(lane.queue.pop())
        out.reverse()
        self.queued -= len(out)
        return out

    def hold(self, key: K, until: float) -> None:
        """Send nothing to this endpoint before ``until`` (Retry-After, probe pacing)."""
        lane = self._lanes[key]
        lane.not_before = max(lane.not_before, until)

    # -- taking and releasing ------------------------------------------------------------
    def take(self, now: float, max_items: int) -> list[tuple[K, T]]:
        self._fire_timers(now)
        out: list[tuple[K, T]] = []
        while len(out) < max_items and self.in_flight < self.max_in_flight and self._ring:
            tenant = self._tenants[self._ring[0]]
            if tenant.in_flight >= tenant.cap:
                tenant.state = _State.CAPPED
                self._ring.popleft()
                continue
            wait = tenant.bucket.wait_time(now)
            if wait > 0:
                self._park(tenant, _after(now, wait))
                self._ring.popleft()
                continue
            lane = self._next_lane(tenant, now)
            if lane is None:
                tenant.state = _State.IDLE
                self._ring.popleft()
                continue
            tenant.bucket.try_take(now)
            item = lane.queue.popleft()
            self.queued -= 1
            lane.in_flight += 1
            lane.touched = now
            tenant.in_flight += 1
            self.in_flight += 1
            if lane.queue:
                tenant.ready.append(lane.key)  # to the back: round robin within the tenant
            else:
                lane.state = _State.IDLE
            out.append((lane.key, item))  # type: ignore[arg-type]
            tenant.credit -= 1
            if tenant.credit <= 0:
                tenant.credit = tenant.weight
                self._ring.rotate(-1)  # to the back: weighted round robin across tenants
        return out

    def release(self, key: K, now: float) -> None:
        """An attempt taken from this endpoint finished (whatever its outcome)."""
        lane = self._lanes[key]
        tenant = self._tenants[lane.tenant]
        lane.in_flight -= 1
        tenant.in_flight -= 1
        self.in_flight -= 1
        lane.touched = now
        if lane.state is _State.CAPPED and lane.in_flight < lane.cap:
            self._make_ready(lane)
        if tenant.state is _State.CAPPED and tenant.in_flight < tenant.cap:
            self._tenant_ready(tenant)

    def next_timer_at(self) -> float | None:
        """When a parked lane or tenant may become ready (None: nothing on a timer)."""
        while self._timers:
            at, seq, is_tenant, key = self._timers[0]
            owner = self._tenants.get(key) if is_tenant else self._lanes.get(key)  # type: ignore[call-overload]
            if owner is not None and owner.state is _State.WAITING and owner.timer == seq:
                return at
            heapq.heappop(self._timers)
        return None

    def evict_idle(self, now: float, idle_s: float) -> int:
        """Forget lanes with nothing queued or in flight for ``idle_s`` (bounded memory)."""
        gone = [k for k, lane in self._lanes.items()
                if lane.state is _State.IDLE and lane.in_flight == 0 and not lane.queue
                and now - lane.touched >= idle_s]
        for k in gone:
            del self._lanes[k]
        return len(gone)

    # -- internals -----------------------------------------------------------------------
    def _next_lane(self, tenant: _Tenant, now: float) -> _Lane[T] | None:
        while tenant.ready:
            lane = self._lanes.get(tenant.ready.popleft())
            if lane is None or lane.state is not _State.READY:
                continue
            if not lane.queue:
                lane.state = _State.IDLE
                continue
            if lane.in_flight >= lane.cap:
                lane.state = _State.CAPPED
                continue
            if lane.not_before > now:
                self._park(lane, lane.not_before)
                continue
            wait = lane.bucket.wait_time(now)
            if wait > 0:
                self._park(lane, _after(now, wait))
                continue
            lane.bucket.try_take(now)
            return lane
        return None

    def _park(self, owner: _Lane[T] | _Tenant, at: float) -> None:
        owner.state = _State.WAITING
        owner.timer = next(self._seq)
        key = owner.name if isinstance(owner, _Tenant) else owner.key
        heapq.heappush(self._timers, (at, owner.timer, isinstance(owner, _Tenant), key))

    def _fire_timers(self, now: float) -> None:
        while self._timers and self._timers[0][0] <= now:
            _, seq, is_tenant, key = heapq.heappop(self._timers)
            if is_tenant:
                tenant = self._tenants.get(key)  # type: ignore[call-overload]
                if tenant is not None and tenant.state is _State.WAITING and tenant.timer == seq:
                    tenant.state = _State.IDLE
                    self._tenant_ready(tenant)
            else:
                lane = self._lanes.get(key)
                if lane is not None and lane.state is _State.WAITING and lane.timer == seq:
                    lane.state = _State.IDLE
                    if lane.queue:
                        self._make_ready(lane)

    def _rearm(self, lane: _Lane[T]) -> None:
        # A lane parked on a timer computed under the old limits re-evaluates at the next
        # take: its timer may be far too late, or infinite after a rate of 0 (a lost
        # wake-up). The old heap entry goes stale; _next_lane parks it again if needed.
        if lane.state is _State.WAITING:
            lane.state = _State.IDLE
            if lane.queue:
                self._make_ready(lane)

    def _make_ready(self, lane: _Lane[T]) -> None:
        lane.state = _State.READY
        tenant = self._tenants[lane.tenant]
        tenant.ready.append(lane.key)
        if tenant.state is _State.IDLE:
            self._tenant_ready(tenant)

    def _tenant_ready(self, tenant: _Tenant) -> None:
        if tenant.ready:
            tenant.state = _State.READY
            self._ring.append(tenant.name)
        else:
            tenant.state = _State.IDLE


def _after(now: float, wait_s: float) -> float:
    """When a bucket that lacks ``wait_s`` of refill at ``now`` surely has its token.

    ``now + wait_s`` can round down, and at a high rate the refill then falls short by
    more than the bucket's slack (rate × one ulp of ``now``): a driver that sleeps until
    the timer would find nothing to take and the same timer again. One ulp later the
    elapsed time is at least ``wait_s``.
    """
    return math.nextafter(now + wait_s, math.inf)
