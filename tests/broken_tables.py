"""Tables other writers may leave behind that txnlog must refuse clearly."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

import txnlog

SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.int64())])


def row_tracking_without_column_names(root: Path) -> txnlog.Table:
    """A table with row tracking enabled whose latest metadata names no materialized row-id
    column (delta.rowTracking.materialized*ColumnName): its rows can be read, but a rewrite
    cannot keep their stable ids."""
    table = txnlog.Table.create(root, SCHEMA, properties={"delta.enableRowTracking": "true"})
    table.append(pa.table({"id": [1, 2, 3], "v": [0, 0, 0]}, schema=SCHEMA))
    log = root / "_delta_log"
    first = [json.loads(line) for line in (log / f"{0:020d}.json").read_text().splitlines() if line.strip()]
    metadata = next(a["metaData"] for a in first if "metaData" in a)
    metadata["configuration"] = {k: v for k, v in metadata["configuration"].items() if "materialized" not in k}
    version = table.latest_version() + 1
    lines = [{"commitInfo": {"timestamp": 1, "operation": "SET TBLPROPERTIES"}}, {"metaData": metadata}]
    (log / f"{version:020d}.json").write_text("\n".join(json.dumps(a) for a in lines) + "\n")
    return txnlog.Table(root)
