"""The demo through the containers (``scripts/containers.sh``): the compose stack is up;
from the host, wait until each service answers ``/healthz``, register the demo's endpoints
at a receiver the dispatcher container reaches through its egress network, write the
sample events, and print the summary ``make demo`` prints. Then check the egress
isolation of seed 002 from both sides:

* the API refuses an endpoint URL naming an internal service (the SSRF guard at the door);
* a ``podman stop`` of the dispatcher with attempts in flight drains within the stop
  timeout, and nothing of that work is lost once it is started again;
* with the dispatcher's guard off (this demo's setting: its receivers are on private
  addresses), webhooks to the API, the relay, the fanout, Prometheus and Grafana still
  never connect — the compose networks give the dispatcher no route to them — while
  PostgreSQL and Kafka, which it needs, do answer it (``podman exec`` probes both ways).

Exit 0 only if every delivery was verified and every isolation check held.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any

import psycopg

from hookstream.dev import demo_store
from hookstream.dev.demo import deliver_and_report, register_endpoints
from hookstream.dev.receiver import Behaviour, Receiver, ReceiverThread
from hookstream.endpoints import create_endpoint
from hookstream.outbox import write_event

# Internal services a webhook must never reach from the dispatcher: (host, port, what).
INTERNAL = [
    ("fanout", 8080, "the control-plane API"),
    ("fanout", 9102, "the fanout's /metrics"),
    ("relay", 9101, "the relay's /metrics"),
    ("prometheus", 9090, "Prometheus"),
    ("grafana", 3000, "Grafana"),
]
# What the dispatcher needs, reachable: proves the probe can succeed at all.
NEEDED = [("postgres", 5432), ("kafka", 9092)]
EGRESS_TENANT = "egress-check"
PROMETHEUS_ADDRESS = "172.31.250.10"  # docker-compose.yml's control network
JOBS = ("hookstream-relay", "hookstream-fanout", "hookstream-dispatcher")


def wait_healthy(services: dict[str, str], since: float, timeout_s: float) -> dict[str, float]:
    """Poll each service's /healthz until 200; seconds from ``since`` (epoch) to healthy."""
    healthy: dict[str, float] = {}
    deadline = time.monotonic() + timeout_s
    last: dict[str, str] = {}
    while len(healthy) < len(services) and time.monotonic() < deadline:
        for name, base in services.items():
            if name in healthy:
                continue
            try:
                with urllib.request.urlopen(f"{base}/healthz", timeout=2) as resp:
                    if resp.status == 200:
                        healthy[name] = time.time() - since
            except (OSError, urllib.error.HTTPError) as exc:
                last[name] = str(exc)
        time.sleep(0.5)
    missing = sorted(set(services) - set(healthy))
    if missing:
        raise SystemExit(f"not healthy within {timeout_s:g} s: {missing} (last: {last})")
    return healthy


