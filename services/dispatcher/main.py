from __future__ import annotations

from hookstream.dispatcher.service import Dispatcher

from hookstream.core.settings import DispatcherSettings
from hookstream.runner import run_service


def main() -> int:
    return run_service("dispatcher", DispatcherSettings, Dispatcher, lambda s: s.http_port)
