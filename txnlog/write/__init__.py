"""Writing data files: Parquet in the table's layout, with per-file statistics; and change
data files for the change data feed.

This ``__all__`` is what engines may use; the modules behind it are the core's own.
"""

from txnlog.write.changes import CHANGE_DATA_DIR, check_change_columns, invalid_change_type, write_change_files
from txnlog.write.conform import (
    MAX_TASKS,
    TASK_SPAN,
    ColumnSpec,
    ConformSpec,
    Fill,
    IdentityAllocator,
    RowKind,
    generated_mismatch,
    identity_overflow,
    last_identity_index,
)
from txnlog.write.constraints import constraint_violation
from txnlog.write.context import WriteContext, WrittenFiles
from txnlog.write.deletion_vectors import RowDeletes, delete_rows, union_rows, write_deletion_vectors
from txnlog.write.parquet import (
    OUTPUT_DIRECTORY,
    ArrowData,
    CastCheck,
    arrow_schema_of,
    as_reader,
    cast_check,
    encode_log_path,
    null_elements,
    null_map_values,
    null_values,
    output_directory,
    unescape_path_name,
    unsafe_cast,
    write_data_files,
    written_partition_values,
)
from txnlog.write.stats import StatsCollector, file_stats, parquet_file_stats

__all__ = [
    "CHANGE_DATA_DIR",
    "MAX_TASKS",
    "OUTPUT_DIRECTORY",
    "TASK_SPAN",
    "ArrowData",
    "CastCheck",
    "ColumnSpec",
    "ConformSpec",
    "Fill",
    "IdentityAllocator",
    "RowDeletes",
    "RowKind",
    "StatsCollector",
    "WriteContext",
    "WrittenFiles",
    "arrow_schema_of",
    "as_reader",
    "cast_check",
    "check_change_columns",
    "constraint_violation",
    "delete_rows",
    "encode_log_path",
    "file_stats",
    "generated_mismatch",
    "invalid_change_type",
    "identity_overflow",
    "last_identity_index",
    "null_elements",
    "null_map_values",
    "null_values",
    "output_directory",
    "parquet_file_stats",
    "unescape_path_name",
    "union_rows",
    "unsafe_cast",
    "write_change_files",
    "write_data_files",
    "write_deletion_vectors",
    "written_partition_values",
]
