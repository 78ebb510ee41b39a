"""A webhook receiver for demos, tests and benchmarks: verifies every signature and
records what arrived. A real HTTP server on loopback, not a stand-in.

Each endpoint is a path ``/hooks/<name>`` with its own secret and behaviour (status
to answer, delay before answering), changeable while running.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from hookstream.core.signing import VerificationError, verify


@dataclass
class Behaviour:
    status: int = 200
    delay_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    # answer `fail_status` to the first `fail_first` verified requests of each webhook-id
    fail_first: int = 0
    fail_status: int = 500
    group: str = ""  # endpoints sharing a group are also counted together (a tenant)
    body: bytes = b""  # the response body (the console's tests answer hostile text)


@dataclass(frozen=True)
class Arrival:
    name: str
    webhook_id: str
    timestamp: int
    received_at: float
    verified: bool
    error: str | None
    body: bytes
    answered: int
    cookie: str | None = None  # a Cookie header, if the sender sent one (it never should)
    signature: str = ""  # the webhook-signature header, to verify again with another library


class Receiver:
    def __init__(self, *, tolerance_s: int = 300):
        self.secrets: dict[str, list[str]] = {}
        self.behaviour: dict[str, Behaviour] = {}
        self.arrivals: list[Arrival] = []
        self.tolerance_s = tolerance_s
        self.in_flight: Counter[str] = Counter()
        self.max_in_flight: Counter[str] = Counter()
        self._seen: Counter[str] = Counter()
        self._runner: web.AppRunner | None = None
        self.port = 0

    def add(self, name: str, secret: str, behaviour: Behaviour | None = None) -> None:
        self.secrets.setdefault(name, []).append(secret)
        self.behaviour[name] = behaviour or Behaviour()

    def url(self, name: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}/hooks/{name}"

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        body = await request.read()
        now = time.time()
        verified, error = False, None
        secrets = self.secrets.get(name)
        if not secrets:
            error = "unknown endpoint"
        else:
            for secret in secrets:
                try:
                    verify(secret, request.headers, body, now=int(now),
                           tolerance_s=self.tolerance_s)
                    verified, error = True, None
                    break
                except VerificationError as exc:
                    error = str(exc)
        behaviour = self.behaviour.get(name, Behaviour(status=404))
        status = behaviour.status if verified else 401
        if verified and behaviour.fail_first:
            webhook_id = request.headers.get("webhook-id", "")
            self._seen[webhook_id] += 1
            if self._seen[webhook_id] <= behaviour.fail_first:
                status = behaviour.fail_status
        self.arrivals.append(Arrival(
            name=name, webhook_id=request.headers.get("webhook-id", ""),
            timestamp=int(request.headers.get("webhook-timestamp", "0") or 0),
            received_at=now, verified=verified, error=error, body=body, answered=status,
            cookie=request.headers.get("cookie"),
            signature=request.headers.get("webhook-signature", "")))
        keys = [name, f"group:{behaviour.group}"] if behaviour.group else [name]
        for key in keys:
            self.in_flight[key] += 1
            self.max_in_flight[key] = max(self.max_in_flight[key], self.in_flight[key])
        try:
            if behaviour.delay_s:
                await asyncio.sleep(behaviour.delay_s)
        finally:
            for key in keys:
                self.in_flight[key] -= 1
        return web.Response(status=status, headers=behaviour.headers if verified else None,
                            body=behaviour.body if verified else None)

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> Receiver:
        app = web.Application()
        app.router.add_post("/hooks/{name}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, backlog=1024)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    # -- summaries ---------------------------------------------------------------------
    def delivered_ids(self, name: str | None = None) -> set[str]:
        return {a.webhook_id for a in self.arrivals
                if a.verified and 200 <= a.answered < 300 and (name is None or a.name == name)}

    def summary(self) -> dict[str, Any]:
        per: dict[str, dict[str, int]] = {}
        for a in self.arrivals:
            entry = per.setdefault(a.name, {"requests": 0, "verified": 0, "bad_signature": 0})
            entry["requests"] += 1
            entry["verified" if a.verified else "bad_signature"] += 1
        return per


class ReceiverThread:
    """Runs a ``Receiver`` on its own event loop in a thread, for synchronous callers."""

    def __init__(self, receiver: Receiver, host: str = "127.0.0.1"):
        import threading

        self.receiver, self.host = receiver, host
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="receiver", daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self.receiver.start(self.host))
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self.receiver.stop())
        self._loop.close()

    def start(self) -> ReceiverThread:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("receiver did not start")
        return self

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
