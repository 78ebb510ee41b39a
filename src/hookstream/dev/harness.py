"""Running the three services as real processes: used by the demo, the end-to-end tests
and the benchmarks, so all three start the pipeline the same way."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from hookstream.dev.localstack.devkeys import development_keys
from hookstream.ops.stack_dump import DUMP_SIGNAL

SERVICES = ("relay", "fanout", "dispatcher")
# How long a service may take to drain and exit after SIGTERM before it is SIGKILLed and
# its shutdown counted as hung.
STOP_TIMEOUT_S = 30.0
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
    # How the last run ended, beyond its exit code: SIGKILLed on purpose by kill(), or
    # SIGKILLed by terminate() because it had not exited within its bound after SIGTERM.
    killed: bool = False
    hung_s: float | None = None

    def start(self) -> ServiceProcess:
        self.killed, self.hung_s = False, None
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
                if code == 200 and self._answered_by_own_process(body):
                    return
                last = body.decode(errors="replace")
            except OSError as exc:
                last = str(exc)
            time.sleep(0.2)
        raise TimeoutError(f"{self.name} not healthy after {timeout_s}s ({last}):\n{self.tail()}")

    def _answered_by_own_process(self, body: bytes) -> bool:
        """Whether a /healthz answer came from this process: until the service has bound
        the port, another process may hold it and answer (another test's service)."""
        try:
            return self.proc is not None and json.loads(body).get("pid") == self.proc.pid
        except (ValueError, AttributeError):
            return False

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def terminate(self, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM, then SIGKILL if the service has not drained and exited within
        ``timeout_s`` (recorded in ``hung_s``: see ``exit_problem``)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.hung_s = timeout_s
                self._dump_stacks()
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def _dump_stacks(self, within_s: float = 5.0) -> None:
        """Ask a hung service where it waits (hookstream.ops.stack_dump) before it is
        killed: its stacks end up in the log, and in ``exit_problem``'s tail."""
        assert self.proc is not None
        before = self._log_size()
        self.proc.send_signal(DUMP_SIGNAL)
        # The dump is written in one go once it starts; wait for the log to grow and
        # then to stay still, within the bound (a process wedged in native code may only
        # manage the threads' part).
        deadline, size, still_since = time.monotonic() + within_s, before, time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(0.1)
            now = self._log_size()
            if now != size:
                size, still_since = now, time.monotonic()
            elif size > before and time.monotonic() - still_since >= 0.5:
                return

    def _log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except FileNotFoundError:
            return 0

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs, exactly like a crashed or OOM-killed container.
        Declares the -9 exit expected (until the next start)."""
        if self.proc is not None and self.proc.poll() is None:
            self.killed = True
            self.proc.kill()
            self.proc.wait()

    def exit_problem(self, key: str | None = None) -> str | None:
        """Why the last run did not end in a clean shutdown (exit 0 after SIGTERM, or -9
        after a deliberate ``kill``), or None. Meant for after ``terminate``."""
        if self.proc is None or self.proc.returncode is None:
            return None
        who, code = key or self.name, self.proc.returncode
        if self.hung_s is not None:
            # long enough for the stacks it dumped before the kill (_dump_stacks)
            return (f"{who} did not drain and exit within {self.hung_s:g}s of SIGTERM"
                    f" (hung shutdown, SIGKILLed; its stacks last):\n{self.tail(200)}")
        if code == 0 or (self.killed and code == -signal.SIGKILL):
            return None
        return f"{who} exited with {code}:\n{self.tail()}"

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
        "HOOKSTREAM_SECRET_KEYS": development_keys(),
    }
    env.update({f"HOOKSTREAM_{k.upper()}": v for k, v in extra.items()})
    return env


class Pipeline:
    """relay + fanout + dispatcher as processes, each as one or more replicas: the first
    is keyed by the service's name, the next ones "fanout2", "fanout3"…"""

    def __init__(self, env: dict[str, str], log_dir: Path, dispatchers: int = 1, *,
                 relays: int = 1, fanouts: int = 1):
        self.processes: dict[str, ServiceProcess] = {}
        for name, count in (("relay", relays), ("fanout", fanouts),
                            ("dispatcher", dispatchers)):
            for i in range(count):
                key = name if i == 0 else f"{name}{i + 1}"
                self.processes[key] = ServiceProcess(name, env, log_dir / f"{key}.log")

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

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> dict[str, int | None]:
        return {k: p.terminate(timeout_s) for k, p in self.processes.items()}

    def exit_problems(self) -> list[str]:
        """After ``stop``: every service that hung on SIGTERM or exited other than 0 (or
        -9 after a deliberate ``kill``), named by its key ("dispatcher2")."""
        return [problem for k, p in self.processes.items()
                if (problem := p.exit_problem(k)) is not None]
