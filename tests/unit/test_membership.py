"""When is a consumer stuck outside its group (hookstream.policy.membership)?"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hookstream.policy.membership import GroupStats, MembershipWatch, group_stats

MEMBER = GroupStats("up", "steady", coordinator_up=True)
JOINING = GroupStats("up", "wait-join", coordinator_up=True)
OUTAGE = GroupStats("wait-coord", "init", coordinator_up=False)


def test_group_stats_from_librdkafka_statistics() -> None:
    stats = {"cgrp": {"state": "up", "join_state": "steady", "assignment_size": 3},
             "brokers": {"127.0.0.1:9092/1": {"state": "UP"},
                         "GroupCoordinator": {"state": "UP"}}}
    assert group_stats(stats) == MEMBER and MEMBER.member
    stats["brokers"]["GroupCoordinator"]["state"] = "CONNECT"  # type: ignore[index]
    assert group_stats(stats) == GroupStats("up", "steady", coordinator_up=False)
    assert group_stats({"brokers": {}}) is None  # a consumer without a group (assign only)
    assert group_stats({"cgrp": {"state": "query-coord"}}) == GroupStats(
        "query-coord", "", coordinator_up=False)


def test_outside_the_group_with_the_coordinator_up_past_the_bound_is_stuck() -> None:
    watch = MembershipWatch(stuck_after_s=60)
    watch.observe(MEMBER, 0)
    watch.observe(JOINING, 10)
    watch.observe(JOINING, 70)
    assert not watch.stuck and watch.outside_for(70) == 60  # exactly the bound: not yet
    watch.observe(JOINING, 70.5)
    assert watch.stuck
    watch.observe(MEMBER, 71)  # too late: the caller acts on it, then resets
    assert watch.stuck
    watch.reset()
    assert not watch.stuck and not watch.member and watch.outside_for(80) == 0


def test_an_outage_is_never_judged_and_the_bound_restarts_when_the_coordinator_is_back(
        ) -> None:
    watch = MembershipWatch(stuck_after_s=60)
    for t in range(0, 600, 5):
        watch.observe(OUTAGE, t)
    assert not watch.stuck
    watch.observe(JOINING, 600)
    watch.observe(JOINING, 650)
    assert not watch.stuck
    watch.observe(JOINING, 661)
    assert watch.stuck


def test_no_report_changes_nothing() -> None:
    watch = MembershipWatch(stuck_after_s=1)
    watch.observe(JOINING, 0)
    watch.observe(None, 100)
    assert not watch.stuck  # judged on reports only
    watch.observe(JOINING, 101)
    assert watch.stuck


STATES = st.sampled_from([MEMBER, JOINING, OUTAGE, GroupStats("up", "wait-sync", True)])


@given(st.lists(st.tuples(st.floats(0, 30), STATES), max_size=60))
def test_stuck_only_after_an_unbroken_stretch_outside_with_the_coordinator_up(
        steps: list[tuple[float, GroupStats]]) -> None:
    bound = 60.0
    watch = MembershipWatch(stuck_after_s=bound)
    now, since, expected = 0.0, None, False
    for gap, stats in steps:
        now += gap
        watch.observe(stats, now)
        if stats.member or not stats.coordinator_up:
            since = None
        elif since is None:
            since = now
        elif now - since > bound:
            expected = True
        assert watch.stuck == expected
        assert watch.member == stats.member
