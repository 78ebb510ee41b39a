"""librdkafka's own lines reach the service's log (JSON, through Python logging), never
stderr raw (``%3|...|FAIL|...``): a log shipper would drop or misparse them. Checked on
a relay started against a Kafka that is not there, until the consumer-lag sampler's
client (the last one that wrote raw lines) has logged its failed connect."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from hookstream.dev.harness import free_port
from hookstream.dev.localstack.devkeys import development_keys


def test_every_kafka_client_line_goes_through_the_log() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKSTREAM_")}
    env.update({
        "HOOKSTREAM_DATABASE_URL": f"postgresql://nobody@127.0.0.1:{free_port()}/none",
        "HOOKSTREAM_KAFKA_BOOTSTRAP": f"127.0.0.1:{free_port()}",
        "HOOKSTREAM_RELAY_HTTP_PORT": str(free_port()),
        "HOOKSTREAM_LOG_FORMAT": "json",
        "HOOKSTREAM_SECRET_KEYS": development_keys(),
    })
    proc = subprocess.Popen([sys.executable, "-m", "hookstream.relay"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    lines: list[str] = []
    sampled = False
    deadline = time.monotonic() + 30
    try:
        # until the lag sampler has tried (and failed) once: its client has connected
        while time.monotonic() < deadline and not sampled:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
            sampled = '"sampler":"consumer_lag"' in line
    finally:
        proc.terminate()
        rest, _ = proc.communicate(timeout=30)  # drained: a full pipe would block its exit
    lines += rest.splitlines(keepends=True)
    assert sampled, "the lag sampler never ran:\n" + "".join(lines[-20:])
    # librdkafka hands a client's lines over when the client is polled or closed
    logged = [r for r in (json.loads(x) for x in lines if x.startswith("{"))
              if r.get("logger") == "hookstream.io.kafka.client"
              and "hookstream-lag-reader" in r.get("msg", "")]
    raw = [line for line in lines if line.startswith("%")]
    assert not raw, "raw client lines on stderr:\n" + "".join(raw[:5])
    assert logged, "the lag sampler's client lines are not in the log"
