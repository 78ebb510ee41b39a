"""The console's signing key, kept in PostgreSQL (``console_keys``, migration 0010) so
every API instance signs and verifies portal links, session cookies and CSRF tokens
alike without a setting to distribute. Read once per process."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

from hookstream.api.store import Conn
from hookstream.io import queries

Q = queries.load("console")
KEY_BYTES = 32


async def load_or_create(conn: Conn) -> bytes:
    row = await (await conn.execute(Q["console_key"])).fetchone()
    if row is None:
        await conn.execute(Q["create_console_key"], {"key": secrets.token_bytes(KEY_BYTES)})
        row = await (await conn.execute(Q["console_key"])).fetchone()
    assert row is not None
    return bytes(row["key"])


class KeyHolder:
    """The key, fetched on first use; concurrent first requests fetch it once."""

    def __init__(self) -> None:
        self._key: bytes | None = None
        self._lock = asyncio.Lock()

    async def get(self, connect: Callable[[], AbstractAsyncContextManager[Conn]]) -> bytes:
        if self._key is None:
            async with self._lock:
                if self._key is None:
                    async with connect() as conn:
                        self._key = await load_or_create(conn)
        return self._key
