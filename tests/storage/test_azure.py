"""AzureLogStore against a real Azurite blob server started on 127.0.0.1.

Azurite comes from npm (``npm install -g azurite``); without it these tests skip.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from txnlog.errors import AmbiguousWriteError, FileAlreadyExistsError
from txnlog.storage import azure, open_store

pytest.importorskip("adlfs")
pytest.importorskip("azure.storage.blob")

V0 = "_delta_log/00000000000000000000.json"
_REPO = Path(__file__).resolve().parents[2]


def _azurite_binary() -> str | None:
    return shutil.which("azurite-blob") or next(
        (str(p) for p in (_REPO / "node_modules/.bin/azurite-blob",) if p.exists()), None
    )


def _connection_string(port: int) -> str:
    return (
        f"DefaultEndpointsProtocol=http;AccountName={azure._AZURITE_ACCOUNT};AccountKey={azure._AZURITE_KEY};"
        f"BlobEndpoint=http://127.0.0.1:{port}/{azure._AZURITE_ACCOUNT};"
    )


@pytest.fixture(scope="session")
def azurite(tmp_path_factory: pytest.TempPathFactory, local_server: Callable[..., Any]) -> Iterator[int]:
    """An Azurite blob server on a free port of 127.0.0.1; yields the port."""
    binary = _azurite_binary()
    if binary is None:
        pytest.skip("azurite-blob not found on PATH or in node_modules/.bin (npm install -g azurite)")
    location = tmp_path_factory.mktemp("azurite")
    argv = [binary, "--blobHost", "127.0.0.1", "--location", str(location), "--skipApiVersionCheck", "--loose"]
    argv += ["--silent", "--disableTelemetry"]
    with local_server(lambda port: [*argv, "--blobPort", str(port)], location / "azurite.log") as port:
        yield port


@pytest.fixture
def container(azurite: int) -> str:
    """A new, empty container, as its name."""
    from azure.storage.blob import BlobServiceClient

    name = f"txnlog-{uuid.uuid4().hex[:16]}"
    BlobServiceClient.from_connection_string(_connection_string(azurite)).create_container(name)
    return name


@pytest.fixture
def azure_store(azurite: int, container: str) -> azure.AzureLogStore:
    store = open_store(f"az://{container}/tables/t1", {"AZURE_STORAGE_CONNECTION_STRING": _connection_string(azurite)})
    assert isinstance(store, azure.AzureLogStore)
    return store


def test_contract(azure_store: azure.AzureLogStore, contract_check: Callable[..., None]) -> None:
    contract_check(azure_store)


def test_expiry_races(azurite: int, container: str, expiry_race: Callable[..., None]) -> None:
    expiry_race(f"az://{container}/tables/racing", {"AZURE_STORAGE_CONNECTION_STRING": _connection_string(azurite)})


def test_identical_bytes_already_there_is_ambiguous(azure_store: azure.AzureLogStore) -> None:
    azure_store.put_if_absent(V0, b"same")
    with pytest.raises(AmbiguousWriteError):
        azure_store.put_if_absent(V0, b"same")


def test_use_emulator_option_as_delta_rs_reads_it(
    azurite: int, container: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AZURITE_BLOB_STORAGE_URL", f"http://127.0.0.1:{azurite}")
    store = open_store(f"abfs://{container}/t2", {"AZURE_STORAGE_USE_EMULATOR": "true"})
    store.put_if_absent(V0, b"first")
    with pytest.raises(FileAlreadyExistsError):
        open_store(f"az://{container}/t2", {"use_emulator": True}).put_if_absent(V0, b"second")
    assert store.read(V0) == b"first"


def test_deltalake_table_is_readable(azurite: int, container: str, monkeypatch: pytest.MonkeyPatch) -> None:
    deltalake = pytest.importorskip("deltalake")
    import pyarrow as pa

    monkeypatch.setenv("AZURITE_BLOB_STORAGE_URL", f"http://127.0.0.1:{azurite}")
    options = {"AZURE_STORAGE_USE_EMULATOR": "true", "AZURE_STORAGE_ALLOW_HTTP": "true"}
    deltalake.write_deltalake(f"az://{container}/dl", pa.table({"a": [1]}), storage_options=options)
    store = open_store(f"az://{container}/dl", options)
    assert [f.name for f in store.list_from("_delta_log")] == ["00000000000000000000.json"]
    with pytest.raises(FileAlreadyExistsError):
        store.put_if_absent(V0, b"{}")


def test_adlfs_kwargs_maps_uris_and_delta_rs_keys() -> None:
    kwargs, root = azure.adlfs_kwargs(
        "abfss://data@myacct.dfs.core.windows.net/tables/t",
        {"AZURE_STORAGE_ACCOUNT_KEY": "k", "azure_storage_client_id": "cid", "AZURE_MSI_ENDPOINT": "x"},
    )
    assert root == "data/tables/t"
    assert kwargs == {"account_name": "myacct", "account_key": "k", "client_id": "cid", "use_listings_cache": False}
    kwargs, root = azure.adlfs_kwargs("az://data/t", {"account_name": "own", "AZURE_STORAGE_ACCOUNT_NAME": "other"})
    assert (root, kwargs["account_name"]) == ("data/t", "own")
    kwargs, _ = azure.adlfs_kwargs("az://data/t", {"AZURE_STORAGE_USE_EMULATOR": "true"})
    assert kwargs["connection_string"].startswith("DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;")
    assert kwargs["connection_string"].endswith(
        f"BlobEndpoint={os.environ.get('AZURITE_BLOB_STORAGE_URL', 'http://127.0.0.1:10000')}/devstoreaccount1;"
    )


def _http_error(status: int, code: str | None = None) -> Exception:
    from azure.core.exceptions import HttpResponseError, ResourceExistsError

    error = (ResourceExistsError if status == 409 else HttpResponseError)(f"HTTP {status}")
    error.status_code = status
    error.error_code = code  # type: ignore[attr-defined]
    return error


def _request_error(inner: Exception) -> Exception:
    from azure.core.exceptions import ServiceRequestError

    return ServiceRequestError(str(inner), error=inner)


def _connect_refused() -> Exception:
    import aiohttp

    key = type("Key", (), {"host": "127.0.0.1", "port": 1, "ssl": False})()
    return aiohttp.ClientConnectorError(key, OSError(111, "Connection refused"))


@pytest.mark.parametrize(
    ("make_error", "outcome"),
    [
        (lambda: _http_error(409, "BlobAlreadyExists"), "exists"),
        (lambda: _http_error(412, "ConditionNotMet"), "exists"),
        (lambda: _http_error(409, "LeaseIdMissing"), "failed"),
        (lambda: _http_error(403, "AuthorizationFailure"), "failed"),
        (lambda: _http_error(503, "ServerBusy"), "failed"),
        (lambda: _http_error(500, "InternalError"), "ambiguous"),
        (lambda: _request_error(_connect_refused()), "failed"),
        (lambda: _request_error(__import__("aiohttp").ServerDisconnectedError()), "ambiguous"),
        (lambda: __import__("azure.core.exceptions").core.exceptions.ServiceResponseError("lost"), "ambiguous"),
    ],
    ids=["exists-409", "exists-412", "lease-409", "403", "503", "500", "refused", "reset", "no-response"],
)
def test_upload_error_classification(make_error: Callable[[], Exception], outcome: str) -> None:
    """Unit test of how azure-core errors (built here, not produced by a server) are read."""
    assert azure._classify(make_error()) == outcome
