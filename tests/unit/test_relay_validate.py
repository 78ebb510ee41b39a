from __future__ import annotations

import pytest
from hookstream.relay.validate import rejection_reason


def reason(type: str = "invoice.paid", version: int = 1, payload: bytes = b'{"a": 1}',
           limit: int = 1000) -> str | None:
    return rejection_reason(type=type, schema_version=version, payload=payload,
                            max_payload_bytes=limit)


def test_a_good_row_passes() -> None:
    assert reason() is None


@pytest.mark.parametrize("kwargs, fragment", [
    ({"version": 2}, "unknown schema_version 2"),
    ({"version": 0}, "unknown schema_version 0"),
    ({"payload": b"{not json"}, "not valid JSON"),
    ({"payload": b""}, "not valid JSON"),
    ({"payload": b'{"a": "' + b"x" * 2000 + b'"}'}, "exceeds the 1000-byte limit"),
    ({"type": ""}, "invalid event type"),
    ({"type": "has space"}, "invalid event type"),
    ({"type": "a..b"}, "invalid event type"),
    ({"type": "x" * 201}, "invalid event type"),
])
def test_malformed_rows_get_a_reason(kwargs: dict[str, object], fragment: str) -> None:
    got = reason(**kwargs)  # type: ignore[arg-type]
    assert got is not None and fragment in got
