from __future__ import annotations

import ast
import dataclasses
import gc
import math
import re
import string
import typing
from pathlib import Path
from typing import NoReturn

import pytest
import yaml
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from hookstream.cli import main as cli_main
from hookstream.core.secretbox import new_key_entry
from hookstream.core.settings import (
    ALL_SETTINGS,
    LEASE_MARGIN_S,
    MAX_PORT,
    OTHER_ENV_NAMES,
    PREFIX,
    ApiSettings,
    CommonSettings,
    DispatcherSettings,
    RelaySettings,
    SettingsError,
    all_env_names,
    check_environment,
    env_names,
    from_env,
    known_env_names,
)
from hookstream.runner import run_service, tune_gc


def test_defaults_without_environment() -> None:
    s = from_env(DispatcherSettings, {})
    assert s.request_timeout_s == 5.0 and s.allow_private_targets is False


def test_values_are_cast() -> None:
    s = from_env(DispatcherSettings, {"HOOKSTREAM_REQUEST_TIMEOUT_S": "2.5",
                                      "HOOKSTREAM_ALLOW_PRIVATE_TARGETS": "yes"})
    assert s.request_timeout_s == 2.5 and s.allow_private_targets is True


@pytest.mark.parametrize("var, value", [
    ("HOOKSTREAM_RELAY_BATCH_SIZE", "many"),
    ("HOOKSTREAM_RELAY_BATCH_SIZE", "0"),
    ("HOOKSTREAM_RELAY_POLL_INTERVAL_S", "-1"),
    ("HOOKSTREAM_LOG_FORMAT", "xml"),
    ("HOOKSTREAM_TOPIC_PREFIX", "has space"),
])
def test_bad_values_fail_naming_the_variable(var: str, value: str) -> None:
    with pytest.raises(SettingsError, match=var):
        from_env(RelaySettings, {var: value})


def test_bad_boolean_names_the_variable() -> None:
    with pytest.raises(SettingsError, match="HOOKSTREAM_ALLOW_PRIVATE_TARGETS"):
        from_env(DispatcherSettings, {"HOOKSTREAM_ALLOW_PRIVATE_TARGETS": "maybe"})


def test_event_loop_is_one_of_the_two_and_names_the_variable() -> None:
    assert from_env(DispatcherSettings, {}).event_loop == "uvloop"
    assert from_env(DispatcherSettings,
                    {"HOOKSTREAM_DISPATCHER_EVENT_LOOP": " AsyncIO "}).event_loop == "asyncio"
    with pytest.raises(SettingsError, match=r"HOOKSTREAM_DISPATCHER_EVENT_LOOP.*uvloop, asyncio"):
        from_env(DispatcherSettings, {"HOOKSTREAM_DISPATCHER_EVENT_LOOP": "trio"})


def test_gc_threshold_is_applied_and_startup_objects_frozen() -> None:
    before = gc.get_threshold()
    try:
        tune_gc(from_env(RelaySettings, {"HOOKSTREAM_GC_GEN0_THRESHOLD": "12345"})
                .gc_gen0_threshold)
        assert gc.get_threshold() == (12345, before[1], before[2])
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_every_variable_is_prefixed_and_unique_per_meaning() -> None:
    names = all_env_names()
    assert all(n.startswith("HOOKSTREAM_") for n in names)
    assert "HOOKSTREAM_DATABASE_URL" in names


# -- finite numbers, ports, lease vs deadline ------------------------------------------------


def _owner(var: str) -> type:
    """The first settings class that reads ``var``."""
    return next(cls for cls in ALL_SETTINGS if var in env_names(cls))


def _field(var: str) -> str:
    return next(f.name for f in dataclasses.fields(_owner(var)) if f.metadata.get("env") == var)


