"""The receiver farm of the end-to-end benchmark: one process per port, so the receivers
do not share a GIL with the load generator or with each other.

    python -m benchmarks.receiver_farm --port 8801 --config farm.json [--verify-every 1]

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
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections import Counter, defaultdict
from typing import Any

import orjson
from aiohttp import web

from hookstream.core.signing import VerificationError, verify

STATUS = {"ok": 200, "slow": 200, "fail": 500, "throttle": 429, "hang": 200, "gone": 410}


class Farm:
    def __init__(self, config: dict[str, Any], verify_every: int):
        self.endpoints: dict[str, dict[str, Any]] = config["endpoints"]
        self.verify_every = verify_every
        self.by_id: Counter[str] = Counter()
        self.first_at: dict[str, float] = {}
        self.series: defaultdict[int, Counter[str]] = defaultdict(Counter)
        self.verified = 0
        self.bad_signature: list[tuple[str, str]] = []
        self.requests = 0
        self.in_flight: Counter[str] = Counter()
        self.max_in_flight: Counter[str] = Counter()

    async def hook(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        body = await request.read()
        now = time.time()
        ep = self.endpoints.get(name)
        kind = ep["kind"] if ep else "unknown"
        self.requests += 1
        webhook_id = request.headers.get("webhook-id", "")
        if ep is not None:
            self.by_id[webhook_id] += 1
            self.first_at.setdefault(webhook_id, now)
        self.series[int(now)][kind] += 1
        # Verification costs an HMAC and a base64 per request (~10 µs); the sample rate
        # is a knob for when the farm, not the pipeline, would become the bottleneck.
        if ep is not None and self.requests % self.verify_every == 0:
            try:
                verify(ep["secret"], request.headers, body, now=int(now))
                self.verified += 1
            except VerificationError as exc:
                if len(self.bad_signature) < 100:
                    self.bad_signature.append((webhook_id, exc.reason))
                else:
                    self.bad_signature.append(("", ""))
                return web.Response(status=401)
        if ep is None:
            return web.Response(status=200)  # the yardstick client's path
        self.in_flight[name] += 1
        self.max_in_flight[name] = max(self.max_in_flight[name], self.in_flight[name])
        try:
            if kind == "slow":
                await asyncio.sleep(float(ep.get("delay_s", 28.0)))
            elif kind == "hang":
                await asyncio.Event().wait()  # until the dispatcher gives up and hangs up
        finally:
            self.in_flight[name] -= 1
        headers = {"Retry-After": str(ep.get("retry_after_s", 2))} if kind == "throttle" else None
        return web.Response(status=STATUS[kind], headers=headers)

    async def count(self, _: web.Request) -> web.Response:
        recent = Counter[str]()
        now = int(time.time())
        for sec in range(now - 5, now):
            recent.update(self.series.get(sec, {}))
        return web.json_response({
            "requests": self.requests, "distinct": len(self.by_id),
            "verified": self.verified, "bad_signature": len(self.bad_signature),
            "last_5s": dict(recent)}, dumps=lambda o: orjson.dumps(o).decode())

    async def arrivals(self, _: web.Request) -> web.Response:
        return web.Response(body=orjson.dumps(self.first_at), content_type="application/json")

    async def stats(self, _: web.Request) -> web.Response:
        return web.Response(body=orjson.dumps({
            "requests": self.requests, "verified": self.verified,
            "verify_every": self.verify_every,
            "bad_signature": len(self.bad_signature),
            "bad_signature_sample": self.bad_signature[:10],
            "by_id": self.by_id,
            "series": {str(k): v for k, v in self.series.items()},
            "max_in_flight": self.max_in_flight,
        }), content_type="application/json")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--verify-every", type=int, default=1)
    args = ap.parse_args()
    with open(args.config, "rb") as f:
        farm = Farm(orjson.loads(f.read()), max(1, args.verify_every))
    app = web.Application()
    app.router.add_post("/hooks/{name}", farm.hook)
    app.router.add_get("/count", farm.count)
    app.router.add_get("/stats", farm.stats)
    app.router.add_get("/arrivals", farm.arrivals)
    web.run_app(app, host="127.0.0.1", port=args.port, access_log=None, print=None,
                backlog=4096, handler_cancellation=True)


if __name__ == "__main__":
    main()
