"""The property registry: every property read through it, values normalised there, unknown keys
refused on write (naming the nearest known one), and nothing else in txnlog spelling a key."""

from __future__ import annotations

import ast
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from txnlog import Table
from txnlog import properties as props
from txnlog.errors import InvalidTablePropertyError

PACKAGE = Path(__file__).resolve().parent.parent / "txnlog"
SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.string())])
DATA = pa.table({"id": [1, 2], "part": ["a", "b"]})


def _features(snapshot: object) -> tuple[int, int, list[str], list[str]]:
    p = snapshot.protocol  # type: ignore[attr-defined]
    return p.min_reader_version, p.min_writer_version, sorted(p.reader_features or ()), sorted(p.writer_features or ())


@pytest.mark.parametrize(
    "key, spellings, expected",
    [
        ("delta.columnMapping.mode", ["name", "Name", "NAME", "id", "ID"], (2, 5, [], [])),
        ("delta.checkpointPolicy", ["v2", "V2"], (3, 7, ["v2Checkpoint"], ["appendOnly", "invariants", "v2Checkpoint"])),
        ("delta.enableDeletionVectors", ["true", "True", "TRUE"], (3, 7, ["deletionVectors"], ["appendOnly", "deletionVectors", "invariants"])),
        ("delta.enableChangeDataFeed", ["true", "True"], (1, 4, [], [])),
        ("delta.enableInCommitTimestamps", ["true", "TRUE"], (1, 7, [], ["appendOnly", "inCommitTimestamp", "invariants"])),
        ("delta.appendOnly", ["true", "True"], (1, 2, [], [])),
        ("delta.feature.domainMetadata", ["supported", "Supported"], (1, 7, [], ["appendOnly", "domainMetadata", "invariants"])),
        ("delta.minWriterVersion", ["4"], (1, 4, [], [])),
        ("delta.constraints.positive", ["id > 0"], (1, 3, [], [])),
    ],
)
def test_each_property_that_changes_the_protocol_in_each_spelling(tmp_path: Path, key: str, spellings: list[str], expected: tuple) -> None:
    for i, value in enumerate(spellings):
        uri = tmp_path / f"t{i}"
        table = Table.create(uri, SCHEMA, partition_by=["part"], properties={key: value})
        table.append(DATA)
        snapshot = table.snapshot()
        assert _features(snapshot) == expected, (key, value)
        if key == "delta.columnMapping.mode":
            assert snapshot.configuration[key] == value.lower()  # stored canonical
            assert snapshot.files().column("partition_values")[0].as_py()[0][0].startswith("col-")
        # An independent reader agrees.
        dt = DeltaTable(str(uri))
        assert (dt.protocol().min_reader_version, dt.protocol().min_writer_version) == expected[:2]
        if not expected[2]:  # deltalake 1.6 reads no table with v2Checkpoint or deletionVectors reader features
            assert dt.to_pyarrow_table().num_rows == 2


def test_values_are_read_case_insensitively() -> None:
    assert props.CHECKPOINT_POLICY.get({"delta.checkpointPolicy": "V2"}) == "v2"
    assert props.COLUMN_MAPPING_MODE.get({"delta.columnMapping.mode": "Name"}) == "name"
    assert props.APPEND_ONLY.get({"delta.appendOnly": "TRUE"}) is True
    assert props.APPEND_ONLY.get({"delta.appendonly": "true"}) is True  # a key in another case, too


@pytest.mark.parametrize(
    "key, nearest",
    [
        ("delta.checkpointIntervall", "delta.checkpointInterval"),
        ("delta.enableDeletionVector", "delta.enableDeletionVectors"),
        ("txnlog.commit.retry.num-retry", "txnlog.commit.retry.num-retries"),
        ("delta.constraint.positive", "delta.constraints.<name>"),
    ],
)
def test_unknown_keys_are_refused_naming_the_nearest(tmp_path: Path, key: str, nearest: str) -> None:
    with pytest.raises(InvalidTablePropertyError, match=f"did you mean {nearest}") as err:
        Table.create(tmp_path / "t", SCHEMA, properties={key: "1"})
    assert err.value.key == key
    assert not (tmp_path / "t" / "_delta_log").exists() or not list((tmp_path / "t" / "_delta_log").iterdir())


def test_keys_real_tables_carry_are_known_and_other_namespaces_pass(tmp_path: Path) -> None:
    carried = {
        "delta.autoOptimize.optimizeWrite": "true",
        "delta.tuneFileSizesForRewrites": "true",
        "delta.universalFormat.enabledFormats": "iceberg",
        "delta.columnMapping.maxColumnId": "0",
        "delta.checkpointRetentionDuration": "interval 2 days",
        "pipelines.pipelineId": "x",
        "owner": "team",
    }
    table = Table.create(tmp_path / "t", SCHEMA, properties=carried)
    assert dict(table.snapshot().configuration) == carried


def test_reading_and_rewriting_a_table_with_unknown_keys_works(log_writer: object) -> None:
    w = log_writer()  # type: ignore[operator]
    w.create(configuration={"delta.someFutureKey": "1", "delta.appendOnly": "false"})
    table = Table(w.uri)
    assert table.snapshot().configuration["delta.someFutureKey"] == "1"
    with table.transaction() as txn:  # carried keys pass; only new or changed ones are checked
        txn.update_metadata(configuration={**table.snapshot().configuration, "delta.appendOnly": "true"})
    assert table.snapshot().configuration == {"delta.someFutureKey": "1", "delta.appendOnly": "true"}
    with table.transaction() as txn, pytest.raises(InvalidTablePropertyError, match="delta.anotherFutureKey"):
        txn.update_metadata(configuration={"delta.anotherFutureKey": "1"})


def test_properties_doc_marks_each_property() -> None:
    text = props.markdown()
    for p in props.PROPERTIES.values():
        assert f"`{p.key}`" in text
    assert "carried, not enforced" in text and "acted on" in text
    generated = (PACKAGE.parent / "docs" / "properties.md").read_text()
    assert generated == text, "docs/properties.md is stale: run `make docs`"


def _string_constants(tree: ast.AST) -> list[tuple[int, str]]:
    """String literals, docstrings left out."""
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


# Literals that start like a key but are no table property: the hook entry-point group.
NOT_KEYS = {"txnlog.post_commit_hooks"}


def test_no_module_but_the_registry_spells_a_delta_or_txnlog_key() -> None:
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "properties.py" and path.parent == PACKAGE:
            continue
        for line, text in _string_constants(ast.parse(path.read_text(), str(path))):
            if text.startswith(("delta.", "txnlog.")) and text not in NOT_KEYS:
                offenders.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {text!r}")
    assert not offenders, "read keys through txnlog.properties:\n" + "\n".join(offenders)