def _float_vars() -> list[str]:
    """Every float setting of every class, so a float added later is covered too."""
    found: set[str] = set()
    for cls in ALL_SETTINGS:
        hints = typing.get_type_hints(cls)
        found |= {f.metadata["env"] for f in dataclasses.fields(cls)
                  if "env" in f.metadata and hints[f.name] is float}
    return sorted(found)


FLOAT_VARS = _float_vars()
HTTP_PORT_VARS = sorted(v for v in all_env_names() if v.endswith("_HTTP_PORT"))


def test_the_float_and_port_lists_are_not_empty() -> None:
    assert "HOOKSTREAM_REQUEST_TIMEOUT_S" in FLOAT_VARS and "HOOKSTREAM_RETRY_JITTER" in FLOAT_VARS
    assert len(HTTP_PORT_VARS) == 3


@pytest.mark.parametrize("raw", ["nan", "inf", "-inf", "1e999"])
@pytest.mark.parametrize("var", FLOAT_VARS)
def test_a_float_setting_refuses_what_is_not_finite(var: str, raw: str) -> None:
    with pytest.raises(SettingsError, match=rf"^{var}=.*finite"):
        from_env(_owner(var), {var: raw})


def _any_case(word: str) -> st.SearchStrategy[str]:
    return st.tuples(*[st.sampled_from([c.lower(), c.upper()]) for c in word]).map("".join)


# What float() reads as nan or ±inf: the words in any case and sign, and literals too
# large for a double (m·10^e with m >= 1 and e >= 309 exceeds 1.8e308), padded with the
# blanks float() strips.
non_finite = st.builds(
    lambda pad, sign, body: f"{pad}{sign}{body}{pad}",
    st.sampled_from(["", " ", "\t"]),
    st.sampled_from(["", "+", "-"]),
    st.one_of(st.sampled_from(["nan", "inf", "infinity"]).flatmap(_any_case),
              st.builds(lambda m, e: f"{m}e{e}", st.integers(1, 10**9), st.integers(309, 10**5)),
              st.builds(lambda m, e: f"{m}.5E+{e}", st.integers(1, 999), st.integers(309, 999))),
)


@settings(max_examples=300, deadline=None)
@given(var=st.sampled_from(FLOAT_VARS), raw=non_finite)
def test_any_non_finite_float_string_is_refused(var: str, raw: str) -> None:
    assert not math.isfinite(float(raw))  # the strategy makes what it promises
    with pytest.raises(SettingsError, match=rf"^{var}="):
        from_env(_owner(var), {var: raw})


@settings(max_examples=200, deadline=None)
@given(var=st.sampled_from(HTTP_PORT_VARS),
       port=st.one_of(st.integers(max_value=0), st.integers(min_value=MAX_PORT + 1)))
def test_an_http_port_outside_1_to_65535_is_refused(var: str, port: int) -> None:
    with pytest.raises(SettingsError, match=rf"^{var}="):
        from_env(_owner(var), {var: str(port)})


@settings(max_examples=100, deadline=None)
@given(port=st.one_of(st.integers(max_value=-1), st.integers(min_value=MAX_PORT + 1)))
def test_the_api_port_outside_0_to_65535_is_refused(port: int) -> None:
    with pytest.raises(SettingsError, match=r"^HOOKSTREAM_API_PORT="):
        from_env(ApiSettings, {"HOOKSTREAM_API_PORT": str(port)})


@settings(max_examples=100, deadline=None)
@given(var=st.sampled_from([*HTTP_PORT_VARS, "HOOKSTREAM_API_PORT"]),
       port=st.integers(1, MAX_PORT))
def test_every_port_in_range_is_accepted(var: str, port: int) -> None:
    assert getattr(from_env(_owner(var), {var: str(port)}), _field(var)) == port


def test_api_port_zero_still_means_any_free_port() -> None:
    assert from_env(ApiSettings, {"HOOKSTREAM_API_PORT": "0"}).api_port == 0


