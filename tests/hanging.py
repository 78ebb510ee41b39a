"""Receivers that never answer, on loopback, made of plain sockets (issue #47):

* ``Blackhole``: a listening socket whose accept queue is full and never drained. Linux
  drops a SYN that finds the queue full (``tcp_abort_on_overflow`` 0, the default): the
  client's connect gets no answer at all, as behind a firewall that drops packets —
  no reset, no refusal.
* ``Stall``: accepts, reads whatever comes (a TLS ClientHello, a request) and never
  writes a byte: a TLS handshake that never finishes.
* ``Trickle``: reads the request, then sends a status line one byte a second, forever.

Each counts the connections it got (``Blackhole``: none can be accepted) and closes them
all on ``stop``. ``Proxy`` and ``dropped`` cut one process off from a server by dropping
packets (iptables on loopback: the tests run as root, as CI does).
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
import time
from collections.abc import Iterator


class Blackhole:
    def __init__(self) -> None:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(0)
        self.port = self._sock.getsockname()[1]
        self._fill: list[socket.socket] = []
        # Fill the accept queue: the next connection's SYN is dropped.
        while True:
            probe = socket.socket()
            probe.settimeout(0.5)
            try:
                probe.connect(("127.0.0.1", self.port))
            except TimeoutError:
                probe.close()
                break
            self._fill.append(probe)

    def stop(self) -> None:
        for s in self._fill:
            s.close()
        self._sock.close()


class _Server:
    def __init__(self, name: str) -> None:
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(256)
        self.port = self._sock.getsockname()[1]
        self.connections = 0
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True, name=name).start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
                self._open.append(conn)
            threading.Thread(target=self._guarded, args=(conn,), daemon=True).start()

    def _guarded(self, conn: socket.socket) -> None:
        try:
            self.handle(conn)
        except OSError:
            pass  # the client gave up (its deadline): what this server is for
        finally:
            conn.close()

    def handle(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        self._stop.set()
        self._sock.close()
        with self._lock:
            for conn in self._open:
                conn.close()


class Stall(_Server):
    def __init__(self) -> None:
        super().__init__("stall")

    def handle(self, conn: socket.socket) -> None:
        while not self._stop.is_set() and conn.recv(65536):
            pass  # read everything, answer nothing


class Trickle(_Server):
    def __init__(self) -> None:
        super().__init__("trickle")

    def handle(self, conn: socket.socket) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return
            data += chunk
        line = b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 1000
        for byte in line:
            if self._stop.is_set():
                return
            conn.sendall(bytes([byte]))
            time.sleep(1.0)


class Proxy(_Server):
    """A plain TCP relay to ``127.0.0.1:target``: a process pointed at it reaches the
    target through a port of its own, so dropping that port's packets (``dropped``)
    cuts that process off alone."""

    def __init__(self, target: int) -> None:
        self.target = target
        super().__init__("proxy")

    def handle(self, conn: socket.socket) -> None:
        upstream = socket.create_connection(("127.0.0.1", self.target))
        with self._lock:
            self._open.append(upstream)

        def pump(src: socket.socket, dst: socket.socket) -> None:
            try:
                while chunk := src.recv(65536):
                    dst.sendall(chunk)
            except OSError:
                pass
            finally:
                for s in (src, dst):
                    with contextlib.suppress(OSError):
                        s.shutdown(socket.SHUT_RDWR)

        back = threading.Thread(target=pump, args=(upstream, conn), daemon=True)
        back.start()
        pump(conn, upstream)
        back.join()
        upstream.close()


@contextlib.contextmanager
def dropped(port: int) -> Iterator[None]:
    """Every packet to or from a loopback port dropped by netfilter (iptables, as root):
    no reset, no refusal — connects and established connections alike get no answer,
    until the block ends."""
    rules = [["INPUT", "-p", "tcp", "--dport", str(port), "-j", "DROP"],
             ["INPUT", "-p", "tcp", "--sport", str(port), "-j", "DROP"]]
    for rule in rules:
        subprocess.run(["iptables", "-A", *rule], check=True, capture_output=True)
    try:
        yield
    finally:
        for rule in rules:
            subprocess.run(["iptables", "-D", *rule], check=True, capture_output=True)
