from __future__ import annotations

import pytest

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


def test_every_variable_is_prefixed_and_unique_per_meaning() -> None:
    names = all_env_names()
    assert all(n.startswith("HOOKSTREAM_") for n in names)
    assert "HOOKSTREAM_DATABASE_URL" in names
