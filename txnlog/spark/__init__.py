"""txnlog on Spark: executors write and read the data files, txnlog owns the log.

- :func:`write` / :func:`write_files`: a DataFrame to a table, Parquet written by the executors;
- :func:`read` / :func:`read_files`: a snapshot's live files as a DataFrame;
- :func:`transaction`: a context manager for PySpark jobs (read, write, delete, update,
  overwrite in one atomic commit).

Works with a classic SparkSession and over Spark Connect (public DataFrame APIs only).
Importing this module does not import PySpark; calling its functions needs it.
"""

from txnlog.spark._common import SparkJobError
from txnlog.spark.reader import read, read_files
from txnlog.spark.transaction import SparkTransaction, transaction
from txnlog.spark.writer import write, write_files

__all__ = ["SparkJobError", "SparkTransaction", "read", "read_files", "transaction", "write", "write_files"]

# MERGE, OPTIMIZE and the streaming sink (issue 8, second half).
from txnlog.spark.merge import merge  # noqa: E402
from txnlog.spark.optimize import OptimizeResult, optimize  # noqa: E402
from txnlog.spark.sink import foreach_batch_sink  # noqa: E402

__all__ += ["OptimizeResult", "foreach_batch_sink", "merge", "optimize"]
