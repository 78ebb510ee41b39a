from __future__ import annotations

from hookstream.fanout.service import Fanout

from hookstream.api.server import with_api
from hookstream.core.settings import ApiSettings, FanoutSettings, SettingsError, from_env
from hookstream.ops.secret_keys import startup_check
from hookstream.runner import run_service


def main() -> int:
    # The control-plane API runs in this process, on its own thread (hookstream.api.server).
    try:
        api_settings = from_env(ApiSettings)
    except SettingsError as exc:
        print(f"hookstream fanout: configuration error: {exc}", flush=True)
        return 2
    # The API seals new secrets: no start without a usable HOOKSTREAM_SECRET_KEYS.
    return run_service("fanout", FanoutSettings, with_api(Fanout, api_settings),
                       lambda s: s.http_port, delivery_stats=True,
                       preflight=lambda s: startup_check("fanout", s.database_url,
                                                         api_settings.secret_keys)
                       if api_settings.api_enabled else None)
