"""Change data files: the rows an operation changed, with their ``_change_type``, written as
Parquet under ``_change_data/`` in the table's layout (partition directories, physical names
under column mapping) and returned as ``cdc`` actions for ``txn.add_cdc_files``."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from txnlog import properties as props
from txnlog.errors import InvalidArgumentError, SchemaError
from txnlog.log.actions import AddCDCFile
from txnlog.schema import FIELD_METADATA_KEY
from txnlog.storage import LogStore
from txnlog.write.parquet import as_reader, write_data_files

if TYPE_CHECKING:
    from txnlog.write.context import WriteContext

#: Where change data files live, below the table root.
CHANGE_DATA_DIR = "_change_data"
CHANGE_TYPE_COLUMN = "_change_type"
CHANGE_TYPES = ("insert", "delete", "update_preimage", "update_postimage")

# Change files hold ``_change_type`` under that name, column mapping or not.
_CHANGE_TYPE_FIELD = pa.field(CHANGE_TYPE_COLUMN, pa.string(), metadata={FIELD_METADATA_KEY: orjson.dumps({props.PHYSICAL_NAME_KEY: CHANGE_TYPE_COLUMN})})


def write_change_files(
    context: WriteContext,
    data: pa.Table | pa.RecordBatch | pa.RecordBatchReader | Iterable[pa.RecordBatch],
    *,
    store: LogStore | None = None,
) -> list[AddCDCFile]:
    """Write change rows (the table's logical columns plus ``_change_type``, one of
    :data:`CHANGE_TYPES`) as ``cdc-*.parquet`` files under ``_change_data/``, partitioned like the
    table. The files are invisible until a transaction commits the returned actions
    (``txn.add_cdc_files``); CHECK constraints are not applied (pre-images and deleted rows are
    old rows)."""
    reader = as_reader(data)
    check_change_columns(context, reader.schema.names)
    schema = context.schema.append(_CHANGE_TYPE_FIELD)
    adds = write_data_files(
        store if store is not None else context.open_store(),
        pa.RecordBatchReader.from_batches(reader.schema, _checked(reader, context.table_uri)),
        table_configuration=context.table_configuration,
        table_schema=schema,
        target_file_size=context.file_size,
        data_change=False,
        file_prefix="cdc",
        compression=context.compression,
        directory=CHANGE_DATA_DIR,
    )
    return [AddCDCFile(a.path, a.partition_values, a.size or 0, data_change=False) for a in adds]


def check_change_columns(context: WriteContext, names: Iterable[str]) -> None:
    """SchemaError unless change rows with columns ``names`` can be written to the table:
    they need a ``_change_type`` column, and the table may not have one of its own."""
    if CHANGE_TYPE_COLUMN not in names:
        raise SchemaError(f"change rows for table {context.table_uri} need a {CHANGE_TYPE_COLUMN} column", field=CHANGE_TYPE_COLUMN)
    if CHANGE_TYPE_COLUMN.lower() in {f.name.lower() for f in context.schema}:
        raise SchemaError(f"table {context.table_uri} has a column named {CHANGE_TYPE_COLUMN}, which change data reserves", field=CHANGE_TYPE_COLUMN)


def invalid_change_type(table_uri: str, found: object) -> InvalidArgumentError:
    """The error for change rows whose ``_change_type`` is ``found``, not one of :data:`CHANGE_TYPES`."""
    return InvalidArgumentError(f"change rows for table {table_uri}: {CHANGE_TYPE_COLUMN} {found!r} is not one of {', '.join(CHANGE_TYPES)}")


def _checked(reader: pa.RecordBatchReader, table_uri: str) -> Iterator[pa.RecordBatch]:
    allowed = pa.array(CHANGE_TYPES)
    for batch in reader:
        kinds = batch.column(CHANGE_TYPE_COLUMN)
        bad = pc.invert(pc.fill_null(pc.is_in(kinds, value_set=allowed), False))
        if pc.any(bad).as_py():
            raise invalid_change_type(table_uri, kinds.filter(bad)[0].as_py())
        yield batch


__all__ = ["CHANGE_DATA_DIR", "CHANGE_TYPES", "CHANGE_TYPE_COLUMN", "check_change_columns", "invalid_change_type", "write_change_files"]
