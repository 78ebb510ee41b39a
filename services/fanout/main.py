from __future__ import annotations

from hookstream.fanout.service import Fanout

from hookstream.runner import run_service
from hookstream.settings import FanoutSettings


def main() -> int:
    return run_service("fanout", FanoutSettings, Fanout, lambda s: s.http_port)
