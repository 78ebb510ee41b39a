"""The development keyring that seals signing secrets in the local stack, the demo and the
tests: generated once per stack folder (``<stack>/secret_keys``, mode 0600), so no key is
committed and each stack has its own. Production sets ``HOOKSTREAM_SECRET_KEYS`` itself
(docs/runbook.md); nothing outside ``hookstream.dev`` falls back to this file."""

from __future__ import annotations

import os
from pathlib import Path

from hookstream.core.secretbox import Keyring, new_key_entry, parse_keyring
from hookstream.dev.localstack import paths

ENV = "HOOKSTREAM_SECRET_KEYS"
FILE_NAME = "secret_keys"


def _key_file() -> Path:
    return paths.ensure_dir(paths.stack_dir()) / FILE_NAME


def development_keys() -> str:
    """The environment's HOOKSTREAM_SECRET_KEYS when set, else the stack's own key."""
    if os.environ.get(ENV):
        return os.environ[ENV]
    path = _key_file()
    try:
        # O_EXCL: concurrent first uses (parallel test sessions) agree on one key
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text("ascii").strip()
    with os.fdopen(fd, "w") as out:
        out.write(new_key_entry("dev1") + "\n")
    return path.read_text("ascii").strip()


def development_keyring() -> Keyring:
    return parse_keyring(development_keys())
