from __future__ import annotations

import gc

import pytest

from hookstream.runner import tune_gc
from hookstream.settings import (
    DispatcherSettings,
    RelaySettings,
    SettingsError,
    all_env_names,
    from_env,
)


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
