"""Consumer lag per group, topic and partition, in offsets and in seconds.

Offsets: lag = high watermark − committed offset, exactly what Kafka's own
``kafka-consumer-groups --describe`` prints as LAG (its LOG-END-OFFSET is the high
watermark, read uncommitted). A partition the group never committed on is measured
from the log start, because our consumers use ``auto.offset.reset=earliest``: that
is where they will begin, so the whole partition is their backlog.

Seconds: the age of the oldest unconsumed record, i.e. now − the timestamp of the
record at the committed offset. That record is read once per (partition, offset) with
a consumer that is only ever *assigned* partitions, so it never joins, rebalances or
commits for any group; a stuck group costs nothing after the first read. If the read
fails, the age is interpolated from earlier high-watermark samples (when did the log
end pass this offset?) — but only between two samples: an offset older than the
sampler's history has **no** seconds sample (unknown) until a read succeeds, never the
"time since the sampler started", which under-reported by minutes after a restart.

Exported with the names of kafka_exporter / kafka-lag-exporter, label ``consumergroup``:

* ``kafka_consumergroup_lag{consumergroup,topic,partition}``
* ``kafka_consumergroup_lag_seconds{consumergroup,topic,partition}``
* ``kafka_consumergroup_group_topic_sum_lag{consumergroup,topic}`` — the per group/topic
  sum. kafka_exporter calls it ``kafka_consumergroup_lag_sum``, but a gauge ending in
  ``_sum`` fails ``promtool check metrics`` (that suffix is reserved for summaries and
  histograms), so we use kafka-lag-exporter's name for it.
* ``kafka_consumergroup_current_offset`` / ``kafka_topic_partition_current_offset``
  (the committed offset and the high watermark), so rates of consumption and
  production can be graphed next to the lag.

* ``hookstream_delay_overdue_seconds{consumergroup,topic,partition}`` — for the delay
  tiers, whose records wait on purpose: how far past its release the oldest
  unconsumed record is (lag seconds minus the tier's hold, at least 0). Their raw lag
  seconds are up to the hold by design and say nothing about health.

Every service samples every group of the pipeline (``runner.pipeline_groups``), so a
group's lag stays exported while its own consumer is down: dashboards and alerts take
``max by (consumergroup, topic[, partition])`` so replicas and services are not added up.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from hookstream.io.kafka import BrokerUnavailable
from hookstream.io.kafka.config import client_log
from hookstream.ops.sampling import BackgroundSampler, SampledCollector

TP = tuple[str, int]
HISTORY_POINTS = 360  # (high watermark, time) pairs kept per partition for interpolation


# --------------------------------------------------------------------------- pure part


@dataclass(frozen=True)
class PartitionLag:
    group: str
    topic: str
    partition: int
    committed: int | None  # None: the group never committed on this partition
    high_watermark: int
    lag: int
    oldest_unconsumed_at: float | None  # epoch s of the record at the position; None if lag 0

    def lag_seconds(self, now: float) -> float | None:
        """None when unknown (records lagging but their time could not be established)."""
        if self.lag == 0:
            return 0.0
        if self.oldest_unconsumed_at is None:
            return None
        return max(0.0, now - self.oldest_unconsumed_at)


@dataclass(frozen=True)
class LagSnapshot:
    partitions: tuple[PartitionLag, ...]


def position(committed: int | None, log_start: int | None) -> int:
    """Where the group resumes: its committed offset, else the log start (earliest reset)."""
    if committed is not None:
        return committed
    return log_start if log_start is not None else 0


def lag_of(committed: int | None, log_start: int | None, high_watermark: int) -> int:
    return max(0, high_watermark - position(committed, log_start))


def smallest_lag_s(snapshot: LagSnapshot, group: str, topic: str, now: float) -> float | None:
    """The lag in seconds of ``group``'s least-behind partition of ``topic``; None when
    the snapshot has none of them or a partition's lag in time is unknown."""
    lags = [p.lag_seconds(now) for p in snapshot.partitions
            if p.group == group and p.topic == topic]
    if not lags or any(lag is None for lag in lags):
        return None
    return min(lag for lag in lags if lag is not None)


