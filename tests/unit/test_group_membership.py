"""Group membership settings (issue #16): which protocol, which timeouts, and the client
configuration each gives — checked by librdkafka itself (a Consumer is built from the
configuration; no broker is contacted until it is used)."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaException
from hypothesis import given
from hypothesis import strategies as st

from hookstream.core.group import Membership
from hookstream.core.settings import CommonSettings, SettingsError, from_env
from hookstream.io.kafka import consumer_config


def _builds(config: dict[str, object]) -> None:
    Consumer(config).close()


def test_the_default_is_kip848_with_a_3_s_session() -> None:
    settings = from_env(CommonSettings, {})
    assert settings.membership == Membership("consumer", 3_000, 500)
    config = consumer_config("127.0.0.1:9", "g", "c", settings.membership)
    assert config["group.protocol"] == "consumer"
    # The broker holds these under KIP-848; librdkafka refuses them from the member.
    assert not {"session.timeout.ms", "heartbeat.interval.ms",
                "partition.assignment.strategy"} & set(config)
    _builds(config)


def test_librdkafka_refuses_member_timeouts_under_kip848() -> None:
    # Why consumer_config leaves them out: this is the error a service would die of.
    config = {**consumer_config("127.0.0.1:9", "g", "c"), "session.timeout.ms": 3_000}
    with pytest.raises(KafkaException, match=r"session\.timeout\.ms"):
        _builds(config)


def test_classic_members_send_their_own_timeouts() -> None:
    membership = from_env(CommonSettings, {
        "HOOKSTREAM_KAFKA_GROUP_PROTOCOL": "classic",
        "HOOKSTREAM_KAFKA_SESSION_TIMEOUT_MS": "6000",
        "HOOKSTREAM_KAFKA_HEARTBEAT_INTERVAL_MS": "1500"}).membership
    config = consumer_config("127.0.0.1:9", "g", "c", membership)
    assert (config["group.protocol"], config["session.timeout.ms"],
            config["heartbeat.interval.ms"], config["partition.assignment.strategy"]) == (
        "classic", 6_000, 1_500, "cooperative-sticky")
    _builds(config)


def test_an_unknown_protocol_names_the_variable() -> None:
    with pytest.raises(SettingsError, match="HOOKSTREAM_KAFKA_GROUP_PROTOCOL='static'"):
        from_env(CommonSettings, {"HOOKSTREAM_KAFKA_GROUP_PROTOCOL": "static"})


@given(session=st.integers(1, 120_000), heartbeat=st.integers(1, 120_000))
def test_a_heartbeat_at_or_above_the_session_is_refused(session: int, heartbeat: int) -> None:
    env = {"HOOKSTREAM_KAFKA_SESSION_TIMEOUT_MS": str(session),
           "HOOKSTREAM_KAFKA_HEARTBEAT_INTERVAL_MS": str(heartbeat)}
    if heartbeat < session:
        assert from_env(CommonSettings, env).membership.heartbeat_interval_ms == heartbeat
    else:
        with pytest.raises(SettingsError, match="must be below the session timeout"):
            from_env(CommonSettings, env)
