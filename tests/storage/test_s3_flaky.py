"""Concurrent writers on S3 through a flaky network: nothing lost, nothing committed twice.

Each writer process appends its own rows with an idempotent app transaction (appId = writer,
version = sequence number) through a TCP proxy that drops connections before requests reach
moto's server, in the middle of request bodies, and after the server processed them (the
ambiguous outcome), and delays others. A writer retries an append that raised until it is
acknowledged; the app transaction makes a retry of an append that did land a no-op.

Afterwards, read directly (not through the proxy): every acknowledged append is in the table
exactly once at the version it was acknowledged with, each writer's rows appear once, and
delta-rs reads the same files and rows as txnlog.
"""

from __future__ import annotations

import traceback
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from tests.storage.flaky_proxy import (
    DROP_AFTER,
    DROP_BEFORE,
    DROP_MID_REQUEST,
    FaultPlan,
    FlakyProxy,
)
from tests.txn.test_concurrency_processes import run_together
from txnlog import Table
from txnlog.errors import TxnLogError

SCHEMA = pa.schema([("writer", pa.int64()), ("seq", pa.int64())])


def _append_with_retries(job: dict[str, Any], barrier: Any) -> dict[str, Any]:
    table = Table(job["uri"], storage_options=job["options"])
    writer = job["writer"]
    acked: list[tuple[int, int]] = []
    errors: list[str] = []
    raw: list[str] = []
    barrier.wait(120)
    for seq in range(1, job["appends"] + 1):
        data = pa.table({"writer": [writer], "seq": [seq]}, schema=SCHEMA)
        for _attempt in range(40):
            try:
                result = table.append(data, app_id=f"writer-{writer}", app_version=seq)
            except TxnLogError as e:
                errors.append(type(e).__name__)
                continue
            except Exception:  # anything else reaching the caller is a bug
                raw.append(traceback.format_exc())
                continue
            # None: an earlier attempt that reported an error did land.
            acked.append((seq, -1 if result is None else int(result)))
            break
        else:
            return {"acked": acked, "errors": errors, "raw": raw, "gave_up": seq}
    return {"acked": acked, "errors": errors, "raw": raw, "gave_up": None}


# With the SDK's own retries (what users run), and without them, so that every fault reaches
# txnlog's commit path and the writers' retries. (botocore's retries only: s3fs's own retry count
# is a class attribute, not an option; a "retries" key was silently dropped, and is now refused.)
SDK_RETRIES = {
    "sdk-retries": {},
    "no-sdk-retries": {"config_kwargs": {"retries": {"max_attempts": 1}}},
}


@pytest.mark.timeout(600)
# Without the SDK's retries every fault reaches txnlog's commit path: the default suite runs that.
@pytest.mark.parametrize("sdk", [pytest.param("sdk-retries", marks=pytest.mark.soak), "no-sdk-retries"])
def test_concurrent_writers_through_a_flaky_network_lose_nothing_and_never_commit_twice(s3_bucket, moto_s3, sdk):
    uri = f"{s3_bucket}/flaky/events"
    direct = dict(moto_s3)
    Table.create(uri, SCHEMA, storage_options=direct)
    upstream_port = int(direct["AWS_ENDPOINT_URL"].rsplit(":", 1)[1])
    # Fault the object requests (not bucket-level calls), about one request in four.
    # Which requests the dice hit depends on how the writers' requests interleave, so the case
    # that matters most (a commit PUT that landed but whose writer never heard back) is scripted.
    def commit_put(method: str, target: str) -> bool:
        return method == "PUT" and "/_delta_log/" in target and target.endswith(".json")

    def data_put(method: str, target: str) -> bool:
        return method == "PUT" and target.endswith(".parquet")

    plan = FaultPlan(drop_before=0.06, drop_mid_request=0.06, drop_after=0.10, delay=0.05, seed=7,
                     matches=lambda method, target: "/flaky/" in target,
                     scripted=[(commit_put, DROP_AFTER), (data_put, DROP_MID_REQUEST), (commit_put, DROP_BEFORE)])
    writers, appends = 3, 8
    with FlakyProxy(upstream_port, plan) as proxy:
        flaky = {**direct, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{proxy.port}", **SDK_RETRIES[sdk]}
        jobs = [{"uri": uri, "options": flaky, "writer": w, "appends": appends} for w in range(writers)]
        reports = run_together(_append_with_retries, jobs, timeout_s=480)
        counts = dict(proxy.counts)
        requests = list(proxy.requests)

    # The network really misbehaved, in every way, while commits were being made.
    for fault in (DROP_BEFORE, DROP_MID_REQUEST, DROP_AFTER):
        assert counts.get(fault, 0) > 0, counts
    # ... including commits that landed while their writer never heard back.
    assert any(m == "PUT" and "_delta_log/" in t and t.endswith(".json") and f == DROP_AFTER for m, t, f in requests)
    for report in reports:
        assert not report["raw"], report["raw"][0]
        assert report["gave_up"] is None, report

    snapshot = Table(uri, storage_options=direct).snapshot()
    paths = [u.removeprefix("s3://") for u in snapshot.file_uris()]
    rows = ds.dataset(paths, format="parquet", filesystem=_s3fs(direct)).to_table()
    seen = sorted(zip(rows.column("writer").to_pylist(), rows.column("seq").to_pylist()))
    expected = sorted((w, s) for w in range(writers) for s in range(1, appends + 1))
    assert seen == expected  # every append exactly once: none lost, none doubled

    # Each acknowledged version holds exactly that writer's append.
    for w, report in enumerate(reports):
        assert [seq for seq, _ in report["acked"]] == list(range(1, appends + 1))
        assert snapshot.app_transaction_version(f"writer-{w}") == appends
        for seq, version in report["acked"]:
            if version < 0:
                continue
            at = Table(uri, storage_options=direct).snapshot(version)
            assert at.app_transaction_version(f"writer-{w}") == seq
            if version > 0:
                before = Table(uri, storage_options=direct).snapshot(version - 1)
                assert (before.app_transaction_version(f"writer-{w}") or 0) == seq - 1
    assert snapshot.version == writers * appends  # one commit per append, no empty or double ones

    deltalake = pytest.importorskip("deltalake")
    dt = deltalake.DeltaTable(uri, storage_options=direct)
    assert dt.version() == snapshot.version
    theirs = dt.to_pyarrow_table()
    assert sorted(zip(theirs.column("writer").to_pylist(), theirs.column("seq").to_pylist())) == expected


def _s3fs(options: dict[str, str]) -> Any:
    import s3fs
    from pyarrow.fs import FSSpecHandler, PyFileSystem

    fs = s3fs.S3FileSystem(
        key=options["AWS_ACCESS_KEY_ID"],
        secret=options["AWS_SECRET_ACCESS_KEY"],
        endpoint_url=options["AWS_ENDPOINT_URL"],
        client_kwargs={"region_name": options["AWS_REGION"]},
    )
    return PyFileSystem(FSSpecHandler(fs))
