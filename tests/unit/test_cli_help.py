"""The command line explains itself: --version, a --help without markup, every command and
action described, each service's settings listed with their defaults as the settings
classes have them (generated, so they cannot drift)."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from hookstream.cli import build_parser, main, version
from hookstream.cli.services import SERVICES
from hookstream.core.settings import ApiSettings, ClientSettings, FanoutSettings, describe


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out == f"hookstream {version()}\n" and version()[0].isdigit()


def test_the_top_help_is_plain_text(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "``" not in out and "Exit codes: 0 ok" in out
    for command in ("stack", "deliveries", "dead-letters", "operations", "outbox", "events"):
        assert f"    {command}" in out


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(actions[0].choices) if actions else {}


def _helps(parser: argparse.ArgumentParser) -> dict[str, str | None]:
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {c.dest: c.help for a in actions for c in a._choices_actions}


def test_every_command_and_action_is_described() -> None:
    top = build_parser()
    missing = [name for name, text in _helps(top).items() if not text]
    for name, sub in _subparsers(top).items():
        missing += [f"{name} {action}" for action, text in _helps(sub).items() if not text]
    assert not missing, f"no help text: {missing}"


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_a_services_help_lists_every_setting_with_its_default(
        service: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, service, "--help")
    assert code == 0
    classes = SERVICES[service][1]
    for cls in classes:
        for f in dataclasses.fields(cls):
            if "env" in f.metadata:
                assert f"  {f.metadata['env']} " in out, (service, f.metadata["env"])
    for doc in describe(*classes):
        line = next(line for line in out.splitlines() if line.startswith(f"  {doc.env} "))
        assert line.split("= ", 1)[1] == doc.default


def test_defaults_are_written_as_one_would_set_them() -> None:
    docs = {d.env: d for d in describe(FanoutSettings, ApiSettings, ClientSettings)}
    assert docs["HOOKSTREAM_API_ENABLED"].default == "true"
    assert docs["HOOKSTREAM_RETRY_WINDOW_S"].default == "86400"
    assert docs["HOOKSTREAM_API_KEY"].default == "(empty)"
    assert "HOOKSTREAM_FANOUT_HTTP_PORT" in docs and "HOOKSTREAM_API_PORT" in docs
    assert list(docs).count("HOOKSTREAM_DATABASE_URL") == 1  # shared fields once


def test_the_stack_commands_are_described(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "stack", "--help")
    assert code == 0
    for action in ("up", "down", "status", "env"):
        assert any(line.split()[:1] == [action] and len(line.split()) > 1
                   for line in out.splitlines()), action
    assert "--json" in run(capsys, "stack", "status", "--help")[1]
    assert "--purge" in run(capsys, "stack", "down", "--help")[1]


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "deliveries", "nonsense")
    assert code == 2 and out == "" and "invalid choice" in err


def test_debug_is_taken_anywhere_on_the_line() -> None:
    from hookstream.cli import _take_debug

    assert _take_debug(["migrate", "--debug"]) == (["migrate"], True)
    assert _take_debug(["--debug", "migrate"]) == (["migrate"], True)
    assert _take_debug(["endpoints", "disable", "x", "--", "--debug"]) == (
        ["endpoints", "disable", "x", "--", "--debug"], False)
