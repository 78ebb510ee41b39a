"""The operator CLI against a real database: bootstrap a tenant and keys, manage
endpoints; the keys it prints are the ones the API accepts."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from hookstream.api.auth import hash_token
from hookstream.cli import main as cli_main
from tests.helpers import query


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, Any]:
    code = cli_main(list(argv))
    out, err = capsys.readouterr()
    return code, orjson.loads(out) if code == 0 else err


@pytest.fixture(autouse=True)
def database(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOOKSTREAM_DATABASE_URL", db_url)


def test_bootstrap_tenant_and_keys(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, made = run(capsys, "tenants", "create", "acme", "--name", "Acme Inc")
    assert code == 0 and made["tenant"]["id"] == "acme"
    token = made["api_key"]["token"]
    assert query(db_url, "SELECT tenant FROM api_keys WHERE key_sha256 = %s",
                 (hash_token(token),)) == [("acme",)]
    code, op = run(capsys, "apikeys", "create", "--operator", "--name", "root")
    assert code == 0 and op["operator"] is True and op["token"].startswith("hsk_")
    code, err = run(capsys, "tenants", "create", "acme")
    assert code == 1 and "already exists" in err
    code, err = run(capsys, "tenants", "create", "Not Valid")
    assert code == 1 and "id" in err
    code, err = run(capsys, "apikeys", "create", "--tenant", "ghost")
    assert code == 1 and "unknown tenant" in err
    code, keys = run(capsys, "apikeys", "list")
    assert {k["operator"] for k in keys} == {True, False} and all("token" not in k for k in keys)
    code, revoked = run(capsys, "apikeys", "revoke", op["id"])
    assert code == 0 and revoked["revoked_at"]
    code, listed = run(capsys, "tenants", "list")
    assert [t["id"] for t in listed] == ["acme"]


def test_endpoint_lifecycle(capsys: pytest.CaptureFixture[str]) -> None:
    run(capsys, "tenants", "create", "acme", "--no-key")
    code, ep = run(capsys, "endpoints", "create", "--tenant", "acme", "--url",
                   "https://hooks.example.com/x", "--types", "invoice.*", "order.paid",
                   "--rate-per-s", "3")
    assert code == 0 and ep["secret"].startswith("whsec_")
    assert ep["event_types"] == ["invoice.*", "order.paid"] and ep["rate_per_s"] == 3.0
    code, err = run(capsys, "endpoints", "create", "--tenant", "acme", "--url",
                    "http://169.254.169.254/")
    assert code == 1 and "url" in err
    code, paused = run(capsys, "endpoints", "pause", ep["id"])
    assert paused["status"] == "paused"
    code, disabled = run(capsys, "endpoints", "disable", ep["id"], "--reason", "abuse")
    assert (disabled["status"], disabled["disabled_reason"]) == ("disabled", "abuse")
    code, enabled = run(capsys, "endpoints", "enable", ep["id"])
    assert enabled["status"] == "active"
    code, rotated = run(capsys, "endpoints", "rotate-secret", ep["id"], "--overlap-s", "0")
    assert code == 0 and rotated["version"] == 2 and rotated["secret"] != ep["secret"]
    code, health = run(capsys, "endpoints", "health", ep["id"])
    assert health["circuit"]["state"] == "closed" and health["pending"] == 0
    code, listed = run(capsys, "endpoints", "list", "--tenant", "acme")
    assert [e["id"] for e in listed] == [ep["id"]]
    code, _ = run(capsys, "endpoints", "delete", ep["id"])
    assert code == 0
    code, err = run(capsys, "endpoints", "show", ep["id"])
    assert code == 1 and "not found" in err
