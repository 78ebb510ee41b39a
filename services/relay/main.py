from __future__ import annotations

from hookstream.relay.service import Relay

from hookstream.core.settings import RelaySettings
from hookstream.runner import run_service


def main() -> int:
    return run_service("relay", RelaySettings, Relay, lambda s: s.http_port)
