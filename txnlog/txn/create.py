"""Creating a table: the first commit (or a CREATE OR REPLACE of an existing table)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from txnlog.errors import InvalidArgumentError, TableAlreadyExistsError
from txnlog.txn.transaction import OptimisticTransaction

if TYPE_CHECKING:  # annotations only: the Table sits above transactions
    from txnlog.table import Table

MODES = ("error", "ignore", "overwrite")


def create_table(
    table: Table,
    schema: pa.Schema | str | Mapping[str, Any],
    *,
    partition_by: Sequence[str] = (),
    properties: Mapping[str, str] | None = None,
    mode: str = "error",
    name: str | None = None,
    description: str | None = None,
) -> int | None:
    """Commit ``table``'s first version (or replace it with ``mode="overwrite"``); the version
    committed, or None when ``mode="ignore"`` found a table there."""
    if mode not in MODES:
        raise InvalidArgumentError(f"mode must be one of {list(MODES)}, got {mode!r}")
    if isinstance(partition_by, str):
        partition_by = [partition_by]
    params = {"partitionBy": list(partition_by), "properties": dict(properties or {})}
    if table.exists():
        if mode == "error":
            raise TableAlreadyExistsError(f"a Delta table already exists at {table.uri}", uri=table.uri)
        if mode == "ignore":
            return None
        txn = table.transaction("CREATE OR REPLACE TABLE", operation_parameters=params)
        txn.remove_files(txn.read_whole_table())
    else:
        txn = OptimisticTransaction(table, None, operation="CREATE TABLE", operation_parameters=params)
    txn.update_metadata(
        schema=schema,
        partition_columns=tuple(partition_by),
        configuration=dict(properties or {}),
        name=name,
        description=description,
    )
    return int(txn.commit())
