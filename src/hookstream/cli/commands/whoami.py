"""``hookstream whoami``: which key the command line uses, and whether the API takes it."""

from __future__ import annotations

import argparse
from typing import Any

from hookstream.cli import output
from hookstream.cli.commands import base
from hookstream.core.settings import ClientSettings, from_env


def cmd_whoami(args: argparse.Namespace) -> int:
    me = base.client().get("/v1/me")
    me["api_url"] = from_env(ClientSettings).api_url
    return base.print_one(args, me, [
        ("api", output.field("api_url")), ("key", output.field("key_id")),
        ("tenant", lambda m: m["tenant"] or "(operator: every tenant)")])


def register(sub: Any) -> None:
    p = base.json_flag(sub.add_parser(
        "whoami", help="the API key in use (HOOKSTREAM_API_KEY) and its tenant",
        description="Ask the API (HOOKSTREAM_API_URL) who HOOKSTREAM_API_KEY is."))
    p.set_defaults(fn=cmd_whoami)
