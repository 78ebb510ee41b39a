"""Test-only DNS for service processes, loaded through PYTHONPATH (Python imports
``sitecustomize`` at start-up): ``HOOKSTREAM_TEST_DNS="name=address,..."`` makes each
``name`` resolve to ``address`` in the event loop's ``getaddrinfo`` (asyncio's and
uvloop's), which is what aiohttp's resolver asks. It plays the DNS of an endpoint's
owner pointing a public-looking name at an internal address, with no network and
nothing changed in the code under test. Without the variable it does nothing."""

from __future__ import annotations

import os
from typing import Any

_ANSWERS = dict(item.split("=", 1) for item in os.environ.get("HOOKSTREAM_TEST_DNS", "").split(",")
                if "=" in item)


def _answer_from_test_dns(cls: Any) -> None:
    original = cls.getaddrinfo

    async def getaddrinfo(self: Any, host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else host
        return await original(self, _ANSWERS.get(name, host), port, *args, **kwargs)

    cls.getaddrinfo = getaddrinfo


if _ANSWERS:
    import asyncio.base_events

    _answer_from_test_dns(asyncio.base_events.BaseEventLoop)
    try:
        import uvloop
    except ImportError:
        pass
    else:
        _answer_from_test_dns(uvloop.Loop)
