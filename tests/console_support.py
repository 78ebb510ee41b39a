"""A console visitor over plain HTTP for the integration tests: its own cookie jar,
forms posted with the CSRF token the last page carried. (The browser tests drive
chromium instead: tests/e2e/test_console_browser.py.)"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp.test_utils import BaseTestServer

CSRF_INPUT = re.compile(r'name="csrf" value="([^"]*)"')


@dataclass
class Answer:
    status: int
    text: str
    headers: Any
    url: str

    def csrf(self) -> str:
        found = CSRF_INPUT.search(self.text)
        assert found, f"no CSRF field on {self.url}"
        return found.group(1)

    def error_title(self) -> str | None:
        found = re.search(r'id="error-title">([^<]*)<', self.text)
        return None if found is None else found.group(1)


class Visitor:
    def __init__(self, server: BaseTestServer) -> None:
        self.server = server
        self.session = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))
        self.token = ""

    async def close(self) -> None:
        await self.session.close()

    async def _answer(self, resp: aiohttp.ClientResponse) -> Answer:
        answer = Answer(resp.status, await resp.text(), resp.headers, str(resp.url))
        if (found := CSRF_INPUT.search(answer.text)) is not None:
            self.token = found.group(1)
        return answer

    async def get(self, path: str, **kwargs: Any) -> Answer:
        async with self.session.get(self.server.make_url(path), **kwargs) as resp:
            return await self._answer(resp)

    async def post(self, path: str, data: dict[str, Any] | None = None, *,
                   csrf: str | None = "current", follow: bool = False,
                   headers: dict[str, str] | None = None) -> Answer:
        form = dict(data or {})
        if csrf == "current":
            if not self.token:
                await self.get("/console/login")
            form["csrf"] = self.token
        elif csrf is not None:
            form["csrf"] = csrf
        async with self.session.post(self.server.make_url(path), data=form,
                                     allow_redirects=follow, headers=headers) as resp:
            return await self._answer(resp)

    async def sign_in(self, api_key: str) -> Answer:
        await self.get("/console/login")
        answer = await self.post("/console/login", {"api_key": api_key}, follow=True)
        assert answer.status == 200, answer.text
        return answer
