"""One conflict scenario matrix, run through txnlog and through delta-spark 4.4 in the shared
session: the same loser starts on two byte-identical copies of a table, one a txnlog
transaction, one delta-spark's own ``OptimisticTransaction`` (driven through py4j, so that the
winner commits between its read and its commit); the winner commits once, and its log and data
files are copied into every copy; then each loser commits. The outcome of each is what its
engine decided about the same winning commit.

A winner is a txnlog call or a delta-spark SQL statement; a loser is declared once
(:class:`Loser`) and staged on each engine through its own API. Run as a script, it prints the
matrix of docs/concurrency.md ("The differential matrix").
"""

from __future__ import annotations

import itertools
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa

from txnlog import OptimisticTransaction, Table
from txnlog.errors import CommitConflictError, TxnLogError
from txnlog.log import codec
from txnlog.optimize import OptimizeParameters, stage_optimize

SCHEMA = pa.schema([("id", pa.int64()), ("p", pa.string()), ("v", pa.int64())])
#: What a reading loser reads: file A (ids 0..4, p = 'a'), not file B (ids 10..14, p = 'b').
PREDICATE = {True: "p = 'a'", False: "id < 5"}

# -- outcomes -------------------------------------------------------------------------------

_LABELS = {
    "ConcurrentAppend": "Append",
    "ConcurrentDeleteRead": "DeleteRead",
    "ConcurrentRows": "DeleteRead",
    "ConcurrentDeleteDelete": "DeleteDelete",
    "MetadataChanged": "Metadata",
    "ProtocolChanged": "Protocol",
    "ConcurrentTransaction": "Txn",
}


def _label(name: str) -> str:
    for suffix in ("Error", "Exception"):
        name = name.removesuffix(suffix)
    return _LABELS.get(name, f"other:{name}")


def txnlog_outcome(commit: Callable[[], Any]) -> str:
    try:
        commit()
    except CommitConflictError as e:
        return _label(type(e).__name__)
    except TxnLogError as e:
        return f"refused:{type(e).__name__}"
    return "ok"


def delta_outcome(commit: Callable[[], Any]) -> str:
    try:
        commit()
    except Exception as e:  # noqa: BLE001 - a Py4JJavaError, or pyspark's conversion of one
        # Once delta-spark's Python package is imported (delta.exceptions), py4j errors arrive
        # converted to its captured exceptions, which keep the Java throwable as _origin.
        from pyspark.errors.exceptions.captured import CapturedException

        java = getattr(e, "java_exception", None) or getattr(e, "_origin", None)
        if java is None:
            if not isinstance(e, CapturedException):
                raise
            return _label(type(e).__name__)  # delta-spark names its captured classes after the Java ones
        label = _label(str(java.getClass().getSimpleName()))
        if label.startswith("other:"):
            frames = [str(f) for f in java.getStackTrace()[:4]]
            label += f" ({str(java.getMessage())[:300]} at {frames})"
        return label
    return "ok"


# -- delta-spark through py4j ---------------------------------------------------------------


