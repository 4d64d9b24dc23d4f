"""The differential conflict matrix of docs/concurrency.md, run: each scenario through txnlog
and through delta-spark 4.4 in the shared session (tests/txn/delta_spark_conflicts.py). Both
columns must be what running gives, and where they differ the row must name a relaxation
(R1, R2, ...) that the doc proves equal to a serial order, or a difference (D1, ...) it explains."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import session_confs
from tests.txn.delta_spark_conflicts import GROUPS, Cell, Delta, run_all

#: The first test runs every scenario in the module fixture: 136 of them took 10 minutes on 2
#: cores at a load average of 30, past the suite's 600 s per test.
pytestmark = [pytest.mark.spark, pytest.mark.timeout(1800)]

DOC = Path(__file__).resolve().parents[2] / "docs" / "concurrency.md"
#: Session settings that make delta-spark's small-table transactions cheaper; restored after.
FAST = {"spark.databricks.delta.snapshotPartitions": "1", "spark.databricks.delta.writeChecksumFile.enabled": "false"}


def doc_rows() -> list[list[str]]:
    section = DOC.read_text().split("### The differential matrix", 1)[1].split("\n#", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[0] in {g.setup.name for g in GROUPS}:
            rows.append(cells)
    return rows


ROWS = doc_rows()


#: The default suite's slice of the matrix (the whole of it runs under ``soak``): the issue's
#: four classes of difference, i.e. a DELETE racing OPTIMIZE and the empty transaction, metadata
#: changes under WriteSerializable, and protocol and metadata winners.
DEFAULT_WINNERS = {
    ("unpartitioned", "delete of A"),
    ("unpartitioned", "delta-spark DELETE of A"),
    ("unpartitioned", "blind append in P"),
    ("unpartitioned, WriteSerializable", "blind append in P"),
    ("unpartitioned, WriteSerializable", "delta-spark INSERT in P"),
    ("unpartitioned", "txnlog: enable deletion vectors"),
    ("unpartitioned", "delta-spark: enable deletion vectors"),
    ("unpartitioned", "txnlog: enable row tracking"),
}


def _scenario(row: list[str]) -> Any:
    marks = () if (row[0], row[1]) in DEFAULT_WINNERS else (pytest.mark.soak,)
    return pytest.param(row, id=" / ".join(row[:3]), marks=marks)


def _selected_groups(session: pytest.Session) -> list[Any]:
    """The groups, cut to the (table, winner) pairs the selected tests ask for."""
    import dataclasses

    from tests.txn.delta_spark_conflicts import GROUPS

    wanted: set[tuple[str, str]] = set()
    for item in session.items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if "row" in params:
            wanted.add((params["row"][0], params["row"][1]))
        elif "winner" in params and item.module is not None and item.module.__name__ == __name__:
            wanted.add(("unpartitioned", params["winner"]))
        elif item.name == "test_the_doc_lists_every_scenario_once":
            return list(GROUPS)
    return [
        dataclasses.replace(g, winners=[w for w in g.winners if (g.setup.name, w.name) in wanted])
        for g in GROUPS
        if any((g.setup.name, w.name) in wanted for w in g.winners)
    ]


@pytest.fixture(scope="module")
def matrix(request: pytest.FixtureRequest, spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str, str], Cell]:
    """The selected scenarios, run once for the module (the ``delta_spark`` fixture's skip,
    module-wide)."""
    if "DeltaSparkSessionExtension" not in (spark.conf.get("spark.sql.extensions", "") or ""):
        pytest.skip("delta-spark's jars are not fetched; run `make jars`")
    delta_spark = spark
    try:
        with session_confs(delta_spark, FAST):
            cells = list(run_all(tmp_path_factory.mktemp("differential"), delta_spark, _selected_groups(request.session)))
    finally:
        Delta(delta_spark).clear_cache()
    return {(c.setup, c.winner, c.loser): c for c in cells}


@pytest.mark.soak
def test_the_doc_lists_every_scenario_once(matrix: dict[tuple[str, str, str], Cell]) -> None:
    listed = [tuple(row[:3]) for row in ROWS]
    assert len(listed) == len(set(listed))
    assert set(listed) == set(matrix)


@pytest.mark.parametrize("row", [_scenario(row) for row in ROWS])
def test_each_scenario(matrix: dict[tuple[str, str, str], Cell], row: list[str]) -> None:
    cell = matrix[(row[0], row[1], row[2])]
    assert (cell.delta, cell.txnlog) == (row[3], row[4])


def test_every_difference_is_a_documented_relaxation() -> None:
    text = DOC.read_text()
    for row in ROWS:
        if row[3] != row[4]:
            names = re.findall(r"[RD]\d+", row[5])
            assert names, f"{row[:3]}: delta-spark {row[3]}, txnlog {row[4]}, and no relaxation or difference named"
            for name in names:
                assert f"**{name}**" in text, f"{name} is not defined in docs/concurrency.md"


@pytest.mark.parametrize("winner", ["delete of A", "delta-spark DELETE of A"])
def test_optimize_meets_a_delete_of_its_input_as_delete_read(matrix: dict[tuple[str, str, str], Cell], winner: str) -> None:
    cell = matrix[("unpartitioned", winner, "OPTIMIZE of P")]
    assert cell.delta == "DeleteRead"
    assert cell.txnlog == cell.delta


def test_txnlog_tolerates_delta_sparks_identity_only_updates(delta_spark: Any, tmp_path: Path) -> None:
    """D3: txnlog's identity-only rule, checked on delta-spark's own
    identity commits: an INSERT generating ids and SYNC IDENTITY only move high-water marks, and
    are tolerated unless the transaction changes metadata too; by their tag or, without it, by
    their content (R5)."""
    import dataclasses

    from tests.txn.delta_spark_conflicts import IDENTITY
    from txnlog import Table
    from txnlog.errors import MetadataChangedError
    from txnlog.log.commits import read_commits
    from txnlog.log.segment import list_log
    from txnlog.txn.conflicts import TransactionFootprint, Winners, adopt_table_changes
    from txnlog.txn.isolation import IsolationLevel
    from txnlog.txn.table_changes import TableView

    path = tmp_path / "t"
    IDENTITY.create(path, delta_spark)
    table = Table(str(path))
    for statement in (f"INSERT INTO delta.`{path}` (p, v) VALUES ('b', 0)", f"ALTER TABLE delta.`{path}` ALTER COLUMN id SYNC IDENTITY"):
        before = table.snapshot()
        delta_spark.sql(statement)
        listing = list_log(table.store, before.version + 1)
        commits = read_commits(table.store, [listing.commits[v] for v in sorted(listing.commits)])
        winner = Winners.of(commits)
        [metadata] = winner.metadatas.values()
        assert metadata.schema_string != before.metadata.schema_string  # a high-water mark moved
        untagged = Winners.of([dataclasses.replace(c, actions=[a for a in c.actions if "commitInfo" not in a]) for c in commits])
        for winners in (winner, untagged):
            for changes_metadata in (False, True):
                view = TableView(before.protocol, before.protocol, before.metadata, changes_protocol=False, changes_metadata=changes_metadata)
                footprint = TransactionFootprint(read_version=before.version, isolation=IsolationLevel.SERIALIZABLE, view=view)
                conflict = adopt_table_changes(footprint, winners)
                if changes_metadata:
                    assert isinstance(conflict, MetadataChangedError)
                else:
                    assert conflict is None and footprint.view is not None and footprint.view.metadata == before.metadata
