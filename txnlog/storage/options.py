"""Which ``storage_options`` keys each store knows, and the error for one it does not.

One options dict serves txnlog and deltalake alike, so every store accepts the delta-rs
(object_store) keys of its cloud, any case, with or without the cloud's prefix (``AWS_REGION``,
``region``): the ones txnlog maps onto the fsspec filesystem, and the ones it has no use for
(locking providers, HTTP client tuning, retries), which are accepted and ignored. Any other key
is refused: a misspelled credential or endpoint must not fall back, silently, to the defaults
(real AWS, say).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from txnlog.errors import InvalidArgumentError

#: delta-rs keys of every store that txnlog has no use for: object_store's HTTP client, delta-rs's
#: runtime, retry and log cache settings (lower case, without a cloud prefix).
DELTA_RS_IGNORED = frozenset({
    # object_store ClientConfigKey
    "allow_invalid_certificates", "disable_system_certificates", "connect_timeout", "default_content_type",
    "http1_only", "http2_only", "http2_keep_alive_interval", "http2_keep_alive_timeout",
    "http2_keep_alive_while_idle", "http2_max_frame_size", "pool_idle_timeout", "pool_max_idle_per_host",
    "proxy_url", "proxy_ca_certificate", "proxy_excludes", "randomize_addresses", "read_timeout", "timeout",
    "user_agent",
    # delta-rs runtime, retries, log cache
    "multi_threaded", "worker_threads", "thread_name", "enable_io", "enable_time",
    "max_retries", "retry_timeout", "init_backoff", "max_backoff", "base",
    "backoff_config.init_backoff", "backoff_config.max_backoff", "backoff_config.base",
    "backoff.init_backoff", "backoff.max_backoff", "backoff.base",
    "max_size_memory_mb", "max_size_disk_mb", "directory",
})


def unknown_option(key: str, where: str, known: Iterable[str], *, prefix: str = "", details: str = "") -> InvalidArgumentError:
    """The error for storage option ``key``, which ``where`` (e.g. "an S3 table") does not
    know: it lists ``known`` (the keys txnlog acts on) and suggests the closest, spelled as
    ``key`` is (its case, and ``prefix`` if it has it)."""
    names = sorted(set(known))
    lowered = key.lower()
    has_prefix = bool(prefix) and lowered.startswith(prefix)
    close = difflib.get_close_matches(lowered.removeprefix(prefix) if has_prefix else lowered, [n.lower() for n in names], n=1, cutoff=0.75)
    hint = ""
    if close:
        match = (prefix if has_prefix else "") + close[0]
        hint = f" (did you mean '{match.upper() if key.isupper() else match}'?)"
    listing = ", ".join(names) if names else "none"
    return InvalidArgumentError(f"unknown storage option {key!r} for {where}{hint}; known keys: {listing}{details}")


def check_options(options: Iterable[str], where: str, known: Iterable[str]) -> None:
    """Refuse any key of ``options`` that is neither one of ``known`` nor a delta-rs key of
    every store (:data:`DELTA_RS_IGNORED`); for stores with no cloud keys (local, memory)."""
    accepted = set(known)
    for key in options:
        if key not in accepted and key.lower() not in DELTA_RS_IGNORED:
            raise unknown_option(key, where, accepted, details="; delta-rs client, retry and runtime keys are accepted and ignored")


__all__ = ["DELTA_RS_IGNORED", "check_options", "unknown_option"]