def oldest_waiting_s(snapshot: LagSnapshot, waits: Mapping[tuple[str, str], float],
                     now: float) -> float | None:
    """How long the oldest record of the given (group, topic)s has been waiting past its
    hold (0 for a topic read at once, the tier's delay for a delay tier): the age of the
    oldest task a consumer has not reached yet. None when a partition's age is unknown
    or the snapshot has none of them (the caller assumes the worst)."""
    worst = None
    for p in snapshot.partitions:
        hold = waits.get((p.group, p.topic))
        if hold is None:
            continue
        age = p.lag_seconds(now)
        if age is None:
            return None
        worst = max(worst or 0.0, age - hold)
    return None if worst is None else max(0.0, worst)


def interpolate_append_time(history: Sequence[tuple[int, float]], offset: int) -> float | None:
    """When the record at ``offset`` was appended, from (high watermark, time) samples in
    time order. The record exists once the high watermark passed ``offset``; between two
    samples we assume a steady rate. None when no sample has passed ``offset`` yet, and
    None when even the first sample is past it: the record is older than our history by
    an unknown amount, and a lower bound would be reported as if it were the age."""
    previous: tuple[int, float] | None = None
    for hw, at in history:
        if hw > offset:
            if previous is None:
                return None
            hw0, at0 = previous
            if hw == hw0:
                return at
            # hw(t) reaches offset + 1 when the record at `offset` is appended
            frac = (offset + 1 - hw0) / (hw - hw0)
            return at0 + min(1.0, max(0.0, frac)) * (at - at0)
        previous = (hw, at)
    return None


def lag_families(snapshot: LagSnapshot, now: float,
                 holds: Mapping[str, float] | None = None) -> Iterator[Metric]:
    """``holds``: topic → seconds its records wait on purpose (the delay tiers)."""
    holds = holds or {}
    p_labels = ["consumergroup", "topic", "partition"]
    lag = GaugeMetricFamily(
        "kafka_consumergroup_lag",
        "Records the group has not consumed yet: high watermark minus committed offset",
        labels=p_labels)
    seconds = GaugeMetricFamily(
        "kafka_consumergroup_lag_seconds",
        "Age of the oldest record the group has not consumed yet (0 when caught up)",
        labels=p_labels)
    current = GaugeMetricFamily(
        "kafka_consumergroup_current_offset",
        "Offset the group resumes from (committed, or the log start if none)", labels=p_labels)
    end = GaugeMetricFamily(
        "kafka_topic_partition_current_offset", "High watermark of the partition",
        labels=["topic", "partition"])
    overdue = GaugeMetricFamily(
        "hookstream_delay_overdue_seconds",
        "Delay tiers: how far past its release the oldest unconsumed record is (lag seconds"
        " minus the tier's hold, at least 0)", labels=p_labels)
    total = GaugeMetricFamily(
        "kafka_consumergroup_group_topic_sum_lag",
        "Records the group has not consumed yet, summed over the topic's partitions",
        labels=["consumergroup", "topic"])
    sums: dict[tuple[str, str], int] = {}
    ends: dict[TP, int] = {}
    for p in snapshot.partitions:
        labels = [p.group, p.topic, str(p.partition)]
        lag.add_metric(labels, float(p.lag))
        age = p.lag_seconds(now)
        if age is not None:
            seconds.add_metric(labels, age)
            if p.topic in holds:
                overdue.add_metric(labels, max(0.0, age - holds[p.topic]))
        current.add_metric(labels, float(p.high_watermark - p.lag))
        sums[(p.group, p.topic)] = sums.get((p.group, p.topic), 0) + p.lag
        ends[(p.topic, p.partition)] = p.high_watermark
    for (group, topic), value in sorted(sums.items()):
        total.add_metric([group, topic], float(value))
    for (topic, partition), hw in sorted(ends.items()):
        end.add_metric([topic, str(partition)], float(hw))
    yield from (lag, seconds, overdue, total, current, end)


# --------------------------------------------------------------------------- Kafka part