@pytest.mark.parametrize("env", [
    {"HOOKSTREAM_LEASE_S": "4"},  # shorter than the default 5 s deadline
    {"HOOKSTREAM_LEASE_S": "14.9"},  # longer than the deadline, but not by the margin
    {"HOOKSTREAM_REQUEST_TIMEOUT_S": "55"},  # the default 60 s lease, a longer deadline
])
def test_a_lease_that_can_expire_mid_attempt_is_refused_naming_both(env: dict[str, str]) -> None:
    with pytest.raises(SettingsError, match=r"HOOKSTREAM_LEASE_S=.*HOOKSTREAM_REQUEST_TIMEOUT_S="):
        from_env(DispatcherSettings, env)


def test_a_lease_of_the_deadline_plus_the_margin_is_accepted() -> None:
    s = from_env(DispatcherSettings, {"HOOKSTREAM_REQUEST_TIMEOUT_S": "20",
                                      "HOOKSTREAM_LEASE_S": str(20 + LEASE_MARGIN_S)})
    assert s.lease_s == s.request_timeout_s + LEASE_MARGIN_S
    assert LEASE_MARGIN_S >= 10  # the margin stays a real one (see its comment)


@settings(max_examples=200, deadline=None)
@given(timeout=st.floats(0.001, 3600.0), lease=st.floats(0.001, 7200.0))
def test_the_lease_is_accepted_exactly_when_it_outlives_deadline_and_margin(
        timeout: float, lease: float) -> None:
    env = {"HOOKSTREAM_REQUEST_TIMEOUT_S": repr(timeout), "HOOKSTREAM_LEASE_S": repr(lease)}
    if lease >= timeout + LEASE_MARGIN_S:
        assert from_env(DispatcherSettings, env).lease_s == lease
    else:
        with pytest.raises(SettingsError, match="HOOKSTREAM_LEASE_S"):
            from_env(DispatcherSettings, env)


# -- unknown variables ------------------------------------------------------------------------
# Misspelt names are built from PREFIX at run time: written out, the tree scan below would
# find them and (rightly) complain that nothing reads them.


def test_an_unknown_variable_is_refused_with_the_nearest_name() -> None:
    with pytest.raises(SettingsError) as exc:
        from_env(DispatcherSettings, {PREFIX + "REQUEST_TIMEOUT": "5"})
    assert str(exc.value) == (f"{PREFIX}REQUEST_TIMEOUT is not a hookstream setting;"
                              " did you mean HOOKSTREAM_REQUEST_TIMEOUT_S?")


def test_an_unknown_variable_without_a_near_name_is_refused_without_a_guess() -> None:
    with pytest.raises(SettingsError) as exc:
        from_env(RelaySettings, {PREFIX + "QQQQ": "1"})
    assert str(exc.value) == f"{PREFIX}QQQQ is not a hookstream setting"


def test_every_unknown_variable_is_named_on_one_line() -> None:
    with pytest.raises(SettingsError) as exc:
        from_env(RelaySettings, {PREFIX + "LEASE": "60", PREFIX + "RELAY_LANE": "2"})
    message = str(exc.value)
    assert "\n" not in message
    assert "did you mean HOOKSTREAM_LEASE_S?" in message
    assert "did you mean HOOKSTREAM_RELAY_LANES?" in message


def test_a_multi_line_value_still_makes_a_one_line_message() -> None:
    with pytest.raises(SettingsError) as exc:
        from_env(RelaySettings, {PREFIX + "SECRET_OVERLAP": "1\n2"})
    assert "\n" not in str(exc.value)


