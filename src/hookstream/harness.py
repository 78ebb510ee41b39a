"""Running the three services as real processes: used by the demo, the end-to-end tests
and the benchmarks, so all three start the pipeline the same way."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

SERVICES = ("relay", "fanout", "dispatcher")
_PORT_VAR = {
    "relay": "HOOKSTREAM_RELAY_HTTP_PORT",
    "fanout": "HOOKSTREAM_FANOUT_HTTP_PORT",
    "dispatcher": "HOOKSTREAM_DISPATCHER_HTTP_PORT",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ServiceProcess:
    name: str
    env: dict[str, str]
    log_path: Path
    http_port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ServiceProcess:
        # A crash in native code (librdkafka, libpq) leaves a Python stack in the log.
        env = {**os.environ, "PYTHONFAULTHANDLER": "1", **self.env,
               _PORT_VAR[self.name]: str(self.http_port)}
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", f"hookstream.{self.name}"], env=env, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        return self

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def get(self, path: str, timeout: float = 2.0) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(self.base_url + path, timeout=timeout) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def wait_healthy(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        last = ""
        port_retries = 3
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                if port_retries and "Address already in use" in self.tail(5):
                    # free_port() cannot reserve the port: something else may take it
                    # before the service binds it. Pick another one and start again.
                    port_retries -= 1
                    self.http_port = free_port()
                    self.start()
                    continue
                raise RuntimeError(
                    f"{self.name} exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                code, body = self.get("/healthz")
                if code == 200:
                    return
                last = body.decode(errors="replace")
            except OSError as exc:
                last = str(exc)
            time.sleep(0.2)
        raise TimeoutError(f"{self.name} not healthy after {timeout_s}s ({last}):\n{self.tail()}")

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def terminate(self, timeout_s: float = 30.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs, exactly like a crashed or OOM-killed container."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def restart(self) -> ServiceProcess:
        self.kill()
        return self.start()


def pipeline_env(*, database_url: str, bootstrap: str, topic_prefix: str,
                 **extra: str) -> dict[str, str]:
    env = {
        "HOOKSTREAM_DATABASE_URL": database_url,
        "HOOKSTREAM_KAFKA_BOOTSTRAP": bootstrap,
        "HOOKSTREAM_TOPIC_PREFIX": topic_prefix,
        "HOOKSTREAM_LOG_FORMAT": "json",
        # any free port: concurrent pipelines (tests, demo, benchmarks) never compete for 8080
        "HOOKSTREAM_API_PORT": "0",
        # Groups named after the topics: a pipeline never shares a consumer group (and its
        # committed offsets on other, maybe deleted, topics) with another one.
        "HOOKSTREAM_FANOUT_GROUP_ID": f"{topic_prefix}-fanout",
        "HOOKSTREAM_DISPATCHER_GROUP_ID": f"{topic_prefix}-dispatcher",
    }
    env.update({f"HOOKSTREAM_{k.upper()}": v for k, v in extra.items()})
    return env


class Pipeline:
    """relay + fanout + dispatcher (one or more dispatchers) as processes."""

    def __init__(self, env: dict[str, str], log_dir: Path, dispatchers: int = 1):
        self.processes: dict[str, ServiceProcess] = {
            "relay": ServiceProcess("relay", env, log_dir / "relay.log"),
            "fanout": ServiceProcess("fanout", env, log_dir / "fanout.log"),
        }
        for i in range(dispatchers):
            key = "dispatcher" if i == 0 else f"dispatcher{i + 1}"
            self.processes[key] = ServiceProcess("dispatcher", env, log_dir / f"{key}.log")

    def __getitem__(self, key: str) -> ServiceProcess:
        return self.processes[key]

    def start(self, timeout_s: float = 60.0) -> Pipeline:
        try:
            for p in self.processes.values():
                p.start()
            for p in self.processes.values():
                p.wait_healthy(timeout_s)
        except BaseException:
            self.stop()  # nothing left running behind a failed start
            raise
        return self

    def stop(self) -> dict[str, int | None]:
        return {k: p.terminate() for k, p in self.processes.items()}