class Delta:
    """delta-spark's DeltaLog and OptimisticTransaction in the shared session, through py4j."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self.jvm = spark._jvm
        self.convert = self.jvm.scala.jdk.javaapi.CollectionConverters
        self.delta = self.jvm.org.apache.spark.sql.delta

    def seq(self, items: Sequence[Any]) -> Any:
        java = self.jvm.java.util.ArrayList()
        for item in items:
            java.add(item)
        return self.convert.asScala(java).toSeq()

    def action(self, obj: dict[str, Any]) -> Any:
        add = obj.get("add")
        if add is not None and add.get("deletionVector"):
            # delta-spark keeps maxRowIndex in memory only and asserts it is never written out
            # (an interop difference of txnlog's log: it writes it).
            add["deletionVector"] = {k: v for k, v in add["deletionVector"].items() if k != "maxRowIndex"}
        return getattr(getattr(self.delta.actions, "Action$"), "MODULE$").fromJson(orjson.dumps(obj).decode())

    def condition(self, path: str, sql: str) -> Any:
        """``sql`` as a Catalyst expression over the table at ``path``, optimized (literals cast to
        the column's type) so that delta-spark's data skipping prunes with it, as its DML does."""
        return self.spark.read.format("delta").load(path).filter(sql)._jdf.queryExecution().optimizedPlan().condition()

    def start(self, path: str) -> Any:
        return self.delta.DeltaLog.forTable(self.spark._jsparkSession, path).startTransaction()

    def operation(self, name: str, predicate: Any = None) -> Any:
        """An operation named ``name``; UPDATE stands for every data-changing one (delta-spark
        keeps WriteSerializable for those when they change no data)."""
        if name == "UPDATE":
            return getattr(self.delta, "DeltaOperations$Update")(self.jvm.scala.Option.apply(predicate))
        return getattr(self.delta, "DeltaOperations$TestOperation")(name, self.jvm.scala.Option.empty())

    def clear_cache(self) -> None:
        self.delta.DeltaLog.clearCache()


# -- tables ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Setup:
    """A table of two files: A (ids 0..4, p = 'a') and B (ids 10..14, p = 'b')."""

    name: str
    partitioned: bool = False
    properties: dict[str, str] = field(default_factory=dict)
    identity: bool = False  # created by delta-spark with an identity column

    @property
    def predicate(self) -> str:
        return PREDICATE[self.partitioned]

    def create(self, path: Path, spark: Any) -> None:
        if self.identity:
            props = ", ".join(f"'{k}' = '{v}'" for k, v in self.properties.items())
            spark.sql(
                f"CREATE TABLE delta.`{path}` (id BIGINT GENERATED BY DEFAULT AS IDENTITY, p STRING, v BIGINT) USING delta"
                + (" PARTITIONED BY (p)" if self.partitioned else "")
                + (f" TBLPROPERTIES ({props})" if props else "")
            )
            for values in ("(0, 'a', 0), (1, 'a', 0), (2, 'a', 0), (3, 'a', 0), (4, 'a', 0)",
                           "(10, 'b', 0), (11, 'b', 0), (12, 'b', 0), (13, 'b', 0), (14, 'b', 0)"):
                spark.sql(f"INSERT INTO delta.`{path}` (id, p, v) VALUES {values}")
            return
        t = Table.create(path, SCHEMA, partition_by=["p"] if self.partitioned else (), properties=self.properties or None)
        t.append(rows(range(5), "a"))
        t.append(rows(range(10, 15), "b"))


def rows(ids: Sequence[int] | range, p: str, v: int = 0) -> pa.Table:
    ids = list(ids)
    return pa.table({"id": ids, "p": [p] * len(ids), "v": [v] * len(ids)}, schema=SCHEMA)


def sync(origin: Path, copy: Path, *, data_only: bool = False) -> None:
    """Copy into ``copy`` every file ``origin`` has and it lacks (the winner's commit and data;
    with ``data_only``, not its log)."""
    for source in origin.rglob("*"):
        target = copy / source.relative_to(origin)
        if data_only and source.relative_to(origin).parts[0] == "_delta_log":
            continue
        if source.is_file() and not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


# -- losers ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Loser:
    """What a losing transaction does, said once for both engines. ``read``: "P" (the setup's
    predicate), "*" (the whole table) or None."""

    name: str
    operation: str = "UPDATE"
    read: str | None = None
    remove: bool = False  # removes the files it read (dataChange=true)
    optimize: bool = False  # OPTIMIZE of the files P finds (txnlog's own; delta-spark's reads)
    append: bool = False  # adds rows of p = 'a' with new ids (in P's range)
    app_id: str | None = None  # reads it and sets it
    domain: str | None = None
    properties: dict[str, str] | None = None  # a metaData change
    feature: str | None = None  # a protocol change: this feature becomes supported


BLIND = Loser("blind append", "WRITE", append=True)
READ_WRITE = Loser("read P, rewrite", read="P", remove=True, append=True)
READ_APPEND = Loser("read P, append", read="P", append=True)
READ_ALL = Loser("read all, append", read="*", append=True)
OPTIMIZE = Loser("OPTIMIZE of P", "OPTIMIZE", optimize=True)
EMPTY = Loser("read P, no change", read="P")
CONSTRAINT = Loser("read all, add constraint", "ADD CONSTRAINT", read="*", properties={"delta.constraints.v_ok": "v >= 0"})
SET_PROPERTY = Loser("read all, set property", "SET TBLPROPERTIES", read="*", properties={"delta.logRetentionDuration": "interval 60 days"})
APP = Loser("app id A", "STREAMING UPDATE", app_id="app-a", append=True)
OTHER_APP = Loser("app id B", "STREAMING UPDATE", app_id="app-b", append=True)
DOMAIN = Loser("domain D", "WRITE", domain="user.d", append=True)
OTHER_DOMAIN = Loser("domain E", "WRITE", domain="user.e", append=True)
PROTOCOL = Loser("protocol change", "UPGRADE PROTOCOL", feature="deletionVectors")

NEW_IDS = range(5, 8)  # rows a loser appends: p = 'a', ids in P's range


def stage_txnlog(loser: Loser, path: Path, setup: Setup) -> OptimisticTransaction:
    table = Table(path)
    txn = table.transaction(loser.operation)
    files = None
    if loser.read == "P":
        files = txn.filter_files(setup.predicate)
    elif loser.read == "*":
        files = txn.read_whole_table()
    if loser.remove and files is not None:
        txn.remove_files(files)
    if loser.optimize:
        stage_optimize(txn, OptimizeParameters(min_files=1), files=txn.snapshot.files(setup.predicate))
    if loser.app_id:
        txn.app_transaction_version(loser.app_id)
        txn.set_app_transaction(loser.app_id, 1)
    if loser.domain:
        txn.set_domain_metadata(loser.domain, '{"by": "loser"}')
    if loser.properties or loser.feature:
        conf = dict(txn.metadata.configuration)
        conf.update(loser.properties or {})
        if loser.feature:
            conf[f"delta.feature.{loser.feature}"] = "supported"
        txn.update_metadata(configuration=conf)
    if loser.append:
        txn.write(rows(NEW_IDS, "a"))
    return txn


def _adds(path: Path, data: pa.Table, *, data_change: bool = True) -> list[dict[str, Any]]:
    """Data files written into the table at ``path`` by txnlog (a transaction left uncommitted),
    as ``add`` actions for delta-spark."""
    scratch = Table(path).transaction()
    written = scratch.write_context().write(data, data_change=data_change, store=scratch.location.store)
    return [codec.encode_action(a) for a in written.add_files]


def stage_delta(delta: Delta, loser: Loser, path: Path, setup: Setup) -> Callable[[], Any]:
    """delta-spark's transaction for ``loser``, read and staged; returns its commit."""
    txn = delta.start(str(path))
    now = int(time.time() * 1000)
    predicate = None
    files: list[Any] = []
    if loser.read == "P":
        predicate = delta.condition(str(path), setup.predicate)
        found = txn.filterFiles(delta.seq([predicate]), False)
        files = [found.apply(i) for i in range(found.size())]
    elif loser.read == "*":
        txn.readWholeTable()
        found = txn.filterFiles()
        files = [found.apply(i) for i in range(found.size())]
    actions: list[Any] = []
    if loser.remove:
        actions += [f.removeWithTimestamp(now, True) for f in files]
    if loser.optimize:  # as delta-spark's OPTIMIZE: it records the files it compacts, not a predicate
        scan = txn.snapshot().filesForScan(delta.seq([delta.condition(str(path), setup.predicate)]), False).files()
        compacted = [scan.apply(i) for i in range(scan.size())]
        txn.trackFilesRead(scan)
        actions += [f.removeWithTimestamp(now, False) for f in compacted]
        actions += [delta.action(a) for a in _adds(path, rows(range(5), "a"), data_change=False)]
    if loser.app_id:
        txn.txnVersion(loser.app_id)
        actions.append(delta.action({"txn": {"appId": loser.app_id, "version": 1, "lastUpdated": now}}))
    if loser.domain:
        actions.append(delta.action({"domainMetadata": {"domain": loser.domain, "configuration": '{"by": "loser"}', "removed": False}}))
    snapshot = Table(path).snapshot()
    if loser.properties:
        metadata = codec.encode_action(snapshot.metadata)
        metadata["metaData"]["configuration"] = {**metadata["metaData"]["configuration"], **loser.properties}
        txn.updateMetadata(delta.action(metadata), False)
    if loser.feature:
        protocol = snapshot.protocol
        writer = sorted({*(protocol.writer_features or ("appendOnly", "invariants")), loser.feature})
        reader = sorted({*(protocol.reader_features or ()), loser.feature})
        txn.updateProtocol(delta.action({"protocol": {"minReaderVersion": 3, "minWriterVersion": 7,
                                                      "readerFeatures": reader, "writerFeatures": writer}}))
    if loser.append:
        actions += [delta.action(a) for a in _adds(path, rows(NEW_IDS, "a"))]
    op = delta.operation(loser.operation, predicate)
    return lambda: txn.commit(delta.seq(actions), op)


# -- winners --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Winner:
    """A commit that wins: ``run(path, spark, setup)`` makes it on the table at ``path``."""

    name: str
    run: Callable[[Path, Any, Setup], Any]


def _set(path: Path, **changes: str) -> None:
    table = Table(path)
    with table.transaction("SET TBLPROPERTIES") as txn:
        txn.update_metadata(configuration={**txn.metadata.configuration, **changes})


def _sql_set(path: Path, spark: Any, **changes: str) -> None:
    props = ", ".join(f"'{k}' = '{v}'" for k, v in changes.items())
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ({props})")


def _nonblind_append(path: Path, data: pa.Table) -> None:
    with Table(path).transaction("MERGE") as txn:
        txn.filter_files("id < 0")
        txn.write(data)


def _domain(path: Path) -> None:
    with Table(path).transaction("WRITE") as txn:
        txn.set_domain_metadata("user.d", '{"by": "winner"}')


def _app(path: Path) -> None:
    Table(path).append(rows([40], "b"), app_id="app-a", app_version=1)


def _delete(path: Path, setup: Setup, predicate: str) -> None:
    Table(path).delete(predicate)


def _compact(path: Path, setup: Setup) -> None:
    """Compaction of the files ``setup.predicate`` selects (OPTIMIZE's own predicate names
    partition columns only, and some setups are not partitioned)."""
    txn = Table(path).transaction("OPTIMIZE")
    stage_optimize(txn, OptimizeParameters(min_files=1), files=txn.snapshot.files(setup.predicate))
    txn.commit()


FILE_WINNERS = [
    Winner("blind append in P", lambda path, spark, s: Table(path).append(rows([3], "a"))),
    Winner("append in P (not blind)", lambda path, spark, s: _nonblind_append(path, rows([3], "a"))),
    Winner("append outside P (not blind)", lambda path, spark, s: _nonblind_append(path, rows([20], "b"))),
    Winner("delete of A", lambda path, spark, s: _delete(path, s, s.predicate)),
    Winner("delete of B", lambda path, spark, s: _delete(path, s, "id >= 10")),
    Winner("compaction of A", lambda path, spark, s: _compact(path, s)),
    Winner("delta-spark INSERT in P", lambda path, spark, s: spark.sql(f"INSERT INTO delta.`{path}` VALUES (3, 'a', 0)")),
    Winner("delta-spark DELETE of A", lambda path, spark, s: spark.sql(f"DELETE FROM delta.`{path}` WHERE {s.predicate}")),
]

TABLE_WINNERS = [
    Winner("txnlog: enable deletion vectors", lambda path, spark, s: _set(path, **{"delta.enableDeletionVectors": "true"})),
    Winner("delta-spark: enable deletion vectors", lambda path, spark, s: _sql_set(path, spark, **{"delta.enableDeletionVectors": "true"})),
    Winner("txnlog: enable row tracking", lambda path, spark, s: _set(path, **{"delta.enableRowTracking": "true"})),
    Winner("delta-spark: enable row tracking", lambda path, spark, s: _sql_set(path, spark, **{"delta.enableRowTracking": "true"})),
    Winner("txnlog: enable in-commit timestamps", lambda path, spark, s: _set(path, **{"delta.enableInCommitTimestamps": "true"})),
    Winner("delta-spark: enable in-commit timestamps",
           lambda path, spark, s: _sql_set(path, spark, **{"delta.enableInCommitTimestamps": "true"})),
    Winner("txnlog: column mapping by name", lambda path, spark, s: _set(path, **{"delta.columnMapping.mode": "name"})),
    Winner("delta-spark: column mapping by name", lambda path, spark, s: _sql_set(
        path, spark, **{"delta.columnMapping.mode": "name", "delta.minReaderVersion": "2", "delta.minWriterVersion": "5"})),
    Winner("txnlog: enable change data feed", lambda path, spark, s: _set(path, **{"delta.enableChangeDataFeed": "true"})),
    Winner("delta-spark: enable change data feed", lambda path, spark, s: _sql_set(path, spark, **{"delta.enableChangeDataFeed": "true"})),
    Winner("txnlog: other property", lambda path, spark, s: _set(path, **{"delta.logRetentionDuration": "interval 60 days"})),
    Winner("txnlog: feature supported (protocol only)",
           lambda path, spark, s: _set(path, **{"delta.feature.domainMetadata": "supported"})),
    Winner("delta-spark: feature supported (protocol only)",
           lambda path, spark, s: _sql_set(path, spark, **{"delta.feature.domainMetadata": "supported"})),
]

ID_WINNERS = [
    Winner("txnlog: app id A", lambda path, spark, s: _app(path)),
    Winner("txnlog: domain D", lambda path, spark, s: _domain(path)),
]

IDENTITY_WINNERS = [
    Winner("delta-spark: INSERT generating ids", lambda path, spark, s: spark.sql(f"INSERT INTO delta.`{path}` (p, v) VALUES ('b', 0)")),
    Winner("delta-spark: INSERT of explicit ids", lambda path, spark, s: spark.sql(f"INSERT INTO delta.`{path}` VALUES (30, 'b', 0)")),
    Winner("delta-spark: SYNC IDENTITY", lambda path, spark, s: spark.sql(f"ALTER TABLE delta.`{path}` ALTER COLUMN id SYNC IDENTITY")),
]


@dataclass(frozen=True)
class Group:
    """Losers that all race one winner on one kind of table."""

    setup: Setup
    winners: Sequence[Winner]
    losers: Sequence[Loser]


PLAIN = Setup("unpartitioned")
PARTITIONED = Setup("partitioned", partitioned=True)
WS = Setup("unpartitioned, WriteSerializable", properties={"delta.isolationLevel": "WriteSerializable"})
DOMAINS = Setup("unpartitioned, domainMetadata", properties={"delta.feature.domainMetadata": "supported"})
IDENTITY = Setup("identity column", identity=True)


def _winners(*names: str) -> list[Winner]:
    return [w for w in FILE_WINNERS if w.name in names]


GROUPS = [
    Group(PLAIN, FILE_WINNERS, [BLIND, READ_WRITE, READ_ALL, OPTIMIZE, EMPTY]),
    Group(PARTITIONED, _winners("blind append in P", "append outside P (not blind)", "delete of B", "compaction of A",
                                "delta-spark INSERT in P"), [READ_WRITE, READ_ALL, EMPTY]),
    Group(WS, _winners("blind append in P", "append in P (not blind)", "delta-spark INSERT in P"), [READ_WRITE, READ_ALL, EMPTY, CONSTRAINT]),
    Group(PLAIN, TABLE_WINNERS, [BLIND, READ_WRITE, SET_PROPERTY, PROTOCOL]),
    Group(DOMAINS, ID_WINNERS, [APP, OTHER_APP, DOMAIN, OTHER_DOMAIN]),
    Group(IDENTITY, IDENTITY_WINNERS, [BLIND, READ_WRITE, SET_PROPERTY]),
]


@dataclass(frozen=True)
class Cell:
    setup: str
    winner: str
    loser: str
    delta: str
    txnlog: str


def _staged_txnlog(loser: Loser, path: Path, setup: Setup) -> Callable[[], str]:
    """txnlog's transaction for ``loser``, staged; returns its commit, giving the outcome."""
    try:
        txn = stage_txnlog(loser, path, setup)
    except TxnLogError as e:
        refusal = f"refused:{type(e).__name__}"
        return lambda: refusal
    return lambda: txnlog_outcome(txn.commit)


def run_group(group: Group, winner: Winner, root: Path, spark: Any, delta: Delta, pool: ThreadPoolExecutor) -> Iterator[Cell]:
    """Every loser of ``group`` against ``winner``, on both engines. delta-spark's transactions
    are staged and committed from ``pool``'s threads, each on its own copy of the table."""
    origin = root / "origin"
    group.setup.create(origin, spark)
    copies = []
    ours, theirs = [], []
    for i, loser in enumerate(group.losers):
        mine, other = root / f"txnlog-{i}", root / f"delta-{i}"
        shutil.copytree(origin, mine)
        shutil.copytree(origin, other)
        copies += [mine, other]
        ours.append(_staged_txnlog(loser, mine, group.setup))
        theirs.append(pool.submit(stage_delta, delta, loser, other, group.setup))
    commits = [future.result() for future in theirs]
    winner.run(origin, spark, group.setup)
    for copy in copies:
        sync(origin, copy)
    outcomes = list(pool.map(delta_outcome, commits))
    for loser, commit, outcome in zip(group.losers, ours, outcomes, strict=True):
        yield Cell(group.setup.name, winner.name, loser.name, outcome, commit())


def run_all(root: Path, spark: Any, groups: Sequence[Group] = GROUPS) -> Iterator[Cell]:
    delta = Delta(spark)
    counter = itertools.count()
    try:
        with ThreadPoolExecutor(4) as pool:
            for group in groups:
                for winner in group.winners:
                    yield from run_group(group, winner, root / f"g{next(counter)}", spark, delta, pool)
    finally:
        delta.clear_cache()


def doc_row(cell: Cell, note: str = "") -> str:
    return f"| {cell.setup} | {cell.winner} | {cell.loser} | {cell.delta} | {cell.txnlog} | {note} |"


def main() -> None:
    """Print the matrix's rows, as docs/concurrency.md has them (notes left empty)."""
    import sys
    import tempfile

    from pyspark.sql import SparkSession

    from txnlog.spark import with_delta

    spark = with_delta(SparkSession.builder.master("local[2]")).getOrCreate()  # jars from $TXNLOG_DELTA_JARS_DIR
    with tempfile.TemporaryDirectory() as tmp:
        for cell in run_all(Path(tmp), spark):
            print(doc_row(cell))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
