"""Writing a Spark DataFrame to a txnlog table: the core's write planner decides, executors write
the Parquet files (:mod:`txnlog.spark.tasks`), the driver commits the log.

Every mode is planned by :func:`txnlog.dml.plan_write` (what is created, skipped, removed and
checked, and the change data each mode records), the same planner ``Table.write`` and the Spark
data source use; a replaceWhere's row removal runs as a Spark DELETE
(:mod:`txnlog.spark.row_changes`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from txnlog import CommitResult, Table
from txnlog.dml import WriteOptions, stage_write
from txnlog.spark.common import arrow_schema_of_struct, delta_schema_of, require_dataframe
from txnlog.spark.row_changes import SparkRemoval
from txnlog.spark.tasks import write_files

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

MODES = ("append", "overwrite", "error", "ignore")


def write(
    df: DataFrame,
    uri: str,
    mode: str = "append",
    partition_by: Sequence[str] | str | None = None,
    replace_where: str | None = None,
    properties: Mapping[str, str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    app_id: str | None = None,
    app_version: int | None = None,
    merge_schema: bool = False,
    *,
    target_file_size: int | None = None,
    partition_overwrite_mode: str = "static",
    schema_mode: str | None = None,
) -> CommitResult | None:
    """Write ``df`` to the table at ``uri`` in one commit; the version committed, or None when
    nothing was written (``mode="ignore"`` on an existing table, ``app_version`` already done,
    or an empty DataFrame appended: no commit, as in delta-spark).

    ``mode``: "append"; "overwrite" replaces every row (or, with ``replace_where``, only rows
    matching it, and then every written row must match it too); "error" refuses an existing
    table; "ignore" leaves one alone. A table that does not exist is created with the
    DataFrame's schema, ``partition_by`` and ``properties``. ``app_id``/``app_version`` make the
    write idempotent. ``merge_schema`` (``schema_mode="merge"``) adds the DataFrame's new
    columns to the table (nullable) and applies allowed widenings; ``schema_mode="overwrite"``
    with ``mode="overwrite"`` replaces the table's schema and partitioning (delta-spark's
    ``overwriteSchema``).
    ``partition_overwrite_mode="dynamic"``: an overwrite replaces only the partitions ``df`` has
    rows in (Spark's ``partitionOverwriteMode``).
    """
    require_dataframe(df)
    options = WriteOptions(mode, tuple([partition_by] if isinstance(partition_by, str) else partition_by) if partition_by is not None else None,
                           replace_where, dict(properties or {}), app_id, app_version, merge_schema, target_file_size,
                           partition_overwrite_mode=partition_overwrite_mode, schema_mode=schema_mode)
    table = Table(uri, storage_options)
    plan = table.plan_write(arrow_schema_of_struct(df.schema), options, table_schema=delta_schema_of(df.schema))
    if plan.context is None:
        return None
    txn = table.open_write(plan)
    if txn is None:
        return None
    with txn:
        # An explicit target size is passed on: files are then cut at it (by the Python tasks).
        adds = write_files(df, plan.context, require=replace_where, target_file_size=target_file_size)
        result = stage_write(txn, plan, adds, SparkRemoval(df.sparkSession, txn, plan.context))
        if result is None:
            return None
        txn.set_operation_metrics(**result.metrics)
    return txn.result


__all__ = ["MODES", "write", "write_files"]
