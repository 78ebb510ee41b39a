"""One Kafka hop with the services' own client settings: producer → consumer latency
for a few ``linger.ms`` values, alternated (issue #15: how the producers' linger was
chosen).

The producer is ``hookstream.io.kafka.producer_config`` (idempotent, acks=all, lz4) with
only ``linger.ms`` overridden; the consumer is ``consumer_config`` read the way the
dispatcher reads (``consume_available``, fetch.wait.max.ms 50). Records go out at a
fixed rate, alone or in bursts like a fanout statement's tasks; each carries its send
time, and the consumer thread takes ``now - sent`` as it reads it. A benchmark, not a
test::

    python -m benchmarks.kafka_hop --linger 1 0 --rate 200 --records 2000 --burst 1 24
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
import uuid

from confluent_kafka import Consumer, Producer

from hookstream.core.topics import TopicSpec
from hookstream.dev import localstack
from hookstream.io.kafka import (
    consume_available,
    consumer_config,
    delete_topics,
    ensure_topics,
    producer_config,
)


def hop(bootstrap: str, topic: str, *, linger_ms: float, rate: float, records: int,
        burst: int) -> dict[str, float]:
    producer = Producer(producer_config(bootstrap, "hop-bench", **{"linger.ms": linger_ms}))
    consumer = Consumer(consumer_config(bootstrap, f"hop-{uuid.uuid4().hex[:8]}", "hop-bench",
                                        **{"auto.offset.reset": "latest",
                                           "fetch.wait.max.ms": 50}))
    consumer.subscribe([topic])
    while not consumer.assignment():
        consumer.poll(0.1)
    time.sleep(1.0)  # the assignment's first fetches are made before anything is sent
    latencies_ms: list[float] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            for m in consume_available(consumer, 500, 0.1):
                if m.error() is None:
                    latencies_ms.append(time.time() * 1000 - float(m.value() or b"0"))

    def reports() -> None:
        while not stop.is_set():
            producer.poll(0.05)

    threads = [threading.Thread(target=read), threading.Thread(target=reports)]
    for t in threads:
        t.start()
    t0 = time.monotonic()
    for i in range(records // burst):
        time.sleep(max(0.0, t0 + i * burst / rate - time.monotonic()))
        for j in range(burst):
            producer.produce(topic, key=str(i * burst + j).encode(),
                             value=repr(time.time() * 1000).encode())
    producer.flush(10)
    deadline = time.monotonic() + 10
    while len(latencies_ms) < (records // burst) * burst and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    for t in threads:
        t.join()
    consumer.close()
    lat = sorted(latencies_ms)
    if not lat:
        return {"n": 0}
    return {"n": len(lat), "p50_ms": round(lat[len(lat) // 2], 2),
            "p99_ms": round(lat[int(len(lat) * 0.99)], 2),
            "mean_ms": round(statistics.mean(lat), 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--linger", type=float, nargs="+", default=[1.0, 0.0])
    ap.add_argument("--burst", type=int, nargs="+", default=[1, 24])
    ap.add_argument("--rate", type=float, default=200.0, help="records/s")
    ap.add_argument("--records", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=2, help="each setting this many times")
    args = ap.parse_args()
    localstack.up()
    bootstrap = localstack.env()["HOOKSTREAM_KAFKA_BOOTSTRAP"]
    topic = f"hop-{uuid.uuid4().hex[:6]}"
    ensure_topics(bootstrap, [TopicSpec(topic, 12, {})])
    try:
        for burst in args.burst:
            for _ in range(args.rounds):
                for linger in args.linger:
                    r = hop(bootstrap, topic, linger_ms=linger, rate=args.rate,
                            records=args.records, burst=burst)
                    print(f"linger.ms {linger:g}, bursts of {burst}: {r}", flush=True)
    finally:
        delete_topics(bootstrap, [topic])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
