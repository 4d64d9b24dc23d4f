"""Google Cloud Storage: gcsfs for reads and listings, put-if-absent by google-cloud-storage's
``upload_from_string(data, if_generation_match=0)`` (``ifGenerationMatch=0``: only if no live
object has that name)."""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

from txnlog.storage import as_bool
from txnlog.storage.fsspec_store import FsspecLogStore, Outcome, import_extra, split_options, status_outcome

# delta-rs (object_store) GCS keys, lower-cased, without their "google_" prefix.
_ALIASES = {
    "service_account": "service_account_path",
    "service_account_path": "service_account_path",
    "application_credentials": "service_account_path",
    "service_account_key": "service_account_key",
    "skip_signature": "anon",
}
# object_store GCS keys txnlog has no use for: accepted, so that deltalake's options work here.
_IGNORED = frozenset({"bucket", "bucket_name", "base_url", "bearer_token", "allow_http"})


class GcsLogStore(FsspecLogStore):
    supports_put_if_absent = True

    def __init__(self, root_uri: str, options: Mapping[str, Any] | None = None) -> None:
        gcsfs = import_extra("gcsfs", "gcs")
        import_extra("google.cloud.storage", "gcs")
        kwargs = gcsfs_kwargs(options or {})
        emulated = kwargs.get("endpoint_url") or os.environ.get("STORAGE_EMULATOR_HOST")
        # gcsfs's default class asks a gRPC control plane for each bucket's layout, which
        # emulators do not serve (it waits a minute per bucket); plain buckets need none of it.
        fs_class = gcsfs.core.GCSFileSystem if emulated else gcsfs.GCSFileSystem
        parsed = urlparse(root_uri)
        super().__init__(root_uri, fs_class(**kwargs), parsed.netloc + parsed.path)
        self._endpoint: str | None = kwargs.get("endpoint_url")

    @functools.cached_property
    def _bucket(self) -> Any:
        """The google-cloud-storage bucket, with the credentials gcsfs resolved."""
        from google.auth.credentials import AnonymousCredentials  # optional dependency (txnlog[gcs])
        from google.cloud import storage  # optional dependency (txnlog[gcs])

        credentials = self.fs.credentials.credentials
        client_options = {"api_endpoint": self._endpoint} if self._endpoint else None
        if credentials is None:
            client = storage.Client(project="<none>", credentials=AnonymousCredentials(), client_options=client_options)  # type: ignore[no-untyped-call]
        else:
            client = storage.Client(
                project=self.fs.project or None, credentials=credentials, client_options=client_options
            )
        return client.bucket(self.root_path.split("/", 1)[0])

    def put_if_absent(self, path: str, data: bytes) -> None:
        blob = self._bucket.blob(self._full(path).split("/", 1)[1])
        self._conditional_put(path, data, lambda: blob.upload_from_string(data, if_generation_match=0), _classify)


def gcsfs_kwargs(options: Mapping[str, Any]) -> dict[str, Any]:
    """``GCSFileSystem`` arguments from gcsfs's own options and/or delta-rs style ``GOOGLE_*`` keys."""
    import gcsfs  # optional dependency (txnlog[gcs])

    kwargs, mapped = split_options(
        options, gcsfs.core.GCSFileSystem, _ALIASES, where="a GCS table", prefixes=("google_",), ignored=_IGNORED
    )
    if "service_account_key" in mapped:
        key = mapped["service_account_key"]
        kwargs.setdefault("token", json.loads(key) if isinstance(key, str) else key)
    if "service_account_path" in mapped:
        kwargs.setdefault("token", mapped["service_account_path"])
    if as_bool(mapped.get("anon")):
        kwargs.setdefault("token", "anon")
    # The log must see a new commit at once: never answer a listing from gcsfs's cache.
    kwargs.setdefault("use_listings_cache", False)
    return kwargs


def _classify(error: Exception) -> Outcome:
    """What a failed ``upload_from_string(if_generation_match=0)`` means, after
    google-cloud-storage's own retries (which it makes for conditional uploads)."""
    import requests  # optional dependency (txnlog[gcs])
    from google.api_core import exceptions as gx  # optional dependency (txnlog[gcs])
    from google.auth import exceptions as auth  # optional dependency (txnlog[gcs])
    from urllib3.exceptions import NewConnectionError  # optional dependency (txnlog[gcs])

    if isinstance(error, gx.RetryError) and isinstance(error.cause, Exception):
        return _classify(error.cause)
    if isinstance(error, gx.PreconditionFailed):
        return "exists"
    if isinstance(error, gx.GoogleAPICallError):
        return status_outcome(int(error.code or 0))
    if isinstance(error, auth.GoogleAuthError):
        return "failed"
    if isinstance(error, requests.ConnectionError):
        # Only a connection that could not be opened proves nothing was sent; a reset
        # mid-request is the same exception type with another reason, and may have landed.
        reason = getattr(error.args[0], "reason", None) if error.args else None
        return (
            "failed"
            if isinstance(error, requests.ConnectTimeout) or isinstance(reason, NewConnectionError)
            else "ambiguous"
        )
    return "ambiguous"
