"""Signing secrets sealed at rest: AES-256-GCM under an operator-provided keyring.

Pure: no I/O, the random source comes in as an argument. The keyring is
``HOOKSTREAM_SECRET_KEYS``: ``id:base64key`` entries separated by commas or spaces,
the first one seals, every one opens, so the master key rotates by putting a new key
first, re-sealing (``hookstream secrets reencrypt``) and then dropping the old one.

Why AES-GCM rather than Fernet: GCM authenticates *associated data*, so each sealed
secret is bound to its endpoint and key id (a ciphertext copied onto another endpoint's
row, or relabelled with another key id, fails to open instead of signing for the wrong
customer); Fernet has no associated data and adds a timestamp we do not need. The
nonce is 96 random bits per seal: at a few secrets per endpoint rotation, far below the
2^32 seals per key where random nonces start to risk a collision.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

KEY_BYTES = 32
NONCE_BYTES = 12
_KEY_ID = re.compile(r"[A-Za-z0-9_.-]{1,32}")


class SecretKeyError(ValueError):
    """The keyring is malformed, lacks a key, or a key does not open what it should.

    Messages name key ids, never key material."""


@dataclass(frozen=True)
class Keyring:
    # (key id, key) pairs, the sealing key first. repr=False: settings objects are
    # printed and logged, and the keys must never be.
    keys: tuple[tuple[str, bytes], ...] = ()

    def __repr__(self) -> str:
        return f"Keyring(ids={list(self.ids)!r})"

    def __str__(self) -> str:
        # what `--help` shows as the default: ids only, never key material
        return "(none: required)" if not self.keys else "ids " + ", ".join(self.ids)

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(key_id for key_id, _ in self.keys)

    @property
    def current_id(self) -> str:
        if not self.keys:
            raise SecretKeyError("no key: HOOKSTREAM_SECRET_KEYS is empty")
        return self.keys[0][0]

    def key(self, key_id: str) -> bytes:
        for known, key in self.keys:
            if known == key_id:
                return key
        raise SecretKeyError(
            f"a secret is sealed with key id {key_id!r}, which HOOKSTREAM_SECRET_KEYS does "
            f"not hold (it holds {', '.join(self.ids) or 'nothing'})")


def parse_keyring(raw: str) -> Keyring:
    """``id:base64key[,id:base64key...]``; the error never echoes a key."""
    keys: list[tuple[str, bytes]] = []
    for n, entry in enumerate(raw.replace(",", " ").split(), 1):
        key_id, sep, encoded = entry.partition(":")
        if not sep or not _KEY_ID.fullmatch(key_id):
            raise SecretKeyError(f"entry {n} is not id:base64key (id: 1-32 of A-Z a-z 0-9 _ . -)")
        try:
            key = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise SecretKeyError(f"key {key_id!r} is not valid base64") from None
        if len(key) != KEY_BYTES:
            raise SecretKeyError(f"key {key_id!r} is {len(key)} bytes, expected {KEY_BYTES}")
        if key_id in dict(keys):
            raise SecretKeyError(f"key id {key_id!r} appears twice")
        keys.append((key_id, key))
    return Keyring(tuple(keys))


def new_key_entry(key_id: str, randbytes: Callable[[int], bytes] = os.urandom) -> str:
    """A fresh ``id:base64key`` entry for HOOKSTREAM_SECRET_KEYS."""
    if not _KEY_ID.fullmatch(key_id):
        raise SecretKeyError(f"key id {key_id!r} is not 1-32 of A-Z a-z 0-9 _ . -")
    return f"{key_id}:{base64.b64encode(randbytes(KEY_BYTES)).decode('ascii')}"


def _aad(key_id: str, context: bytes) -> bytes:
    return key_id.encode("ascii") + b"\0" + context


def seal(keyring: Keyring, plaintext: str, context: bytes,
         randbytes: Callable[[int], bytes] = os.urandom) -> tuple[str, bytes]:
    """(key id, nonce + ciphertext) under the current key, bound to ``context``
    (the endpoint id's bytes)."""
    key_id = keyring.current_id
    nonce = randbytes(NONCE_BYTES)
    sealed = AESGCM(keyring.key(key_id)).encrypt(
        nonce, plaintext.encode("utf-8"), _aad(key_id, context))
    return key_id, nonce + sealed


def open_sealed(keyring: Keyring, key_id: str, blob: bytes, context: bytes) -> str:
    key = keyring.key(key_id)
    try:
        plain = AESGCM(key).decrypt(blob[:NONCE_BYTES], blob[NONCE_BYTES:],
                                    _aad(key_id, context))
    except InvalidTag:
        raise SecretKeyError(
            f"key {key_id!r} of HOOKSTREAM_SECRET_KEYS does not open the secrets sealed with "
            "that id: the key is wrong (or the row was tampered with)") from None
    return plain.decode("utf-8")


class OpenedSecrets:
    """Each secret version opened once, not once per attempt: a version's plaintext never
    changes (rotation adds a version, re-encryption only re-wraps it), so the cache is
    keyed by (endpoint id, version) and never goes stale. Bounded: past ``max_entries``
    it starts over, which costs one AES-GCM open per live version."""

    def __init__(self, keyring: Keyring, max_entries: int = 100_000):
        self.keyring = keyring
        self.max_entries = max_entries
        self._opened: dict[tuple[uuid.UUID, int], str] = {}

    def secrets(self, endpoint_id: uuid.UUID, versions: list[int] | None,
                key_ids: list[str | None] | None, blobs: list[bytes] | None) -> list[str]:
        if not versions or key_ids is None or blobs is None:
            return []
        out: list[str] = []
        for version, key_id, blob in zip(versions, key_ids, blobs, strict=True):
            secret = self._opened.get((endpoint_id, version))
            if secret is None:
                # no key id: a row from before migration 0011, still plaintext
                secret = (bytes(blob).decode("utf-8") if key_id is None
                          else open_sealed(self.keyring, key_id, bytes(blob), endpoint_id.bytes))
                if len(self._opened) >= self.max_entries:
                    self._opened.clear()
                self._opened[(endpoint_id, version)] = secret
            out.append(secret)
        return out
