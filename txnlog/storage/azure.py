"""Azure Blob Storage: adlfs for reads and listings, put-if-absent by azure-storage-blob's
``upload_blob(overwrite=False)``, which sends ``If-None-Match: *``.

The upload is made with the SDK directly rather than adlfs's ``pipe_file(mode="create")``: an
adlfs too old to know ``mode`` would pass it on and the upload would silently overwrite.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

from fsspec.asyn import sync

from txnlog.storage import as_bool
from txnlog.storage.fsspec_store import (
    FsspecLogStore,
    Outcome,
    connect_failed,
    import_extra,
    split_options,
    status_outcome,
)

# delta-rs (object_store) Azure keys, lower-cased, without their "azure_storage_"/"azure_" prefix.
_ALIASES = {
    "account_name": "account_name",
    "account_key": "account_key",
    "access_key": "account_key",
    "master_key": "account_key",
    "connection_string": "connection_string",
    "sas_key": "sas_token",
    "sas_token": "sas_token",
    "client_id": "client_id",
    "client_secret": "client_secret",
    "tenant_id": "tenant_id",
    "authority_id": "tenant_id",
    "use_emulator": "use_emulator",
    "endpoint": "endpoint",
    "skip_signature": "anon",
}
# object_store Azure keys txnlog has no use for: accepted, so that deltalake's options work here.
_IGNORED = frozenset({
    "authority_host", "token", "bearer_token", "msi_endpoint", "identity_endpoint", "object_id", "msi_resource_id",
    "federated_token_file", "use_fabric_endpoint", "use_azure_cli", "container_name", "disable_tagging",
    "fabric_token_service_url", "fabric_workload_host", "fabric_session_token", "fabric_cluster_identifier",
    "credential_type", "encryption_key", "storage_encryption_key", "allow_http",
})
# Azurite's well-known development account (public, documented by Microsoft).
_AZURITE_ACCOUNT = "devstoreaccount1"
_AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


class AzureLogStore(FsspecLogStore):
    supports_put_if_absent = True

    def __init__(self, root_uri: str, options: Mapping[str, Any] | None = None) -> None:
        adlfs = import_extra("adlfs", "azure")
        import_extra("azure.storage.blob", "azure")
        kwargs, root_path = adlfs_kwargs(root_uri, options or {})
        super().__init__(root_uri, adlfs.AzureBlobFileSystem(**kwargs), root_path)

    def put_if_absent(self, path: str, data: bytes) -> None:
        container, blob = self._full(path).split("/", 1)

        async def upload() -> None:
            async with self.fs.service_client.get_blob_client(container=container, blob=blob) as client:
                await client.upload_blob(data, overwrite=False)

        self._conditional_put(path, data, lambda: sync(self.fs.loop, upload), _classify)


def adlfs_kwargs(root_uri: str, options: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """``AzureBlobFileSystem`` arguments and the root path (``container/path``) for a table URI
    (``az://container/path`` or ``abfs[s]://container@account.dfs.core.windows.net/path``), from
    adlfs's own options and/or delta-rs style ``AZURE_STORAGE_*`` keys."""
    import adlfs  # optional dependency (txnlog[azure])

    kwargs, mapped = split_options(
        options, adlfs.AzureBlobFileSystem, _ALIASES, where="an Azure table", prefixes=("azure_storage_", "azure_"), ignored=_IGNORED
    )
    parsed = urlparse(root_uri)
    container, _, host = parsed.netloc.partition("@")
    if host:
        mapped.setdefault("account_name", host.split(".", 1)[0])
        if not host.endswith((".dfs.core.windows.net", ".blob.core.windows.net")):
            kwargs.setdefault("account_host", host.replace(".dfs.", ".blob.", 1))
    for name in (
        "account_name",
        "account_key",
        "connection_string",
        "sas_token",
        "client_id",
        "client_secret",
        "tenant_id",
        "anon",
    ):
        if name in mapped:
            kwargs.setdefault(name, mapped[name])
    if as_bool(mapped.get("use_emulator")) and "connection_string" not in kwargs:
        # As delta-rs does: Azurite at $AZURITE_BLOB_STORAGE_URL, by default on port 10000.
        account = kwargs.setdefault("account_name", _AZURITE_ACCOUNT)
        endpoint = mapped.get("endpoint") or os.environ.get("AZURITE_BLOB_STORAGE_URL", "http://127.0.0.1:10000")
        kwargs["connection_string"] = (
            f"DefaultEndpointsProtocol=http;AccountName={account};"
            f"AccountKey={kwargs.get('account_key', _AZURITE_KEY)};BlobEndpoint={endpoint.rstrip('/')}/{account};"
        )
    elif "endpoint" in mapped:
        kwargs.setdefault("account_host", urlparse(mapped["endpoint"]).netloc or mapped["endpoint"])
    if "anon" in kwargs:
        kwargs["anon"] = as_bool(kwargs["anon"])
    # The log must see a new commit at once: never answer a listing from adlfs's cache.
    kwargs.setdefault("use_listings_cache", False)
    return kwargs, container + parsed.path


def _classify(error: Exception) -> Outcome:
    """What a failed ``upload_blob(overwrite=False)`` means, after azure-core's own retries."""
    from azure.core import exceptions as ax  # optional dependency (txnlog[azure])

    if isinstance(error, ax.HttpResponseError):
        status = error.status_code or 0
        if status == 412 or getattr(error, "error_code", None) == "BlobAlreadyExists":
            return "exists"
        return status_outcome(status)
    if isinstance(error, ax.ServiceRequestError):
        # azure-core turns any aiohttp client error into this, a reset mid-request included.
        never_sent = isinstance(error, ax.ServiceRequestTimeoutError) or connect_failed(error.inner_exception)
        return "failed" if never_sent else "ambiguous"
    return "ambiguous"
