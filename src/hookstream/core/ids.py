"""Time-ordered ids (UUIDv7, RFC 9562) for rows written from Python (the outbox helper's
event ids): 48 bits of Unix milliseconds first, so new rows append to the indexes rather
than landing on a random leaf. PostgreSQL makes the same kind (hookstream_uuid_v7(),
migration 0012) for the rows it fills in itself. Pure: the clock and the random source
are arguments. Python 3.14's uuid.uuid7 would do; 3.11 has none."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable

_VERSION_7 = 0x7 << 76
_VARIANT_RFC = 0b10 << 62


def uuid7(now_ms: int | None = None,
          randbytes: Callable[[int], bytes] = os.urandom) -> uuid.UUID:
    ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    if not 0 <= ms < 1 << 48:
        raise ValueError(f"timestamp out of UUIDv7 range: {ms} ms")
    rand = int.from_bytes(randbytes(10), "big")  # 80 bits; 74 of them are kept
    rand_a = (rand >> 62) & 0xFFF  # 12 bits after the version
    rand_b = rand & ((1 << 62) - 1)  # 62 bits after the variant
    return uuid.UUID(int=(ms << 80) | _VERSION_7 | (rand_a << 64) | _VARIANT_RFC | rand_b)


def uuid7_ms(value: uuid.UUID) -> int:
    """The Unix milliseconds a UUIDv7 was made at."""
    return value.int >> 80
