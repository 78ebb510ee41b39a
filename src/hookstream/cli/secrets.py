"""``hookstream secrets``: the keys that seal endpoint signing secrets at rest.

``new-key`` prints a fresh HOOKSTREAM_SECRET_KEYS entry; ``reencrypt`` seals rows still
in plaintext (from before migration 0011) and re-seals rows of older keys with the first
key, after which an older key can be dropped from the setting (docs/runbook.md)."""

from __future__ import annotations

import argparse
import re
from typing import Any

from hookstream.core.secretbox import SecretKeyError, new_key_entry
from hookstream.core.settings import ApiSettings, from_env


def cmd_new_key(args: argparse.Namespace) -> int:
    try:
        print(new_key_entry(args.id))
    except SecretKeyError as exc:
        print(f"hookstream secrets new-key: {exc}")
        return 2
    return 0


def cmd_reencrypt(args: argparse.Namespace) -> int:
    from hookstream.ops.secret_keys import reencrypt

    settings = from_env(ApiSettings)
    try:
        written = reencrypt(settings.database_url, settings.secret_keys, batch=args.batch)
    except SecretKeyError as exc:
        print(f"hookstream secrets reencrypt: HOOKSTREAM_SECRET_KEYS: {exc}")
        return 2
    print(f"secrets sealed with key {settings.secret_keys.current_id!r}: {written} rows "
          "written" + (" (all were already)" if not written else ""))
    return 0


def _key_id(raw: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,32}", raw):
        raise argparse.ArgumentTypeError("1-32 of A-Z a-z 0-9 _ . -")
    return raw


def register(sub: Any) -> None:
    secrets = sub.add_parser(
        "secrets", help="keys sealing endpoint signing secrets at rest",
        description=__doc__).add_subparsers(dest="action", required=True, metavar="ACTION")
    p = secrets.add_parser("new-key", help="print a new id:key entry for HOOKSTREAM_SECRET_KEYS")
    p.add_argument("--id", type=_key_id, default="k1", help="the key's id (default k1)")
    p.set_defaults(fn=cmd_new_key)
    p = secrets.add_parser(
        "reencrypt", help="seal plaintext secrets, re-seal older keys' with the first key",
        description="Idempotent; safe while the services run (rows are locked per batch).")
    p.add_argument("--batch", type=int, default=500, help="rows per transaction (default 500)")
    p.set_defaults(fn=cmd_reencrypt)
