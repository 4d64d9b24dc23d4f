"""The streaming query of test_streaming_source's crash test, in a child process with its own
SparkSession: a txnlog table streamed (one file per batch) into another txnlog table. A watcher
thread SIGKILLs the process as soon as the sink has committed batch ``KILL_AFTER``, wherever
Spark is then (between the sink's commit and its own checkpoint, or planning the next batch).

    python tests/spark/stream_source_child.py SOURCE SINK CHECKPOINT KILL_AFTER
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import txnlog.spark as ts  # noqa: E402
from spark_jobs._common import local_session  # noqa: E402
from txnlog import Table  # noqa: E402
from txnlog.errors import TxnLogError  # noqa: E402


def main() -> None:
    source, sink, checkpoint, kill_after = sys.argv[1:5]

    def watch() -> None:
        while True:
            try:
                done = max((e.version for e in Table(sink).history() if e.commit_info and e.commit_info.operation == "STREAMING UPDATE"), default=-1)
                txns = Table(sink).snapshot()
                applied = [txns.app_transaction_version(a) for a in _app_ids(checkpoint)]
                if done >= 0 and any(v is not None and v >= int(kill_after) for v in applied):
                    print(f"killing after batch {kill_after}", flush=True)
                    os.kill(os.getpid(), signal.SIGKILL)
            except TxnLogError:
                pass
            time.sleep(0.05)

    spark = local_session("txnlog-test-stream-source-child", master="local[1]")
    ts.register(spark)
    threading.Thread(target=watch, daemon=True).start()
    query = (
        spark.readStream.format("txnlog").option("maxFilesPerTrigger", "1").load(source)
        .writeStream.format("txnlog").option("checkpointLocation", checkpoint).trigger(processingTime="0.2 seconds").start(sink)
    )
    query.awaitTermination(240)
    print("not killed", flush=True)
    sys.exit(1)


def _app_ids(checkpoint: str) -> list[str]:
    import json

    try:
        with open(os.path.join(checkpoint, "metadata")) as f:
            return [json.loads(f.readline())["id"]]
    except OSError:
        return []


if __name__ == "__main__":
    main()
