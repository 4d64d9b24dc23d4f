"""The streaming query of test_sink, run in a child process with its own SparkSession: it
ingests a folder of files through the foreachBatch sink and SIGKILLs itself right after the
sink committed batch ``--kill-after`` (before Spark records the batch as done), as a crash at
the worst moment does.

    python tests/spark/stream_child.py TABLE SOURCE_DIR CHECKPOINT APP_ID KILL_AFTER
"""

from __future__ import annotations

import os
import signal
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from spark_jobs import ingest_stream  # noqa: E402
from spark_jobs._common import local_session  # noqa: E402


def main() -> None:
    table, source_dir, checkpoint, app_id, kill_after = sys.argv[1:6]
    args = ingest_stream.parse_args(
        ["--table", table, "--source-dir", source_dir, "--checkpoint", checkpoint, "--app-id", app_id, "--trigger-seconds", "0.5"]
    )
    spark = local_session("txnlog-test-stream-child", master="local[1]")
    sink = ingest_stream.make_sink(args)

    def killing_sink(df, batch_id):
        sink(df, batch_id)
        print(f"committed batch {batch_id}", flush=True)
        if batch_id == int(kill_after):
            os.kill(os.getpid(), signal.SIGKILL)

    query = ingest_stream.start(spark, args, killing_sink)
    query.awaitTermination(240)
    print("not killed", flush=True)
    sys.exit(1)


if __name__ == "__main__":
    main()