def test_one_environment_file_serves_every_component() -> None:
    # Each service reads only its own variables but they share one file: what any service,
    # the local stack or a benchmark reads is no error anywhere. The compose services'
    # environments together are such a file.
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    shared = {k: str(v) for svc in compose["services"].values() if svc.get("build")
              for k, v in svc.get("environment", {}).items()}
    # compose takes the keyring from the operator's environment (${...:?}): a real one here
    assert shared["HOOKSTREAM_SECRET_KEYS"].startswith("${HOOKSTREAM_SECRET_KEYS:?")
    shared["HOOKSTREAM_SECRET_KEYS"] = new_key_entry("k1")
    shared |= {"HOOKSTREAM_STACK_DIR": "/tmp/stack", "HOOKSTREAM_BENCH_PROFILE": "1",
               "HOOKSTREAM_LEASE_S": "60", "HOOKSTREAM_API_PORT": "0",
               "PATH": "/bin", "hookstream_lower_case": "not ours"}
    for cls in ALL_SETTINGS:
        from_env(cls, shared)
    check_environment(shared)


@st.composite
def one_character_changed(draw: st.DrawFn) -> tuple[str, str]:
    """(a known name, the same name with one character after the prefix replaced)."""
    name = draw(st.sampled_from(sorted(known_env_names())))
    i = draw(st.integers(len(PREFIX), len(name) - 1))
    c = draw(st.sampled_from(string.ascii_uppercase + string.digits + "_"))
    assume(c != name[i])
    return name, name[:i] + c + name[i + 1:]


def _one_substitution_apart(a: str, b: str) -> bool:
    return len(a) == len(b) and sum(x != y for x, y in zip(a, b, strict=True)) == 1


@settings(max_examples=500, deadline=None)
@given(one_character_changed())
def test_a_name_with_one_character_changed_is_refused_suggesting_the_original(
        pair: tuple[str, str]) -> None:
    name, typo = pair
    known = known_env_names()
    assume(typo not in known)
    # API_POST is one letter from both API_HOST and API_PORT: no suggestion can know which.
    # (2 of the ~41 000 such typos today; the tie goes to one of the two.)
    assume(not any(_one_substitution_apart(typo, other) for other in known - {name}))
    with pytest.raises(SettingsError) as exc:
        from_env(CommonSettings, {typo: "1"})
    assert str(exc.value) == f"{typo} is not a hookstream setting; did you mean {name}?"


# -- every HOOKSTREAM_* name the tree mentions is one some component reads ---------------------

ROOT = Path(__file__).resolve().parents[2]
# What ships or runs (code, deployment, scripts) and what documents it. BENCHMARKS.md is
# left out: it quotes past runs with the settings they had, which may no longer exist.
SCANNED = ("src", "services", "benchmarks", "scripts", "tests", "deploy", "docs", "stack",
           "Makefile", "docker-compose.yml", "Dockerfile", "README.md")
GENERATED = {"__pycache__", ".kafka-libs", ".pytest_cache", ".hypothesis"}
NAME = re.compile(r"HOOKSTREAM_[A-Z0-9_]+")
SETTINGS_PY = ROOT / "src" / "hookstream" / "core" / "settings.py"


def _scanned_files() -> list[Path]:
    files: list[Path] = []
    for top in SCANNED:
        path = ROOT / top
        found = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        files += [p for p in found
                  if not GENERATED & set(p.parts) and not any(
                      part.endswith(".egg-info") for part in p.parts)]
    return files


def _mentions() -> dict[str, set[Path]]:
    """HOOKSTREAM_* name → the files that mention it."""
    found: dict[str, set[Path]] = {}
    for path in _scanned_files():
        for name in NAME.findall(path.read_text(errors="ignore")):
            found.setdefault(name, set()).add(path.relative_to(ROOT))
    return found


def test_every_hookstream_variable_in_the_tree_is_known() -> None:
    known = known_env_names()
    unknown = {name: sorted(map(str, paths)) for name, paths in _mentions().items()
               if name not in known}
    assert not unknown, ("read or documented but neither a setting nor in "
                         f"settings.OTHER_ENV_NAMES (start-up would refuse them): {unknown}")


