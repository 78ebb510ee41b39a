"""The dispatcher's offset book: out-of-order completion, rebalances, no Kafka."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from hookstream.dispatcher.offset_book import Item, OffsetBook

from hookstream.core.codec import DeliveryTask, TaskKind

TP0, TP1 = ("d", 0), ("d", 1)


def _items(book: OffsetBook, tp: tuple[str, int], offsets: list[int]) -> list[Item]:
    now = datetime.now(UTC)
    task = DeliveryTask(delivery_id=uuid.uuid4(), event_id=uuid.uuid4(),
                        endpoint_id=uuid.uuid4(), tenant="t", kind=TaskKind.NEW, due_at=now,
                        committed_at=now, lease_version=0)
    trackers = book.track_all([tp] * len(offsets), offsets)
    return [Item(task, tp, o, t) for o, t in zip(offsets, trackers, strict=True)
            if t is not None]


def test_commits_stop_at_the_lowest_unfinished_offset() -> None:
    book = OffsetBook()
    book.assigned([TP0])
    a, b, c = _items(book, TP0, [10, 11, 12])
    book.complete_all([b, c])
    assert book.commits() == {TP0: 10}  # 10 is still running: a restart resumes there
    book.complete(a)
    assert book.commits() == {TP0: 13}
    book.committed({TP0: 13})
    assert book.commits() == {}  # nothing new to commit


def test_a_revoked_partition_hands_back_its_finished_offsets_and_ignores_late_completions(
        ) -> None:
    book = OffsetBook()
    book.assigned([TP0, TP1])
    (a0,) = _items(book, TP0, [5])
    (a1,) = _items(book, TP1, [7])
    book.complete(a0)
    assert book.revoked([TP0]) == {TP0: 6}
    assert not book.valid(a0) and book.valid(a1)
    book.assigned([TP0])  # assigned again: a new tracker, the old item counts for nothing
    book.complete(a0)
    assert book.commits() == {TP1: 7}  # TP0's new tracker tracked nothing; 7 still runs


def test_lost_partitions_commit_nothing() -> None:
    book = OffsetBook()
    book.assigned([TP0])
    (a,) = _items(book, TP0, [3])
    book.complete(a)
    book.lost([TP0])
    assert book.commits() == {} and not book.valid(a)


def test_positions_without_a_partition_get_no_tracker() -> None:
    book = OffsetBook()
    assert book.track_all([None, TP0], [0, 1])[0] is None


def test_a_commit_reported_failed_is_sent_again_unless_a_later_one_was_sent() -> None:
    # Commits are sent without waiting for their answer (consumer.py): the book counts
    # one made when it is sent, and takes it back when its answer says it failed.
    book = OffsetBook()
    book.assigned([TP0, TP1])
    a, b = _items(book, TP0, [1, 2])
    (c,) = _items(book, TP1, [9])
    book.complete_all([a, c])
    book.committed({TP0: 2, TP1: 10})
    assert book.commits() == {}
    book.commit_failed({TP0: 2})
    assert book.commits() == {TP0: 2}  # sent again
    book.complete(b)
    book.committed({TP0: 3})
    book.commit_failed({TP0: 2})  # the older one's failure arrives late: 3 stands
    assert book.commits() == {}
    book.commit_failed({TP1: 10})
    book.revoked([TP1])
    assert book.commits() == {}  # a failed commit of a partition gone is nobody's now


def test_a_partition_read_again_from_an_earlier_offset_starts_a_new_tracker() -> None:
    # Issue #47: a dispatcher frozen past its session was fenced, rejoined and read its
    # partition again from the committed offset without any rebalance callback having
    # run: "offsets must be tracked in increasing order: 38 after 66" crashed it (exit 1).
    book = OffsetBook()
    book.assigned([TP0])
    old = _items(book, TP0, [60, 61, 66])
    book.complete(old[0])
    book.committed({TP0: 61})
    again = _items(book, TP0, [38, 39])  # from the committed offset of the new ownership
    assert not any(book.valid(i) for i in old) and all(book.valid(i) for i in again)
    book.complete_all(old)  # the old ownership's completions count for nothing
    book.complete(again[0])
    assert book.commits() == {TP0: 39}
