"""storage_options: a key no store knows is refused, naming the known keys and the nearest
one, before any request; deltalake's keys (mapped, or accepted and ignored) still work."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import txnlog
from txnlog.errors import InvalidArgumentError
from txnlog.storage import open_store
from txnlog.storage.azure import adlfs_kwargs
from txnlog.storage.gcs import gcsfs_kwargs
from txnlog.storage.s3 import s3fs_kwargs


def test_a_misspelled_s3_key_is_refused_with_the_nearest_known_one(tmp_path: Path) -> None:
    # Misspelled, the endpoint used to be dropped: the request went to real AWS.
    with pytest.raises(InvalidArgumentError) as e:
        txnlog.Table("s3://bucket/t", {"AWS_ENDPIONT_URL": "http://127.0.0.1:9", "AWS_ACCESS_KEY_ID": "k"})
    message = str(e.value)
    assert "'AWS_ENDPIONT_URL'" in message and "an S3 table" in message and "did you mean 'AWS_ENDPOINT_URL'?" in message
    assert "endpoint_url" in message and "secret_access_key" in message and "client_kwargs" in message  # the known keys
    with pytest.raises(InvalidArgumentError, match="did you mean 'endpoint_url'"):
        s3fs_kwargs({"endpiont_url": "http://127.0.0.1:9"})


def test_deltalake_s3_keys_are_mapped_or_accepted_and_ignored() -> None:
    kwargs = s3fs_kwargs({
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9", "aws_region": "eu-west-1", "AWS_S3_LOCKING_PROVIDER": "dynamodb",
        "DELTA_DYNAMO_TABLE_NAME": "locks", "AWS_S3_ALLOW_UNSAFE_RENAME": "true", "timeout": "30s", "AWS_MAX_RETRIES": "3",
        "max_retries": "3", "aws_conditional_put": "etag",
    })
    assert kwargs["endpoint_url"] == "http://127.0.0.1:9" and kwargs["client_kwargs"] == {"region_name": "eu-west-1"}
    assert set(kwargs) == {"endpoint_url", "client_kwargs", "use_listings_cache"}


def test_azure_and_gcs_refuse_unknown_keys_and_name_theirs() -> None:
    with pytest.raises(InvalidArgumentError) as e:
        adlfs_kwargs("az://c/t", {"AZURE_STORAGE_ACOUNT_NAME": "a"})
    assert "an Azure table" in str(e.value) and "did you mean 'AZURE_STORAGE_ACCOUNT_NAME'?" in str(e.value)
    adlfs_kwargs("az://c/t", {"AZURE_STORAGE_ACCOUNT_NAME": "a", "AZURE_STORAGE_ALLOW_HTTP": "true", "azure_use_azure_cli": "true"})
    with pytest.raises(InvalidArgumentError) as e:
        gcsfs_kwargs({"GOOGLE_SERVICE_ACOUNT": "/sa.json"})
    assert "a GCS table" in str(e.value) and "did you mean 'GOOGLE_SERVICE_ACCOUNT'?" in str(e.value)
    gcsfs_kwargs({"GOOGLE_SERVICE_ACCOUNT": "/sa.json", "google_bucket": "b", "user_agent": "x"})


def test_local_and_memory_tables_know_only_their_own_keys(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError) as e:
        txnlog.Table.create(str(tmp_path / "t"), pa.schema([("id", pa.int64())]), storage_options={"fsyn": "true"})
    assert "a local table" in str(e.value) and "did you mean 'fsync'?" in str(e.value) and "known keys: fsync" in str(e.value)
    assert not (tmp_path / "t").exists()  # refused before anything was written
    assert open_store(tmp_path / "t", {"fsync": "true", "max_retries": "2"}).fsync  # type: ignore[attr-defined]
    with pytest.raises(InvalidArgumentError, match="a memory:// table"):
        open_store("memory://x/t", {"AWS_REGION": "us-east-1"})


def test_the_cli_refuses_an_unknown_storage_option_as_a_usage_error(tmp_path: Path) -> None:
    import subprocess
    import sys

    txnlog.Table.create(str(tmp_path / "t"), pa.schema([("id", pa.int64())]))
    proc = subprocess.run([sys.executable, "-m", "txnlog", "describe", str(tmp_path / "t"), "-o", "fsyn=true"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "unknown storage option 'fsyn'" in proc.stderr
