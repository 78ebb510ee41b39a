"""The events topic's key (core.event_key): what must meet on one partition does, the
rest spreads. Whether ``partition_of`` is really where librdkafka puts a key is checked
against the broker in tests/integration/test_relay_keys.py."""

from __future__ import annotations

import random
import uuid
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hookstream.core.event_key import SEPARATOR, event_key, partition_of
from hookstream.core.ids import uuid7

# What PostgreSQL text (UTF-8) can hold: anything but NUL and lone surrogates.
chars = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
texts = st.text(chars, max_size=40)
tenants = st.text(chars, min_size=1, max_size=40)
optional = st.none() | texts
event_ids = st.uuids().map(str)


@given(tenants, texts, optional, optional, event_ids, event_ids)
def test_events_sharing_a_coalescing_key_share_the_key(
        tenant: str, coalescing: str, object_a: str | None, object_b: str | None,
        event_a: str, event_b: str) -> None:
    # Whatever else differs: the fanout must compare them on one consumer.
    assert (event_key(tenant, coalescing, object_a, event_a)
            == event_key(tenant, coalescing, object_b, event_b))


@given(tenants, texts, event_ids, event_ids)
def test_events_of_one_object_without_coalescing_key_share_the_key(
        tenant: str, object_id: str, event_a: str, event_b: str) -> None:
    assert (event_key(tenant, None, object_id, event_a)
            == event_key(tenant, None, object_id, event_b))


@given(tenants, texts, event_ids, event_ids)
def test_a_coalescing_key_naming_the_object_meets_its_unkeyed_events(
        tenant: str, object_id: str, event_a: str, event_b: str) -> None:
    # The documented use (coalescing key = the entity): order.updated with key order-42
    # and order.created of object order-42 without one land together.
    assert (event_key(tenant, object_id, object_id, event_a)
            == event_key(tenant, None, object_id, event_b))


@given(tenants, event_ids, event_ids)
def test_events_with_neither_are_keyed_by_their_own_id(
        tenant: str, event_a: str, event_b: str) -> None:
    same = event_key(tenant, None, None, event_a) == event_key(tenant, None, None, event_b)
    assert same == (event_a == event_b)


@given(tenants, tenants, optional, optional, event_ids)
def test_the_key_names_its_tenant_and_keeps_tenants_apart(
        tenant: str, other: str, coalescing: str | None, object_id: str | None,
        event_id: str) -> None:
    key = event_key(tenant, coalescing, object_id, event_id)
    # A NUL never occurs in a tenant, so the first one ends it.
    assert key.split(SEPARATOR, 1)[0].decode() == tenant
    if other != tenant:
        assert key != event_key(other, coalescing, object_id, event_id)


def test_an_empty_coalescing_key_is_a_key_not_an_absent_one() -> None:
    # The fanout coalesces '' like any other value (it only skips NULL).
    event = str(uuid.uuid4())
    assert event_key("acme", "", "order-1", event) == b"acme\x00"
    assert event_key("acme", None, "order-1", event) == b"acme\x00order-1"
    assert event_key("acme", None, "", event) == b"acme\x00"
    assert event_key("acme", None, None, event) == b"acme\x00" + event.encode()


@given(st.binary(max_size=64), st.integers(1, 64))
def test_partition_of_is_a_partition(key: bytes, partitions: int) -> None:
    assert 0 <= partition_of(key, partitions) < partitions


def test_partition_of_refuses_no_partitions() -> None:
    with pytest.raises(ValueError, match="partitions must be >= 1"):
        partition_of(b"acme", 0)


def _spread(keys: list[bytes], partitions: int) -> Counter[int]:
    return Counter(partition_of(k, partitions) for k in keys)


@settings(max_examples=200, deadline=None)
@given(tenants, st.text(chars, max_size=12), st.integers(1, 12))
def test_one_tenant_with_many_objects_spreads_over_every_partition(
        tenant: str, prefix: str, partitions: int) -> None:
    # Objects named like a producer names them (order-1, order-2, ...): 600 of them over
    # up to 12 partitions use every partition, none with more than twice its share.
    keys = [event_key(tenant, None, f"{prefix}{i}", "-") for i in range(600)]
    counts = _spread(keys, partitions)
    assert len(counts) == partitions
    assert max(counts.values()) < 2 * 600 / partitions


@settings(max_examples=100, deadline=None)
@given(tenants, st.integers(1, 12), st.randoms(use_true_random=False),
       st.integers(0, 2**48 - 1))
def test_one_tenant_with_unkeyed_events_spreads_over_every_partition(
        tenant: str, partitions: int, rnd: random.Random, now_ms: int) -> None:
    # Neither coalescing key nor object: keyed by event id. uuid7 ids made in one
    # millisecond share their leading 48 bits, random ids share nothing; both spread.
    ids = [str(uuid7(now_ms, rnd.randbytes)) for _ in range(300)]
    ids += [str(uuid.UUID(int=rnd.getrandbits(128), version=4)) for _ in range(300)]
    counts = _spread([event_key(tenant, None, None, e) for e in ids], partitions)
    assert len(counts) == partitions
    assert max(counts.values()) < 2 * 600 / partitions


@given(tenants, texts, st.lists(event_ids, min_size=2, max_size=50), st.integers(1, 64))
def test_a_coalescing_key_is_one_partition(
        tenant: str, coalescing: str, events: list[str], partitions: int) -> None:
    assert len({partition_of(event_key(tenant, coalescing, f"obj-{i}", e), partitions)
                for i, e in enumerate(events)}) == 1
