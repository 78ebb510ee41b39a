from __future__ import annotations

from hookstream.dispatcher.service import Dispatcher

from hookstream.core.settings import DispatcherSettings
from hookstream.ops.secret_keys import startup_check
from hookstream.runner import run_service


def main() -> int:
    # A missing or wrong HOOKSTREAM_SECRET_KEYS stops the dispatcher at start, once,
    # rather than failing every attempt that needs a secret.
    return run_service("dispatcher", DispatcherSettings, Dispatcher, lambda s: s.http_port,
                       preflight=lambda s: startup_check("dispatcher", s.database_url,
                                                         s.secret_keys))
