"""S3 through s3fs, put-if-absent by a conditional PUT (``If-None-Match: *``)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlparse

from txnlog.errors import PutIfAbsentUnsupportedError
from txnlog.storage import as_bool
from txnlog.storage.base import FileInfo
from txnlog.storage.fsspec_store import (
    FsspecLogStore,
    Outcome,
    connect_failed,
    import_extra,
    mtime_ms,
    split_options,
    status_outcome,
)

# delta-rs (object_store) S3 keys, lower-cased, with or without their "aws_" prefix.
_ALIASES = {
    "endpoint": "endpoint_url",
    "endpoint_url": "endpoint_url",
    "access_key_id": "key",
    "secret_access_key": "secret",
    "session_token": "token",
    "token": "token",
    "region": "region",
    "default_region": "region",
    "allow_http": "allow_http",
    "virtual_hosted_style_request": "virtual_hosted_style_request",
    "skip_signature": "anon",
    "profile": "profile",
}
# object_store and delta-rs S3 keys txnlog has no use for (locking providers, DynamoDB, roles
# assumed by delta-rs, encryption settings...): accepted, so that deltalake's options work here.
_IGNORED = frozenset({
    "bucket", "bucket_name", "s3_express", "imdsv1_fallback", "metadata_endpoint", "unsigned_payload",
    "checksum_algorithm", "container_credentials_relative_uri", "container_credentials_full_uri",
    "container_authorization_token_file", "web_identity_token_file", "role_arn", "role_session_name",
    "endpoint_url_sts", "copy_if_not_exists", "conditional_put", "disable_tagging", "disable_bulk_delete",
    "request_payer", "server_side_encryption", "sse_kms_key_id", "sse_bucket_key_enabled", "sse_customer_key_base64",
    "endpoint_url_dynamodb", "region_dynamodb", "access_key_id_dynamodb", "secret_access_key_dynamodb",
    "session_token_dynamodb", "s3_addressing_style", "s3_locking_provider", "iam_role_arn", "s3_assume_role_arn",
    "iam_role_session_name", "s3_role_session_name", "s3_pool_idle_timeout_seconds", "sts_pool_idle_timeout_seconds",
    "s3_get_internal_server_error_retries", "s3_allow_unsafe_rename", "ec2_metadata_disabled", "ec2_metadata_timeout",
    "force_credential_load", "delta_dynamo_table_name", "delta_dynamo_billing_mode", "delta_dynamo_max_elapsed_request_time",
})


class S3LogStore(FsspecLogStore):
    supports_put_if_absent = True

    def __init__(self, root_uri: str, options: Mapping[str, Any] | None = None) -> None:
        s3fs = import_extra("s3fs", "s3")
        problem = _conditional_put_problem()
        if problem:
            raise PutIfAbsentUnsupportedError(f"cannot commit to {root_uri}: {problem}", path=None)
        kwargs = s3fs_kwargs(options or {})
        parsed = urlparse(root_uri)
        super().__init__(root_uri, s3fs.S3FileSystem(**kwargs), parsed.netloc + parsed.path)

    def list_from(self, directory: str, start_name: str = "") -> list[FileInfo]:
        """As the base class, but asks S3 only for keys from ``start_name`` on (``StartAfter``):
        a log keeps thousands of commits until cleanup, and a snapshot lists the newest few."""
        bucket, _, key = self._full(directory).partition("/")
        prefix = f"{key}/" if key else ""
        # StartAfter is exclusive: start just before start_name, and drop the few keys between.
        before = start_name[:-1] + (chr(ord(start_name[-1]) - 1) if start_name and start_name[-1] > "\0" else "")
        request = {"Bucket": bucket, "Prefix": prefix, "Delimiter": "/", "StartAfter": prefix + before}
        out = []
        with self._errors("list", directory):
            while True:
                page = self.fs.call_s3("list_objects_v2", **request)
                for o in page.get("Contents", []):
                    name = o["Key"][len(prefix) :]
                    if name >= start_name:
                        out.append(FileInfo(f"{directory}/{name}" if directory else name, o["Size"], mtime_ms(o)))
                if not page.get("IsTruncated"):
                    break
                request["ContinuationToken"] = page["NextContinuationToken"]
        out.sort(key=lambda f: f.path)
        return out

    def put_if_absent(self, path: str, data: bytes) -> None:
        self._conditional_put(path, data, lambda: self.fs.pipe_file(self._full(path), data, mode="create"), _classify)


def s3fs_kwargs(options: Mapping[str, Any]) -> dict[str, Any]:
    """``S3FileSystem`` arguments from s3fs's own options and/or delta-rs style ``AWS_*`` keys."""
    import s3fs  # optional dependency (txnlog[s3])

    kwargs, mapped = split_options(
        options, s3fs.S3FileSystem, _ALIASES, where="an S3 table", prefixes=("aws_",), extra=("profile",), ignored=_IGNORED
    )
    for name in ("endpoint_url", "key", "secret", "token", "anon", "profile"):
        if name in mapped:
            kwargs.setdefault(name, mapped[name])
    endpoint = kwargs.get("endpoint_url")
    if endpoint and "://" not in endpoint and as_bool(mapped.get("allow_http")):
        kwargs["endpoint_url"] = f"http://{endpoint}"
    if "region" in mapped:
        kwargs["client_kwargs"] = {"region_name": mapped["region"], **kwargs.get("client_kwargs", {})}
    if as_bool(mapped.get("virtual_hosted_style_request")):
        config = dict(kwargs.get("config_kwargs", {}))
        config["s3"] = {"addressing_style": "virtual", **config.get("s3", {})}
        kwargs["config_kwargs"] = config
    if "anon" in kwargs:
        kwargs["anon"] = as_bool(kwargs["anon"])
    # The log must see a new commit at once: never answer a listing from s3fs's cache.
    kwargs.setdefault("use_listings_cache", False)
    return kwargs


