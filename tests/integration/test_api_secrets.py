"""Secret rotation through the API, checked against the secrets the dispatcher's claim
signs with (the same SQL condition: every secret not yet expired)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from hookstream.core.secretbox import Keyring, OpenedSecrets
from hookstream.core.signing import verify, webhook_headers
from hookstream.dev.localstack.devkeys import development_keyring
from tests.helpers import query
from tests.integration.test_api_support import ApiHarness, api_fixture  # noqa: F401

SIGNING_SECRETS = (
    "SELECT version, secret_key_id, coalesce(secret_sealed, convert_to(secret, 'UTF8'))"
    " FROM endpoint_secrets WHERE endpoint_id = %s"
    " AND (expires_at IS NULL OR expires_at > now()) ORDER BY version DESC")


def signing_secrets(db_url: str, endpoint_id: str, keyring: Keyring | None = None) -> list[str]:
    """What the dispatcher signs with: its claim's rows, opened the way its store opens
    them (sealed at rest, opened with the keyring)."""
    rows = query(db_url, SIGNING_SECRETS, (endpoint_id,))
    return OpenedSecrets(keyring or development_keyring()).secrets(
        uuid.UUID(endpoint_id), [r[0] for r in rows], [r[1] for r in rows],
        [bytes(r[2]) for r in rows])


async def test_rotation_overlaps_then_old_secret_expires(api: ApiHarness) -> None:
    ep = await api.endpoint()
    rotated = await api.ok("POST", f"/v1/endpoints/{ep['id']}/secrets/rotate",
                           body={"overlap_s": 3600}, status=201)
    assert rotated["version"] == 2 and rotated["secret"] != ep["secret"]
    # During the overlap both sign: a receiver holding either secret verifies.
    secrets = signing_secrets(api.db_url, ep["id"])
    assert secrets == [rotated["secret"], ep["secret"]]
    now = int(datetime.now(UTC).timestamp())
    headers = webhook_headers(secrets, "msg_1", now, b"{}")
    assert len(headers["webhook-signature"].split(" ")) == 2
    verify(ep["secret"], headers, b"{}", now=now)
    verify(rotated["secret"], headers, b"{}", now=now)
    listed = await api.ok("GET", f"/v1/endpoints/{ep['id']}/secrets")
    assert [(s["version"], s["active"]) for s in listed["data"]] == [(2, True), (1, True)]
    assert listed["data"][0]["expires_at"] is None and listed["data"][1]["expires_at"]
    assert "secret" not in listed["data"][0]
    # The overlap ends (moved into the past here): only the new secret signs.
    query(api.db_url, "UPDATE endpoint_secrets SET expires_at = now() - interval '1 s'"
                      " WHERE version = 1 RETURNING version")
    assert signing_secrets(api.db_url, ep["id"]) == [rotated["secret"]]


async def test_rotation_with_zero_overlap_revokes_the_old_secret_at_once(api: ApiHarness) -> None:
    ep = await api.endpoint()
    rotated = await api.ok("POST", f"/v1/endpoints/{ep['id']}/secrets/rotate",
                           body={"overlap_s": 0}, status=201)
    assert signing_secrets(api.db_url, ep["id"]) == [rotated["secret"]]


async def test_revoking_an_older_version_is_immediate_and_the_current_is_protected(
        api: ApiHarness) -> None:
    ep = await api.endpoint()
    base = f"/v1/endpoints/{ep['id']}/secrets"
    rotated = await api.ok("POST", base + "/rotate", status=201)  # default overlap: a day
    assert len(signing_secrets(api.db_url, ep["id"])) == 2
    code, err, _ = await api.call("DELETE", base + "/2")
    assert code == 409 and err["error"]["field"] == "version"
    revoked = await api.ok("DELETE", base + "/1")
    assert revoked["version"] == 1 and revoked["active"] is False
    assert signing_secrets(api.db_url, ep["id"]) == [rotated["secret"]]
    code, _, _ = await api.call("DELETE", base + "/1")
    assert code == 404
    code, err, _ = await api.call("DELETE", base + "/zero")
    assert code == 400 and err["error"]["field"] == "version"


async def test_rotation_refuses_bad_overlaps(api: ApiHarness) -> None:
    ep = await api.endpoint()
    for overlap in (-1, "soon", True, 10**12):
        code, err, _ = await api.call("POST", f"/v1/endpoints/{ep['id']}/secrets/rotate",
                                      body={"overlap_s": overlap})
        assert code == 400 and err["error"]["field"] == "overlap_s", overlap
    assert len(signing_secrets(api.db_url, ep["id"])) == 1
