"""A fast receiver for benchmarks, in its own process so it does not share a GIL with what
it measures: answers every POST with 200 at once and counts. GET /count → JSON counts.

    python benchmarks/fast_receiver.py --port 8801 [--delay-path slow --delay-s 28]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections import Counter

import orjson
from aiohttp import web


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--delay-path", default="")
    ap.add_argument("--delay-s", type=float, default=0.0)
    args = ap.parse_args()
    counts: Counter[str] = Counter()
    first_seen: dict[str, float] = {}
    arrivals: list[tuple[str, float, float]] = []  # (path, received_at, event write time)

    async def hook(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        body = await request.read()
        now = time.time()
        counts[name] += 1
        first_seen.setdefault(name, now)
        if request.headers.get("x-bench-record") or b'"t":' in body[:40]:
            try:
                arrivals.append((name, now, float(orjson.loads(body)["t"])))
            except (ValueError, KeyError, TypeError):
                pass
        if args.delay_path and name.startswith(args.delay_path):
            await asyncio.sleep(args.delay_s)
        return web.Response(status=200)

    async def count(_: web.Request) -> web.Response:
        return web.Response(body=orjson.dumps({"total": sum(counts.values()),
                                                "per_path": len(counts)}),
                            content_type="application/json")

    async def lat(_: web.Request) -> web.Response:
        return web.Response(body=orjson.dumps(arrivals), content_type="application/json")

    app = web.Application()
    app.router.add_post("/hooks/{name}", hook)
    app.router.add_get("/count", count)
    app.router.add_get("/arrivals", lat)
    web.run_app(app, host="127.0.0.1", port=args.port, access_log=None, print=None,
                backlog=2048)


if __name__ == "__main__":
    main()
