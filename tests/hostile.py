"""Receivers that answer with bytes no well-behaved server sends: a raw TCP server on
loopback (no HTTP library on this side, so nothing sanitises what goes out).

Each path is a behaviour; the server counts the requests it read per path so a test can
check every request the dispatcher made is explained by an attempt row.
"""

from __future__ import annotations

import gzip
import socket
import struct
import threading
from collections import Counter
from collections.abc import Callable

Answer = Callable[[socket.socket], None]


def _send(data: bytes) -> Answer:
    def answer(conn: socket.socket) -> None:
        conn.sendall(data)
    return answer


def _huge_body(conn: socket.socket) -> None:
    size = 10 * 1024 * 1024
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
    chunk = b"x" * 65536
    try:
        for _ in range(size // len(chunk)):
            conn.sendall(chunk)
    except OSError:
        pass  # the client stopped reading after its cap and closed: that is the point


def _reset_mid_body(conn: socket.socket) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\npartial")
    # SO_LINGER 0: close sends a RST instead of a FIN.
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


_BOMB = gzip.compress(b"\0" * (64 * 1024 * 1024), compresslevel=9)

BEHAVIOURS: dict[str, Answer] = {
    "nul": _send(b"HTTP/1.1 200 OK\r\nContent-Length: 16\r\n\r\n"
                 b"accepted\x00\x00\x00\x00\x00ok\x00"),
    "utf8": _send(b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\n\xff\xfe\xc3\x28ok\xed\xa0"),
    "huge": _huge_body,
    "header64k": _send(b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 65536
                       + b"\r\nContent-Length: 0\r\n\r\n"),
    "nulheader": _send(b"HTTP/1.1 500 Oops\r\nX-Evil: a\x00b\xff\r\nContent-Length: 0\r\n\r\n"),
    "gzipbomb": _send(b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n"
                      % len(_BOMB) + _BOMB),
    "http09": _send(b"hello, this is not HTTP\x00\r\n\r\n"),
    "garbagestatus": _send(b"HTTP/1.1 2\x0000 \xff\xfe\r\nContent-Length: 0\r\n\r\n"),
    "reset": _reset_mid_body,
}


class HostileServer:
    def __init__(self) -> None:
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(256)
        self.port = self._sock.getsockname()[1]
        self.requests: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True, name="hostile")

    def url(self, behaviour: str) -> str:
        assert behaviour in BEHAVIOURS
        return f"http://127.0.0.1:{self.port}/{behaviour}"

    def start(self) -> HostileServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._sock.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(10)
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, _, rest = data.partition(b"\r\n\r\n")
            path = head.split(b" ", 2)[1].decode().strip("/")
            length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            while len(rest) < length:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                rest += chunk
            with self._lock:
                self.requests[path] += 1
            BEHAVIOURS[path](conn)
        except OSError:
            pass
        finally:
            conn.close()
