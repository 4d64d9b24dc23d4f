"""S3LogStore against moto's real S3 server (HTTP on 127.0.0.1), plus a fault-injecting proxy
between the two for lost answers and 409 conflicts."""

from __future__ import annotations

import socket
import threading
import uuid
from collections.abc import Callable, Iterator

import pytest

from txnlog.errors import AmbiguousWriteError, FileAlreadyExistsError, PutIfAbsentUnsupportedError
from txnlog.storage import open_store, s3

pytest.importorskip("s3fs")

V0 = "_delta_log/00000000000000000000.json"


@pytest.fixture
def s3_store(s3_bucket: str, moto_s3: dict[str, str]) -> s3.S3LogStore:
    store = open_store(f"{s3_bucket}/tables/t1", moto_s3)
    assert isinstance(store, s3.S3LogStore)
    return store


def test_contract(s3_store: s3.S3LogStore, contract_check: Callable[..., None]) -> None:
    contract_check(s3_store)


def test_the_suites_moto_server_decides_put_if_absent_atomically(s3_store: s3.S3LogStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """moto 5 checks ``If-None-Match`` and stores the object in two steps; S3 decides one key's
    conditional write atomically. Two writers racing for one commit file, each held between
    moto's check and its write, must give one winner and one FileAlreadyExistsError, or the
    load tests would see commits acknowledged twice (tests/moto_atomic.py)."""
    import time

    from moto.s3.models import S3Backend

    original = S3Backend.get_object

    def slow_check(self: S3Backend, bucket: str, key: str, *args: object, **kwargs: object) -> object:
        found = original(self, bucket, key, *args, **kwargs)
        if key.endswith(V0) and found is None:
            time.sleep(0.3)  # the window between the check and the write, held open
        return found

    monkeypatch.setattr(S3Backend, "get_object", slow_check)
    winners: list[int] = []
    losers: list[int] = []

    def put(i: int) -> None:
        try:
            s3_store.put_if_absent(V0, f"writer {i}".encode())
            winners.append(i)
        except FileAlreadyExistsError:
            losers.append(i)

    threads = [threading.Thread(target=put, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(winners) == 1 and len(losers) == 1
    assert s3_store.read(V0) == f"writer {winners[0]}".encode()


def test_list_from_pages_and_starts_at_start_name(s3_store: s3.S3LogStore, monkeypatch: pytest.MonkeyPatch) -> None:
    names = ["00000000000000000004.json", "00000000000000000004.checkpoint.parquet", "00000000000000000005.json"]
    names += ["00000000000000000006.json", "00000000000000000010.json", "_last_checkpoint"]
    for name in names:
        s3_store.put(f"_delta_log/{name}", b"x")
    s3_store.put("_delta_log/_staged_commits/00000000000000000007.json", b"x")  # a sub-"directory"
    requests: list[dict[str, object]] = []
    call_s3 = s3_store.fs.call_s3

    def small_pages(method: str, **kwargs: object) -> object:
        requests.append(kwargs)
        return call_s3(method, **kwargs, MaxKeys=2)

    monkeypatch.setattr(s3_store.fs, "call_s3", small_pages)
    listed = s3_store.list_from("_delta_log", "00000000000000000005")
    assert [f.name for f in listed] == sorted(names)[2:]
    assert requests[0]["StartAfter"] == "tables/t1/_delta_log/00000000000000000004"
    assert len(requests) > 2


def test_same_options_work_for_deltalake_and_txnlog(s3_bucket: str, moto_s3: dict[str, str]) -> None:
    deltalake = pytest.importorskip("deltalake")
    import pyarrow as pa

    uri = f"{s3_bucket}/dl"
    deltalake.write_deltalake(uri, pa.table({"a": [1, 2]}), storage_options=moto_s3)
    store = open_store(uri, moto_s3)
    assert [f.name for f in store.list_from("_delta_log")] == ["00000000000000000000.json"]
    with pytest.raises(FileAlreadyExistsError):
        store.put_if_absent(V0, b"{}")


def test_s3fs_kwargs_maps_delta_rs_keys() -> None:
    kwargs = s3.s3fs_kwargs(
        {
            "AWS_ENDPOINT_URL": "127.0.0.1:9000",
            "AWS_ALLOW_HTTP": "true",
            "AWS_ACCESS_KEY_ID": "ak",
            "aws_secret_access_key": "sk",
            "AWS_SESSION_TOKEN": "tok",
            "AWS_REGION": "eu-west-1",
            "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "true",
            "AWS_S3_LOCKING_PROVIDER": "dynamodb",  # delta-rs only: dropped
            "conditional_put": "etag",  # delta-rs only: dropped
        }
    )
    assert kwargs == {
        "endpoint_url": "http://127.0.0.1:9000",
        "key": "ak",
        "secret": "sk",
        "token": "tok",
        "client_kwargs": {"region_name": "eu-west-1"},
        "config_kwargs": {"s3": {"addressing_style": "virtual"}},
        "use_listings_cache": False,
    }


def test_s3fs_own_options_win_over_delta_rs_keys() -> None:
    kwargs = s3.s3fs_kwargs(
        {
            "endpoint_url": "http://a:1",
            "AWS_ENDPOINT_URL": "http://b:2",
            "key": "k",
            "secret": "s",
            "client_kwargs": {"region_name": "us-west-2"},
            "AWS_REGION": "eu-west-1",
            "anon": "false",
        }
    )
    assert kwargs["endpoint_url"] == "http://a:1"
    assert kwargs["client_kwargs"] == {"region_name": "us-west-2"}
    assert kwargs["anon"] is False


def test_installed_s3fs_sends_if_none_match() -> None:
    assert s3._conditional_put_problem() is None


def test_refuses_to_build_without_conditional_put(monkeypatch: pytest.MonkeyPatch, moto_s3: dict[str, str]) -> None:
    monkeypatch.setattr(s3, "_conditional_put_problem", lambda: "s3fs 0.4.2 does not send If-None-Match")
    with pytest.raises(PutIfAbsentUnsupportedError, match="If-None-Match"):
        open_store("s3://bucket/t", moto_s3)


# --- faults between the store and the server ---------------------------------------------------


class FaultProxy:
    """An HTTP proxy to moto, one request per connection, that can misbehave on PUTs:
    ``"drop"`` forwards the PUT but closes the connection instead of answering, ``"409"``
    answers ConditionalRequestConflict without forwarding."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.rsplit("//", 1)[1].split(":")
        self.upstream = (host, int(port))
        self.faults: list[str] = []
        self.puts = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            request = _read_request(conn)
            if request is None:
                return
            fault = None
            if request.startswith(b"PUT "):
                self.puts += 1
                fault = self.faults.pop(0) if self.faults else None
            if fault == "409":
                body = b"<Error><Code>ConditionalRequestConflict</Code><Message>conflict</Message></Error>"
                conn.sendall(
                    b"HTTP/1.1 409 Conflict\r\nContent-Type: application/xml\r\nConnection: close\r\n"
                    + f"Content-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                return
            with socket.create_connection(self.upstream) as up:
                up.sendall(request)
                response = b""
                while chunk := up.recv(65536):
                    response += chunk
            if fault != "drop":
                conn.sendall(response)

    def close(self) -> None:
        self.listener.close()


def _read_request(conn: socket.socket) -> bytes | None:
    """One whole request, rewritten to ``Connection: close`` (moto closes after answering);
    a client waiting for ``100 Continue`` (botocore's PUTs) is told to go on."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    lines = head.split(b"\r\n")
    if any(line.lower().startswith(b"expect: 100-continue") for line in lines):
        conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
    lines = [line for line in lines if not line.lower().startswith((b"connection:", b"expect:"))]
    length = next((int(line.split(b":", 1)[1]) for line in lines if line.lower().startswith(b"content-length:")), 0)
    while len(body) < length:
        body += conn.recv(65536)
    return b"\r\n".join(lines + [b"Connection: close"]) + b"\r\n\r\n" + body


@pytest.fixture
def proxied(s3_bucket: str, moto_s3: dict[str, str]) -> Iterator[tuple[s3.S3LogStore, s3.S3LogStore, FaultProxy]]:
    """A store whose requests go through a FaultProxy, and one that talks to moto directly."""
    proxy = FaultProxy(moto_s3["AWS_ENDPOINT_URL"])
    uri = f"{s3_bucket}/t-{uuid.uuid4().hex[:8]}"
    faulty = open_store(uri, {**moto_s3, "AWS_ENDPOINT_URL": proxy.url})
    yield faulty, open_store(uri, moto_s3), proxy  # type: ignore[misc]
    proxy.close()


def test_lost_answer_is_ambiguous(proxied: tuple[s3.S3LogStore, s3.S3LogStore, FaultProxy]) -> None:
    faulty, direct, proxy = proxied
    proxy.faults = ["drop"]
    # The PUT lands but its answer is lost; the HTTP client resends it (aiohttp retries a PUT
    # whose connection dropped) and gets 412 for our own object: that must not read as "lost".
    with pytest.raises(AmbiguousWriteError) as raised:
        faulty.put_if_absent(V0, b"mine")
    assert raised.value.path == V0
    assert direct.read(V0) == b"mine"


def test_lost_answer_then_other_writer_is_a_clean_loss(
    proxied: tuple[s3.S3LogStore, s3.S3LogStore, FaultProxy],
) -> None:
    faulty, direct, proxy = proxied
    direct.put_if_absent(V0, b"theirs")
    proxy.faults = ["drop"]
    with pytest.raises(FileAlreadyExistsError):
        faulty.put_if_absent(V0, b"mine")
    assert direct.read(V0) == b"theirs"


def test_identical_bytes_already_there_is_ambiguous(s3_store: s3.S3LogStore) -> None:
    s3_store.put_if_absent(V0, b"same")
    with pytest.raises(AmbiguousWriteError):
        s3_store.put_if_absent(V0, b"same")


def test_conflict_409_is_retried_when_nothing_landed(proxied: tuple[s3.S3LogStore, s3.S3LogStore, FaultProxy]) -> None:
    faulty, direct, proxy = proxied
    proxy.faults = ["409", "409"]
    faulty.put_if_absent(V0, b"mine")
    assert proxy.puts == 3
    assert direct.read(V0) == b"mine"


def test_conflict_409_when_the_other_writer_won(proxied: tuple[s3.S3LogStore, s3.S3LogStore, FaultProxy]) -> None:
    faulty, direct, proxy = proxied
    direct.put_if_absent(V0, b"theirs")
    proxy.faults = ["409"]
    with pytest.raises(FileAlreadyExistsError):
        faulty.put_if_absent(V0, b"mine")
    assert proxy.puts == 1
    assert direct.read(V0) == b"theirs"