def test_the_other_names_are_still_read_and_are_not_settings() -> None:
    mentions = _mentions()
    settings_py = SETTINGS_PY.relative_to(ROOT)
    stale = sorted(n for n in OTHER_ENV_NAMES if not mentions.get(n, set()) - {settings_py})
    assert not stale, f"nothing reads these any more; drop them from OTHER_ENV_NAMES: {stale}"
    assert not OTHER_ENV_NAMES & all_env_names()


# -- entry points end a configuration error as one line and a non-zero exit -------------------


def _must_not_run(*_args: object, **_kwargs: object) -> NoReturn:
    raise AssertionError("started despite a configuration error")


def test_a_service_refuses_an_unknown_variable_in_one_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(PREFIX + "RELAY_HTTP_PROT", "9101")
    assert run_service("relay", RelaySettings, _must_not_run, lambda s: s.http_port) == 2
    out = capsys.readouterr().out
    assert out == (f"hookstream relay: configuration error: {PREFIX}RELAY_HTTP_PROT"
                   " is not a hookstream setting; did you mean HOOKSTREAM_RELAY_HTTP_PORT?\n")


def test_the_fanout_refuses_an_unknown_variable_before_its_api_starts(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import hookstream.fanout.main as fanout_main

    monkeypatch.setattr(fanout_main, "run_service", _must_not_run)
    monkeypatch.setenv(PREFIX + "API_PROT", "8080")
    assert fanout_main.main() == 2
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "did you mean HOOKSTREAM_API_PORT?" in out


@pytest.mark.parametrize("argv", [["stack", "env"], ["migrate"], ["reconcile"],
                                  ["tenants", "list"]])
def test_the_cli_refuses_an_unknown_variable_in_one_line(
        argv: list[str], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    # Nothing to reach if the command ran anyway (as it did before the check).
    monkeypatch.setenv("HOOKSTREAM_DATABASE_URL", "postgresql://nobody@127.0.0.1:9/none")
    monkeypatch.setenv("HOOKSTREAM_KAFKA_BOOTSTRAP", "127.0.0.1:9")
    monkeypatch.setenv(PREFIX + "STACK_PG_PRT", "55432")
    code = _exit_code(lambda: cli_main(argv))
    err = capsys.readouterr().err
    assert code == 2
    assert err == (f"hookstream: configuration error: {PREFIX}STACK_PG_PRT is not a"
                   " hookstream setting; did you mean HOOKSTREAM_STACK_PG_PORT?\n")


def _exit_code(run: typing.Callable[[], int]) -> int | str | None:
    try:
        return run()
    except SystemExit as exc:
        return exc.code


# -- the settings the end-to-end tests, the demo and the benchmarks start services with ------

PIPELINE_CALLS = {"start_pipeline", "pipeline_env"}
NOT_SETTINGS = {"database_url", "bootstrap", "topic_prefix", "dispatchers"}


def _pipeline_settings() -> list[tuple[str, dict[str, str]]]:
    """(where, environment) of every start_pipeline/pipeline_env call with literal values:
    they start real services, which would refuse what from_env refuses here."""
    found = []
    for top in ("src", "tests", "benchmarks"):
        for path in sorted((ROOT / top).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if not (isinstance(node, ast.Call) and _called(node) in PIPELINE_CALLS):
                    continue
                env = {PREFIX + k.arg.upper(): k.value.value for k in node.keywords
                       if k.arg and k.arg not in NOT_SETTINGS
                       and isinstance(k.value, ast.Constant) and isinstance(k.value.value, str)}
                found.append((f"{path.relative_to(ROOT)}:{node.lineno}", env))
    return found


def _called(call: ast.Call) -> str | None:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def test_the_pipelines_the_tree_starts_have_valid_settings() -> None:
    calls = _pipeline_settings()
    assert len(calls) > 10
    for where, env in calls:
        for cls in ALL_SETTINGS:
            try:
                from_env(cls, env)
            except SettingsError as exc:
                raise AssertionError(f"{where}: {exc}") from None