@dataclass
class KafkaLagSource:
    """Reads committed offsets, watermarks and record times for the declared groups.

    ``groups`` maps a group id to the topics it consumes. Only those are measured: a
    group's offsets on topics it no longer reads (or another deployment's topics under
    the same group id) would otherwise show as a lag that never moves.
    """

    bootstrap: str
    groups: Mapping[str, Sequence[str]]
    timeout_s: float = 5.0
    read_timeout_s: float = 2.0
    _reader: Consumer = field(init=False, repr=False)
    # One handle per measured group, only ever asked committed(): it never subscribes,
    # so it never joins the group it reads.
    _offsets_of: dict[str, Consumer] = field(default_factory=dict, repr=False)
    _record_times: dict[tuple[str, int, int], float] = field(default_factory=dict, repr=False)
    _history: dict[TP, deque[tuple[int, float]]] = field(default_factory=dict, repr=False)

    # Why consumer handles and not the AdminClient (list_consumer_group_offsets,
    # list_offsets): librdkafka 2.16's admin worker aborted the whole process (assertion
    # `eonce->refcnt > 0` in rd_kafka_enq_once_del_source_return) while a group
    # coordinator broker was killed under it — in every service, since each samples
    # every group. OffsetFetch through a consumer's own coordinator and per-partition
    # watermark queries do not go through that code.
    def __post_init__(self) -> None:
        self._reader = Consumer({
            "bootstrap.servers": self.bootstrap,
            # librdkafka wants a group id for any consumer handle; this one only ever
            # assign()s, so it never joins this (or any) group and never commits.
            "group.id": "hookstream-lag-reader",
            "client.id": "hookstream-lag-reader",
            # librdkafka's lines through the service's log, not raw on stderr
            "logger": client_log,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            # One record per partition is all we read: do not prefetch megabytes.
            "fetch.wait.max.ms": 10,
            "queued.max.messages.kbytes": 1024,
            "isolation.level": "read_uncommitted",
        })

    def close(self) -> None:
        for handle in self._offsets_of.values():
            handle.close()
        self._reader.close()

    def _group_handle(self, group: str) -> Consumer:
        handle = self._offsets_of.get(group)
        if handle is None:
            handle = self._offsets_of[group] = Consumer({
                "bootstrap.servers": self.bootstrap, "group.id": group,
                "client.id": "hookstream-lag-offsets", "logger": client_log,
                "enable.auto.commit": False, "enable.auto.offset.store": False})
        return handle

    def sample(self) -> LagSnapshot:
        try:
            return self._sample()
        except KafkaException as exc:
            raise BrokerUnavailable(f"lag sample failed: {exc}") from exc

    def _sample(self) -> LagSnapshot:
        metadata = self._reader.list_topics(timeout=self.timeout_s)
        partitions_of = {name: sorted(t.partitions) for name, t in metadata.topics.items()
                         if t.error is None}
        committed: dict[str, dict[TP, int | None]] = {}
        for group, topics in self.groups.items():
            tps = [(t, p) for t in topics for p in partitions_of.get(t, [])]
            committed[group] = self._committed(group, tps) if tps else {}
        all_tps = {tp for wanted in committed.values() for tp in wanted}
        if not all_tps:
            return LagSnapshot(())
        marks = self._watermarks(all_tps)
        high = {tp: hw for tp, (_low, hw) in marks.items()}
        sampled_at = time.time()
        for tp, hw in high.items():
            history = self._history.setdefault(tp, deque(maxlen=HISTORY_POINTS))
            if not history or history[-1][0] != hw:
                history.append((hw, sampled_at))
        low = {tp: lw for tp, (lw, _high) in marks.items()}

        rows: list[tuple[str, TP, int | None, int, int]] = []
        for group, wanted in committed.items():
            for tp, off in sorted(wanted.items()):
                hw = high[tp]
                lag = lag_of(off, low.get(tp), hw)
                rows.append((group, tp, off, hw, lag))
        needed = {(tp[0], tp[1], hw - lag) for _g, tp, _o, hw, lag in rows if lag > 0}
        self._read_record_times(needed - self._record_times.keys())
        # Forget offsets nobody sits on any more, so the cache stays as small as the groups.
        self._record_times = {k: v for k, v in self._record_times.items() if k in needed}

        out = []
        for group, tp, off, hw, lag in rows:
            at: float | None = None
            if lag > 0:
                pos = hw - lag
                at = self._record_times.get((tp[0], tp[1], pos))
                if at is None:
                    at = interpolate_append_time(self._history.get(tp, ()), pos)
            out.append(PartitionLag(group, tp[0], tp[1], off, hw, lag, at))
        return LagSnapshot(tuple(out))

    def _committed(self, group: str, tps: list[TP]) -> dict[TP, int | None]:
        result = self._group_handle(group).committed(
            [TopicPartition(t, p) for t, p in tps], timeout=self.timeout_s)
        offsets: dict[TP, int | None] = dict.fromkeys(tps)
        for tp in result:
            if tp.error is not None:
                raise KafkaException(tp.error)
            # A negative offset (OFFSET_INVALID) means "nothing committed here".
            offsets[(tp.topic, tp.partition)] = tp.offset if tp.offset >= 0 else None
        return offsets

    def _watermarks(self, tps: Iterable[TP]) -> dict[TP, tuple[int, int]]:
        """(log start, high watermark) of each partition, asked of its leader: one
        ListOffsets request per leader for all partitions at once (the "earliest" and
        "latest" timestamps, -2 and -1), not one per partition — an idle pipeline's
        broker spent most of its CPU answering three services' samplers one partition
        at a time (benchmarks/idle_cost.py)."""
        wanted = list(tps)
        marks: list[dict[TP, int]] = []
        for at in (OFFSET_BEGINNING, OFFSET_END):
            found = self._reader.offsets_for_times(
                [TopicPartition(t, p, at) for t, p in wanted], timeout=self.timeout_s)
            got: dict[TP, int] = {}
            for tp in found:
                if tp.error is not None:
                    raise KafkaException(tp.error)
                got[(tp.topic, tp.partition)] = tp.offset
            missing = [tp for tp in wanted if tp not in got]
            if missing:
                raise KafkaException(KafkaError(KafkaError._TIMED_OUT,
                                                f"no offsets for {missing[:3]}"))
            marks.append(got)
        return {tp: (marks[0][tp], marks[1][tp]) for tp in wanted}

    def _read_record_times(self, wanted: set[tuple[str, int, int]]) -> None:
        """Timestamp of the record at each (topic, partition, offset); misses are left out
        (interpolation covers them)."""
        if not wanted:
            return
        at_offset = {(t, p): off for t, p, off in wanted}
        self._reader.assign([TopicPartition(t, p, off) for t, p, off in wanted])
        try:
            deadline = time.monotonic() + self.read_timeout_s
            while at_offset and (left := deadline - time.monotonic()) > 0:
                for msg in self._reader.consume(len(at_offset), timeout=min(left, 0.5)):
                    key = (msg.topic(), msg.partition())
                    if key not in at_offset:
                        continue  # a later record of a partition already answered
                    off = at_offset.pop(key)
                    err = msg.error()
                    if err is not None:
                        if err.code() != KafkaError._PARTITION_EOF:
                            raise KafkaException(err)
                        continue  # nothing there any more (the group just caught up)
                    ts_type, ts_ms = msg.timestamp()
                    if ts_type != TIMESTAMP_NOT_AVAILABLE:
                        self._record_times[(key[0], key[1], off)] = ts_ms / 1000.0
        finally:
            self._reader.unassign()


def consumer_lag_collector(bootstrap: str, groups: Mapping[str, Sequence[str]], *,
                           interval_s: float, holds: Mapping[str, float] | None = None,
                           ) -> SampledCollector[LagSnapshot]:
    """A collector for ``groups`` whose sampler is not started yet (the caller starts it).
    ``holds``: topic → seconds its records wait on purpose (see ``lag_families``)."""
    source = KafkaLagSource(bootstrap, groups)
    sampler = BackgroundSampler("consumer_lag", source.sample, interval_s=interval_s,
                                close=source.close)
    return SampledCollector(sampler, lambda snap, now: lag_families(snap, now, holds))
