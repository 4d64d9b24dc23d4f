"""Creating a table: the first commit (or a CREATE OR REPLACE of an existing table)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson
import pyarrow as pa

from txnlog import properties as props
from txnlog.errors import InvalidArgumentError, TableAlreadyExistsError
from txnlog.log.filenames import LOG_DIR
from txnlog.log.segment import LogListing
from txnlog.log.table_state import TableState
from txnlog.snapshot import Snapshot, load_state
from txnlog.storage.location import TableLocation
from txnlog.txn.hooks import HookRegistry
from txnlog.txn.schema_changes import column_path
from txnlog.txn.transaction import OptimisticTransaction

MODES = ("error", "ignore", "overwrite")


def create_table(
    location: TableLocation,
    schema: pa.Schema | str | Mapping[str, Any],
    *,
    partition_by: Sequence[str] = (),
    properties: Mapping[str, str] | None = None,
    mode: str = "error",
    name: str | None = None,
    description: str | None = None,
    hooks: HookRegistry | None = None,
    on_commit: Callable[[TableState], None] | None = None,
    cluster_by: Sequence[str | Sequence[str]] = (),
) -> int | None:
    """Commit the first version of the table at ``location`` (or replace it with
    ``mode="overwrite"``); the version committed, or None when ``mode="ignore"`` found a table
    there. ``hooks`` and ``on_commit`` are the transaction's (see OptimisticTransaction)."""
    if mode not in MODES:
        raise InvalidArgumentError(f"mode must be one of {list(MODES)}, got {mode!r}")
    if isinstance(partition_by, str):
        partition_by = [partition_by]
    params = {"partitionBy": list(partition_by), "properties": dict(properties or {})}
    if LogListing.of(location.store.list_from(LOG_DIR)).latest_version() is not None:
        if mode == "error":
            raise TableAlreadyExistsError(f"a Delta table already exists at {location.uri}", uri=location.uri)
        if mode == "ignore":
            return None
        snapshot = Snapshot(location, load_state(location.store))
        txn = OptimisticTransaction(
            location, snapshot, operation="CREATE OR REPLACE TABLE", operation_parameters=params, hooks=hooks, on_commit=on_commit
        )
        txn.remove_files(txn.read_whole_table())
    else:
        txn = OptimisticTransaction(location, None, operation="CREATE TABLE", operation_parameters=params, hooks=hooks, on_commit=on_commit)
    txn.update_metadata(
        schema=schema,
        partition_columns=tuple(partition_by),
        configuration=dict(properties or {}),
        name=name,
        description=description,
        replace_table=True,
    )
    if cluster_by:
        txn.operation_parameters["clusterBy"] = orjson.dumps([".".join(column_path(c)) for c in cluster_by]).decode()
        txn.cluster_by(cluster_by)
    elif txn.snapshot is not None and txn.snapshot.domain_metadata(props.CLUSTERING_DOMAIN):
        txn.cluster_by([])  # a replaced table keeps no clustering it did not ask for
    return int(txn.commit())