def _api(base: str, method: str, path: str, token: str, body: Any) -> tuple[int, Any]:
    req = urllib.request.Request(f"{base}{path}", method=method,
                                 data=json.dumps(body).encode(),
                                 headers={"Authorization": f"Bearer {token}",
                                          "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def tenant_token(db_url: str) -> str:
    """A new tenant for the egress check and its first API key (the operator's CLI)."""
    done = subprocess.run(
        [sys.executable, "-m", "hookstream.cli", "tenants", "create", EGRESS_TENANT, "--json"],
        env={**os.environ, "HOOKSTREAM_DATABASE_URL": db_url}, capture_output=True,
        text=True, timeout=60, check=True)
    created = json.loads(done.stdout)
    token = (created.get("api_key") or {}).get("token")
    if not token:
        raise SystemExit(f"no API key in `hookstream tenants create`'s answer: {created}")
    return str(token)


def guard_refuses_internal_urls(api: str, token: str) -> list[str]:
    """Problems: an internal URL the API accepted as an endpoint."""
    problems = []
    for host, port, what in [*INTERNAL, (PROMETHEUS_ADDRESS, 9090, "Prometheus by address")]:
        code, body = _api(api, "POST", "/v1/endpoints", token,
                          {"url": f"https://{host}:{port}/hooks", "event_types": ["*"]})
        verdict = "refused" if code == 400 else f"ACCEPTED ({code})"
        why = json.dumps(body)[:160]
        print(f"   API, endpoint https://{host}:{port}/hooks ({what}): {verdict} {why}")
        if code != 400:
            problems.append(f"the API accepted an endpoint at {what} ({code})")
    return problems


def webhooks_never_connect_inside(db_url: str, timeout_s: float = 60.0) -> list[str]:
    """With the dispatcher's guard off: one event to endpoints at every internal service;
    problems: an attempt that got an HTTP answer, or none finished in time."""
    with psycopg.connect(db_url) as conn:
        for host, port, _ in INTERNAL:
            create_endpoint(conn, tenant=EGRESS_TENANT, url=f"http://{host}:{port}/hooks",
                            event_types=["*"], allow_insecure=True)
        write_event(conn, tenant=EGRESS_TENANT, type="egress.check", payload={})
    deadline = time.monotonic() + timeout_s
    seen: dict[str, tuple[int | None, str | None, str]] = {}
    while time.monotonic() < deadline and len(seen) < len(INTERNAL):
        with psycopg.connect(db_url) as conn:
            for url, status, error, outcome in demo_store.finished_attempts_of_tenant(
                    conn, EGRESS_TENANT):
                seen.setdefault(url, (status, error, outcome))
        time.sleep(0.5)
    problems = []
    for host, port, what in INTERNAL:
        url = f"http://{host}:{port}/hooks"
        if url not in seen:
            problems.append(f"no finished attempt to {what} within {timeout_s:g} s")
            continue
        status, error, outcome = seen[url]
        print(f"   webhook to {url} ({what}), guard off: {outcome}, "
              f"error {error}, HTTP status {status}")
        if status is not None:
            problems.append(f"a webhook reached {what}: HTTP {status}")
    return problems


def probe_from_dispatcher(container: str, podman: list[str]) -> list[str]:
    """TCP connects from inside the dispatcher's container: internal services must fail,
    PostgreSQL and Kafka must succeed."""
    code = ("import socket, sys\n"
            "try:\n"
            "    socket.create_connection((sys.argv[1], int(sys.argv[2])), 3).close()\n"
            "    print('connected')\n"
            "except OSError as exc:\n"
            "    print(type(exc).__name__, exc)\n")
    problems = []
    for host, port, want in [*((h, p, False) for h, p, _ in INTERNAL),
                             *((h, p, True) for h, p in NEEDED)]:
        done = subprocess.run([*podman, "exec", container, "python", "-c", code, host,
                               str(port)], capture_output=True, text=True, timeout=30)
        said = (done.stdout or done.stderr).strip()
        connected = said == "connected"
        print(f"   from the dispatcher's container, {host}:{port}: {said}")
        if connected != want:
            problems.append(f"{host}:{port} {'connected' if connected else 'failed'} "
                            f"from the dispatcher ({said})")
    return problems


def prometheus_scrapes_every_service(prometheus: str, timeout_s: float = 90.0) -> list[str]:
    """Problems: a service whose scrape job is not up in Prometheus within ``timeout_s``
    (the dispatcher's is scraped over its metrics network, the others over control)."""
    deadline = time.monotonic() + timeout_s
    up: dict[str, str] = {}
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{prometheus}/api/v1/targets", timeout=5) as resp:
                targets = json.loads(resp.read())["data"]["activeTargets"]
            up = {t["labels"]["job"]: t["health"] for t in targets}
        except (OSError, ValueError, KeyError) as exc:
            up = {"(prometheus)": str(exc)}
        if all(up.get(job) == "up" for job in JOBS):
            break
        time.sleep(1)
    print("   Prometheus targets: " + ", ".join(f"{j} {up.get(j, 'missing')}" for j in JOBS)
          + (f" ({up['(prometheus)']})" if "(prometheus)" in up else ""))
    return [f"Prometheus does not scrape {j} ({up.get(j, 'missing')})"
            for j in JOBS if up.get(j) != "up"]


DRAIN_TENANT = "drain-check"
DRAIN_EVENTS = 20
STOP_TIMEOUT_S = 40  # docker-compose.yml's stop_grace_period


def stop_under_load_drains(db_url: str, receiver: Receiver, host: str, container: str,
                           podman: list[str]) -> list[str]:
    """``podman stop`` of the dispatcher with attempts in flight (a receiver answering in
    2 s) must drain and exit 0 within the stop timeout; started again, it delivers every
    one of those deliveries (the slow receiver fixed meanwhile): nothing lost."""
    with psycopg.connect(db_url) as conn:
        ep = create_endpoint(conn, tenant=DRAIN_TENANT, url=receiver.url("drain", host),
                             event_types=["*"], allow_insecure=True, max_in_flight=4)
        receiver.add("drain", ep.secret, Behaviour(delay_s=2.0))
        with conn.transaction():
            for i in range(DRAIN_EVENTS):
                write_event(conn, tenant=DRAIN_TENANT, type="drain.check", payload={"i": i})
    deadline = time.monotonic() + 60
    while not receiver.in_flight.get("drain", 0) > 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if receiver.in_flight.get("drain", 0) == 0:
        return ["no attempt in flight at the slow receiver within 60 s"]
    started = time.monotonic()
    subprocess.run([*podman, "stop", "-t", str(STOP_TIMEOUT_S), container], check=True,
                   capture_output=True, timeout=STOP_TIMEOUT_S + 30)
    took = time.monotonic() - started
    code = subprocess.run([*podman, "inspect", container, "--format", "{{.State.ExitCode}}"],
                          capture_output=True, text=True, check=True).stdout.strip()
    print(f"   podman stop of the dispatcher with attempts in flight: exit {code} after "
          f"{took:.1f} s")
    problems = []
    if code != "0" or took >= STOP_TIMEOUT_S:
        problems.append(f"the dispatcher's stop under load: exit {code} after {took:.1f} s")
    receiver.behaviour["drain"] = Behaviour()
    subprocess.run([*podman, "start", container], check=True, capture_output=True,
                   timeout=60)
    deadline = time.monotonic() + 120
    counts: dict[str, int] = {}
    while time.monotonic() < deadline:
        with psycopg.connect(db_url) as conn:
            counts = demo_store.status_counts_of_tenant(conn, DRAIN_TENANT)
        if counts.get("delivered", 0) == DRAIN_EVENTS:
            break
        time.sleep(0.5)
    print(f"   after the restart: {counts} of {DRAIN_EVENTS}")
    if counts.get("delivered", 0) != DRAIN_EVENTS:
        problems.append(f"after the stop and restart, not all delivered: {counts}")
    return problems


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hookstream.dev.container_demo")
    p.add_argument("--database-url", required=True)
    p.add_argument("--receiver-host", required=True,
                   help="the host's address on the dispatcher's egress network")
    p.add_argument("--api", default="http://127.0.0.1:8080")
    p.add_argument("--prometheus", default="http://127.0.0.1:9090")
    p.add_argument("--service", action="append", default=[], metavar="NAME=URL",
                   help="a service's /healthz base URL, e.g. relay=http://127.0.0.1:9101")
    p.add_argument("--since", type=float, default=time.time(),
                   help="epoch seconds the containers were started (time to healthy)")
    p.add_argument("--dispatcher-container", required=True)
    p.add_argument("--podman", default="podman")
    p.add_argument("--events", type=int, default=20)
    args = p.parse_args(argv)

    services = dict(s.split("=", 1) for s in args.service)
    healthy = wait_healthy(services, args.since, 180)
    print("== healthy after " + ", ".join(f"{k} {v:.1f} s" for k, v in healthy.items()))

    receiver = Receiver()
    thread = ReceiverThread(receiver, host=args.receiver_host).start()
    podman = args.podman.split()
    try:
        register_endpoints(args.database_url, receiver, args.receiver_host)
        print(f"== receiver on {args.receiver_host}:{receiver.port} (the host, on the "
              "dispatcher's egress network; signatures verified on every request)")
        ok = deliver_and_report(args.database_url, receiver, args.events)
        print("\n== a stop under load")
        drain_problems = stop_under_load_drains(
            args.database_url, receiver, args.receiver_host, args.dispatcher_container,
            podman)
    finally:
        thread.stop()

    print("\n== observability")
    problems = drain_problems + prometheus_scrapes_every_service(args.prometheus)
    print("\n== egress isolation (seed 002)")
    problems += guard_refuses_internal_urls(args.api, tenant_token(args.database_url))
    problems += webhooks_never_connect_inside(args.database_url)
    problems += probe_from_dispatcher(args.dispatcher_container, podman)
    for problem in problems:
        print(f"FAILED: {problem}")
    print("observability and egress isolation: "
          + ("OK" if not problems else f"{len(problems)} problem(s)"))
    return 0 if ok and not problems else 1


if __name__ == "__main__":
    sys.exit(main())
