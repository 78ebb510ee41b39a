"""The benchmark's receiver farm — the Go one (benchmarks/receiver_farm_go), the Python
one served by uvicorn, and by aiohttp (the farm until 2026-12-06 evening): the same
answers, counts and verification whichever runs. The farm runs as its own process on
loopback, as the pipeline benchmark starts it."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from benchmarks.pipeline import start_farm
from hookstream.core.signing import generate_secret, webhook_headers
from hookstream.dev.harness import free_port

SECRET = generate_secret()
ENDPOINTS = {
    "ok": {"secret": SECRET, "kind": "ok"},
    "fail": {"secret": SECRET, "kind": "fail"},
    "throttle": {"secret": SECRET, "kind": "throttle", "retry_after_s": 7},
    "gone": {"secret": SECRET, "kind": "gone"},
    "slow": {"secret": SECRET, "kind": "slow", "delay_s": 0.3},
    "hang": {"secret": SECRET, "kind": "hang"},
}


@pytest.fixture(params=["go", "uvicorn", "aiohttp"])
def farm_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    # Started as the pipeline benchmark starts it, waiting until it answers /count.
    port = free_port()
    (proc,) = start_farm({"endpoints": ENDPOINTS}, [port], 1, tmp_path, request.param)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
            raise AssertionError("the farm did not stop within 10 s of SIGTERM") from None


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


def _signed(webhook_id: str, body: bytes, secret: str = SECRET) -> dict[str, str]:
    return webhook_headers([secret], webhook_id, int(time.time()), body)


async def _stats(session: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    async with session.get(f"{url}/stats") as r:
        assert r.status == 200
        return orjson.loads(await r.read())  # type: ignore[no-any-return]


async def test_signed_webhooks_are_answered_counted_and_verified(
        farm_url: str, session: aiohttp.ClientSession) -> None:
    body = b'{"type":"order.paid"}'
    answers = {}
    for name in ("ok", "fail", "throttle", "gone"):
        async with session.post(f"{farm_url}/hooks/{name}", data=body,
                                headers=_signed(f"msg_{name}", body)) as r:
            answers[name] = (r.status, r.headers.get("Retry-After"))
    assert answers == {"ok": (200, None), "fail": (500, None), "throttle": (429, "7"),
                       "gone": (410, None)}
    # sent twice: counted twice under its id (what the reconciliation explains)
    async with session.post(f"{farm_url}/hooks/ok", data=body,
                            headers=_signed("msg_ok", body)) as r:
        assert r.status == 200
    stats = await _stats(session, farm_url)
    assert stats["requests"] == 5
    assert stats["verified"] == 5
    assert stats["bad_signature"] == 0
    assert stats["by_id"] == {"msg_ok": 2, "msg_fail": 1, "msg_throttle": 1, "msg_gone": 1}
    async with session.get(f"{farm_url}/arrivals") as r:
        assert set(orjson.loads(await r.read())) == set(stats["by_id"])
    async with session.get(f"{farm_url}/count") as r:
        count = orjson.loads(await r.read())
    assert (count["requests"], count["distinct"], count["verified"]) == (5, 4, 5)


async def test_a_wrong_signature_is_refused_and_reported(
        farm_url: str, session: aiohttp.ClientSession) -> None:
    body = b'{"type":"order.paid"}'
    async with session.post(f"{farm_url}/hooks/ok", data=body,
                            headers=_signed("msg_1", body, generate_secret())) as r:
        assert r.status == 401
    tampered = _signed("msg_2", body)
    async with session.post(f"{farm_url}/hooks/ok", data=body + b" ", headers=tampered) as r:
        assert r.status == 401
    stats = await _stats(session, farm_url)
    assert (stats["verified"], stats["bad_signature"]) == (0, 2)
    assert [reason for _, reason in stats["bad_signature_sample"]] != []


async def test_an_unknown_path_is_the_yardstick_clients_and_is_not_counted_as_a_delivery(
        farm_url: str, session: aiohttp.ClientSession) -> None:
    async with session.post(f"{farm_url}/hooks/yardstick", data=b"{}") as r:
        assert r.status == 200
    stats = await _stats(session, farm_url)
    assert stats["requests"] == 1 and stats["by_id"] == {}


async def test_a_slow_endpoint_answers_after_its_delay(
        farm_url: str, session: aiohttp.ClientSession) -> None:
    body = b"{}"
    started = time.monotonic()
    async with session.post(f"{farm_url}/hooks/slow", data=body,
                            headers=_signed("msg_slow", body)) as r:
        assert r.status == 200
    assert time.monotonic() - started >= 0.3
    assert (await _stats(session, farm_url))["in_flight"] == {"slow": 0}


async def test_a_hanging_endpoint_never_answers_and_lets_go_when_the_sender_hangs_up(
        farm_url: str, session: aiohttp.ClientSession) -> None:
    """In flight until the sender gives up, then not any more: a second hang is the
    endpoint's only request in flight, as the dispatcher's cap sees it."""
    body = b"{}"
    for n in (1, 2):
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.5):
                async with session.post(f"{farm_url}/hooks/hang", data=body,
                                        headers=_signed(f"msg_hang{n}", body)) as r:
                    await r.read()
        deadline = time.monotonic() + 10
        while (await _stats(session, farm_url))["in_flight"].get("hang") != 0:
            assert time.monotonic() < deadline, "the farm never noticed the hang-up"
            await asyncio.sleep(0.05)
    stats = await _stats(session, farm_url)
    assert stats["max_in_flight"]["hang"] == 1
    assert stats["by_id"] == {"msg_hang1": 1, "msg_hang2": 1}


async def test_a_stale_or_future_timestamp_is_refused(
        farm_url: str, session: aiohttp.ClientSession) -> None:
    """The 5-minute tolerance of hookstream.core.signing.verify, in every farm."""
    body = b"{}"
    for n, skew in enumerate((-301, 301)):
        headers = webhook_headers([SECRET], f"msg_t{n}", int(time.time()) + skew, body)
        async with session.post(f"{farm_url}/hooks/ok", data=body, headers=headers) as r:
            assert r.status == 401
    stats = await _stats(session, farm_url)
    assert sorted(reason for _, reason in stats["bad_signature_sample"]) == [
        "timestamp too new", "timestamp too old"]


@pytest.mark.parametrize("server", ["go", "uvicorn"])
def test_a_farm_config_it_cannot_serve_stops_the_start_with_a_clear_error(
        server: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """An endpoint of an unknown kind: the farm exits naming it, and start_farm says the
    farm exited at once instead of waiting out its 30 s."""
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="exited with"):
        start_farm({"endpoints": {"odd": {"secret": SECRET, "kind": "teapot"}}},
                   [free_port()], 1, tmp_path, server)
    assert time.monotonic() - started < 20
    assert "teapot" in capfd.readouterr().err