@functools.cache
def _conditional_put_problem() -> str | None:
    """Why the installed s3fs/botocore would not send ``If-None-Match: *``, or None.

    Checked rather than assumed from versions: an s3fs without ``mode="create"`` takes ``mode``
    as an extra keyword, and s3fs silently drops keywords missing from botocore's service model,
    so either gap would turn put-if-absent into a silent overwrite.
    """
    import botocore  # optional dependency (txnlog[s3])
    import botocore.session  # optional dependency (txnlog[s3])
    import s3fs  # optional dependency (txnlog[s3])

    pipe = s3fs.S3FileSystem._pipe_file
    try:
        source = inspect.getsource(pipe)
    except (OSError, TypeError):
        source = ""
    if "mode" not in inspect.signature(pipe).parameters or "IfNoneMatch" not in source:
        return f"s3fs {s3fs.__version__} does not send If-None-Match for pipe_file(mode='create'); install s3fs>=2025.1"
    model = botocore.session.get_session().get_service_model("s3").operation_model("PutObject")
    if "IfNoneMatch" not in model.input_shape.members:
        return f"botocore {botocore.__version__} has no IfNoneMatch on PutObject; upgrade botocore/aiobotocore"
    return None


def _classify(error: Exception) -> Outcome:
    """What a failed conditional PUT means, after s3fs's and botocore's own retries."""
    import botocore.exceptions as bx  # optional dependency (txnlog[s3])

    if isinstance(error, FileExistsError):
        return "exists"
    cause = error.__cause__ if isinstance(error.__cause__, bx.ClientError) else error
    if isinstance(cause, bx.ClientError):
        code = cause.response.get("Error", {}).get("Code")
        status = cause.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        if status == 412 or code == "PreconditionFailed":
            return "exists"
        if status == 409 or code == "ConditionalRequestConflict":
            return "conflict"
        return status_outcome(status)
    if isinstance(error, bx.ConnectTimeoutError):
        return "failed"
    if isinstance(error, bx.EndpointConnectionError):
        return "failed" if connect_failed(getattr(error, "kwargs", {}).get("error")) else "ambiguous"
    if isinstance(error, (bx.NoCredentialsError, bx.ParamValidationError)):
        return "failed"
    return "ambiguous"
