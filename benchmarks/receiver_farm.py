"""The receiver farm of the end-to-end benchmark: one process per port, so the receivers
do not share a GIL with the load generator or with each other.

    python -m benchmarks.receiver_farm --port 8801 --config farm.json [--verify-every 1]
        [--server uvicorn|aiohttp]

``farm.json`` maps endpoint names (the ``/hooks/<name>`` path) to their secret and
behaviour: ``ok`` (200 at once), ``slow`` (200 after ``delay_s``, seed 000's 28 s),
``fail`` (500), ``throttle`` (429 with ``Retry-After``), ``hang`` (reads the request,
never answers), ``gone`` (410). Every request is counted by webhook-id (duplicates are
what the reconciliation explains); signatures are verified on every ``verify_every``-th
request (1 = all). Arrivals are bucketed per second and per behaviour for the plot.

    GET /count   small JSON for progress lines
    GET /stats   everything: counts per webhook-id, per-second series, verification
    GET /arrivals  webhook-id → epoch seconds of its first arrival (the latency budget's
                   end: commit → arrival at the receiver)

**Why two servers.** The receivers share the benchmark's two cores with what they
measure, and aiohttp's web server (the farm until 2026-12-06 evening, on asyncio's loop)
cost about a fifth of the whole machine's CPU at 4,000 deliveries/s (2026-12-06 morning:
0.09 of 0.46 CPU-ms per delivery) — CPU a real deployment's receivers never take from
it. ``uvicorn`` (this script's default) serves the same farm as a bare ASGI app on uvloop with
httptools' parser: ~30 % less CPU per delivery than aiohttp's server on uvloop
(benchmarks/pipeline.py --receiver-server; BENCHMARKS.md, Receiver farm).
``--server aiohttp`` keeps the old server to compare against. What the farm counts,
verifies and answers is the same code either way (``Farm``).

``benchmarks/receiver_farm_go`` is the same farm in Go, the pipeline benchmark's
default since 2026-12-07 (``--receiver-server uvicorn|aiohttp`` picks this one): about
half of uvicorn's CPU per request (BENCHMARKS.md, Receiver farm). ``Farm`` here is its
reference, and ``tests/unit/test_receiver_farm.py`` holds all three to the same answers,
counts and verification.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
import uvloop
from aiohttp import web

from hookstream.core.signing import VerificationError, verify

STATUS = {"ok": 200, "slow": 200, "fail": 500, "throttle": 429, "hang": 200, "gone": 410}


@dataclass(slots=True)
class Answer:
    """What the farm does with one webhook: wait (``slow``: ``delay_s``; ``hang``: until
    the sender hangs up, ``delay_s`` None), then answer ``status`` with ``headers``."""
    status: int
    headers: dict[str, str]
    name: str | None = None  # set when the request counts towards in-flight
    wait: str | None = None  # "slow" or "hang"
    delay_s: float | None = None


class Farm:
    """Counting, verification and behaviour, whatever serves the HTTP."""

    def __init__(self, config: dict[str, Any], verify_every: int):
        self.endpoints: dict[str, dict[str, Any]] = config["endpoints"]
        for name, ep in self.endpoints.items():
            if ep.get("kind") not in STATUS:
                raise ValueError(f"endpoint {name!r}: unknown kind {ep.get('kind')!r}")
        self.verify_every = verify_every
        self.by_id: Counter[str] = Counter()
        self.first_at: dict[str, float] = {}
        self.series: defaultdict[int, Counter[str]] = defaultdict(Counter)
        self.verified = 0
        self.bad_signature: list[tuple[str, str]] = []
        self.requests = 0
        self.in_flight: Counter[str] = Counter()
        self.max_in_flight: Counter[str] = Counter()

    def receive(self, name: str, headers: Mapping[str, str], body: bytes) -> Answer:
        """One webhook arrived (``headers``: lower-case names, or a case-insensitive
        mapping)."""
        now = time.time()
        ep = self.endpoints.get(name)
        kind = ep["kind"] if ep else "unknown"
        self.requests += 1
        webhook_id = headers.get("webhook-id", "")
        if ep is not None:
            self.by_id[webhook_id] += 1
            self.first_at.setdefault(webhook_id, now)
        self.series[int(now)][kind] += 1
        # Verification costs an HMAC and a base64 per request (~10 µs); the sample rate
        # is a knob for when the farm, not the pipeline, would become the bottleneck.
        if ep is not None and self.requests % self.verify_every == 0:
            try:
                verify(ep["secret"], headers, body, now=int(now))
                self.verified += 1
            except VerificationError as exc:
                if len(self.bad_signature) < 100:
                    self.bad_signature.append((webhook_id, exc.reason))
                else:
                    self.bad_signature.append(("", ""))
                return Answer(401, {})
        if ep is None:
            return Answer(200, {})  # the yardstick client's path
        self.in_flight[name] += 1
        self.max_in_flight[name] = max(self.max_in_flight[name], self.in_flight[name])
        answer = Answer(STATUS[kind], {"Retry-After": str(ep.get("retry_after_s", 2))}
                        if kind == "throttle" else {}, name=name)
        if kind == "slow":
            answer.wait, answer.delay_s = "slow", float(ep.get("delay_s", 28.0))
        elif kind == "hang":
            answer.wait = "hang"
        return answer

    def finished(self, answer: Answer) -> None:
        """The request is over: answered, or its sender hung up."""
        if answer.name is not None:
            self.in_flight[answer.name] -= 1

    def count(self) -> dict[str, Any]:
        recent = Counter[str]()
        now = int(time.time())
        for sec in range(now - 5, now):
            recent.update(self.series.get(sec, {}))
        return {"requests": self.requests, "distinct": len(self.by_id),
                "verified": self.verified, "bad_signature": len(self.bad_signature),
                "last_5s": dict(recent)}

    def stats(self) -> dict[str, Any]:
        return {
            "requests": self.requests, "verified": self.verified,
            "verify_every": self.verify_every,
            "bad_signature": len(self.bad_signature),
            "bad_signature_sample": self.bad_signature[:10],
            "by_id": self.by_id,
            "series": {str(k): v for k, v in self.series.items()},
            "max_in_flight": self.max_in_flight,
            "in_flight": self.in_flight,
        }

    def reports(self) -> dict[str, Callable[[], Any]]:
        """GET paths → what they serve."""
        return {"/count": self.count, "/stats": self.stats, "/arrivals": lambda: self.first_at}


# -- uvicorn: a bare ASGI app ---------------------------------------------------------------

ASGIReceive = Callable[[], Awaitable[dict[str, Any]]]
ASGISend = Callable[[dict[str, Any]], Awaitable[None]]
HOOKS = "/hooks/"


def asgi_app(farm: Farm) -> Callable[[dict[str, Any], ASGIReceive, ASGISend], Awaitable[None]]:
    reports = farm.reports()

    async def respond(send: ASGISend, status: int, body: bytes = b"",
                      headers: dict[str, str] | None = None) -> None:
        raw = [(b"content-length", str(len(body)).encode())]
        if body:
            raw.append((b"content-type", b"application/json"))
        raw += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
        await send({"type": "http.response.start", "status": status, "headers": raw})
        await send({"type": "http.response.body", "body": body})

    async def app(scope: dict[str, Any], receive: ASGIReceive, send: ASGISend) -> None:
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        path, method = scope["path"], scope["method"]
        if method == "GET" and path in reports:
            await respond(send, 200, orjson.dumps(reports[path]()))
            return
        if method != "POST" or not path.startswith(HOOKS) or "/" in path[len(HOOKS):]:
            await respond(send, 404)
            return
        chunks = []
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        answer = farm.receive(path[len(HOOKS):], headers, b"".join(chunks))
        try:
            if answer.wait is not None:
                # Once the body is read, receive() returns only when the sender hangs up:
                # a hang lasts until then, a slow answer at most until then (as aiohttp's
                # handler cancellation did).
                hung_up = asyncio.ensure_future(receive())
                try:
                    await asyncio.wait([hung_up], timeout=answer.delay_s)
                    if hung_up.done():
                        return
                finally:
                    hung_up.cancel()
            await respond(send, answer.status, headers=answer.headers)
        finally:
            farm.finished(answer)

    return app


def serve_uvicorn(farm: Farm, port: int) -> None:
    import uvicorn  # the dev extra: only the benchmarks need it

    uvicorn.run(asgi_app(farm), host="127.0.0.1", port=port, loop="uvloop", http="httptools",
                lifespan="on", access_log=False, log_level="warning", backlog=4096,
                # a hanging endpoint's request never ends by itself: do not wait for it
                timeout_keep_alive=75, timeout_graceful_shutdown=2)


# -- aiohttp: the farm until 2026-12-06 evening (now on uvloop) -------------------------

def serve_aiohttp(farm: Farm, port: int) -> None:
    async def hook(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        # aiohttp's headers are case-insensitive already: no copy per request
        answer = farm.receive(request.match_info["name"], request.headers, body)
        try:
            if answer.wait == "slow":
                await asyncio.sleep(answer.delay_s or 0.0)
            elif answer.wait == "hang":
                await asyncio.Event().wait()  # until the dispatcher gives up and hangs up
        finally:
            farm.finished(answer)
        return web.Response(status=answer.status, headers=answer.headers or None)

    def report(fn: Callable[[], Any]) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def serve(_: web.Request) -> web.Response:
            return web.Response(body=orjson.dumps(fn()), content_type="application/json")
        return serve

    app = web.Application()
    app.router.add_post("/hooks/{name}", hook)
    for path, fn in farm.reports().items():
        app.router.add_get(path, report(fn))
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None,
                backlog=4096, handler_cancellation=True, loop=uvloop.new_event_loop())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--verify-every", type=int, default=1)
    ap.add_argument("--server", choices=("uvicorn", "aiohttp"), default="uvicorn")
    args = ap.parse_args()
    with open(args.config, "rb") as f:
        farm = Farm(orjson.loads(f.read()), max(1, args.verify_every))
    (serve_uvicorn if args.server == "uvicorn" else serve_aiohttp)(farm, args.port)


if __name__ == "__main__":
    main()
