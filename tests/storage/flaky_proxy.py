"""A flaky TCP endpoint: an HTTP/1.1 proxy on 127.0.0.1 that breaks connections on purpose.

It sits in front of a real server (moto's S3) and, request by request, passes it through, delays
it, drops the connection before the request reaches the server, or drops it *after* the server
has processed the request (the client never sees the answer: the ambiguous outcome that object
store SDKs and delta-rs#2279 trip over).
"""

from __future__ import annotations

import random
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

PASS = "pass"
DELAY = "delay"
DROP_BEFORE = "drop-before"  # the request never reaches the server
DROP_MID_REQUEST = "drop-mid-request"  # half the request body reaches the server, then a reset
DROP_AFTER = "drop-after"  # the server processed the request; the response is lost


@dataclass
class FaultPlan:
    """Picks a fault per request at random (seeded); only requests ``matches`` accepts are faulted."""

    drop_before: float = 0.0
    drop_mid_request: float = 0.0
    drop_after: float = 0.0
    delay: float = 0.0
    delay_seconds: float = 0.2
    seed: int = 0
    matches: Callable[[str, str], bool] = lambda method, target: True
    # Faults that must happen whatever the dice say: each (accepts, fault) is spent on the first
    # request it accepts, so a test can rely on, say, a commit PUT losing its response.
    scripted: list[tuple[Callable[[str, str], bool], str]] = field(default_factory=list)
    _random: random.Random = field(init=False, repr=False)
    _lock: threading.Lock = field(init=False, repr=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)

    def choose(self, method: str, target: str) -> str:
        if not self.matches(method, target):
            return PASS
        with self._lock:
            for i, (accepts, fault) in enumerate(self.scripted):
                if accepts(method, target):
                    del self.scripted[i]
                    return fault
            x = self._random.random()
        for fault, p in (
            (DROP_BEFORE, self.drop_before),
            (DROP_MID_REQUEST, self.drop_mid_request),
            (DROP_AFTER, self.drop_after),
            (DELAY, self.delay),
        ):
            if x < p:
                return fault
            x -= p
        return PASS


class _Closed(Exception):
    pass


class _Reader:
    """Buffered reads of HTTP framing from a socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise _Closed()
        self.buf += chunk

    def until(self, marker: bytes) -> bytes:
        while marker not in self.buf:
            self._fill()
        head, _, self.buf = self.buf.partition(marker)
        return head + marker

    def exactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def to_close(self) -> bytes:
        out = [self.buf]
        self.buf = b""
        while True:
            chunk = self.sock.recv(65536)
            if not chunk:
                return b"".join(out)
            out.append(chunk)


def _headers(head: bytes) -> tuple[str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    fields = {}
    for line in lines[1:]:
        if ":" in line:
            name, _, value = line.partition(":")
            fields[name.strip().lower()] = value.strip()
    return lines[0], fields


def _body(reader: _Reader, fields: dict[str, str], *, no_body: bool) -> bytes:
    if no_body:
        return b""
    if fields.get("transfer-encoding", "").lower() == "chunked":
        parts = []
        while True:
            size_line = reader.until(b"\r\n")
            parts.append(size_line)
            size = int(size_line.split(b";")[0].strip(), 16)
            if size == 0:
                parts.append(reader.until(b"\r\n"))  # trailers end with an empty line
                return b"".join(parts)
            parts.append(reader.exactly(size + 2))
    if "content-length" in fields:
        return reader.exactly(int(fields["content-length"]))
    return b""


def _reset(sock: socket.socket) -> None:
    """Close with a TCP RST, as a dropped connection looks to the client."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


class FlakyProxy:
    """``with FlakyProxy(upstream_port, plan) as proxy:`` clients talk to ``proxy.port``."""

    def __init__(self, upstream_port: int, plan: FaultPlan) -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self.plan = plan
        self.counts: Counter[str] = Counter()
        #: (method, target, fault) of every request, in arrival order.
        self.requests: list[tuple[str, str, str]] = []
        self._server = socket.socket()
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(128)
        self.port = self._server.getsockname()[1]
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> FlakyProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopped.set()
        self._server.close()
        self._thread.join(5)

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        upstream: socket.socket | None = None
        try:
            upstream = socket.create_connection(self.upstream)
            from_client, from_upstream = _Reader(client), _Reader(upstream)
            while True:
                head = from_client.until(b"\r\n\r\n")
                request_line, fields = _headers(head)
                method, target = (request_line.split(" ") + ["", ""])[:2]
                if fields.get("expect", "").lower() == "100-continue":
                    client.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
                    head = head.replace(b"Expect: 100-continue\r\n", b"").replace(b"expect: 100-continue\r\n", b"")
                body = _body(from_client, fields, no_body=False)
                fault = self.plan.choose(method, target)
                self.counts[fault] += 1
                self.requests.append((method, target, fault))
                if fault == DROP_BEFORE:
                    _reset(client)
                    return
                if fault == DROP_MID_REQUEST:
                    upstream.sendall(head + body[: len(body) // 2])
                    _reset(upstream)
                    _reset(client)
                    return
                if fault == DELAY:
                    time.sleep(self.plan.delay_seconds)
                upstream.sendall(head + body)
                status_head = from_upstream.until(b"\r\n\r\n")
                while status_head.split(b" ", 2)[1:2] == [b"100"]:
                    status_head = from_upstream.until(b"\r\n\r\n")
                status_line, response_fields = _headers(status_head)
                status = int(status_line.split(" ")[1])
                no_body = method == "HEAD" or status in (204, 304) or 100 <= status < 200
                if not no_body and "content-length" not in response_fields and "transfer-encoding" not in response_fields:
                    response = status_head + from_upstream.to_close()
                else:
                    response = status_head + _body(from_upstream, response_fields, no_body=no_body)
                if fault == DROP_AFTER:
                    _reset(client)
                    return
                client.sendall(response)
        except (_Closed, OSError):
            pass
        finally:
            for sock in (client, upstream):
                if sock is not None:
                    try:
                        sock.close()
                    except OSError:
                        pass
