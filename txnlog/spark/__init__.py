"""txnlog on Spark: executors write and read the data files, txnlog owns the log.

- :func:`register`: ``spark.read.format("txnlog")`` and ``df.write.format("txnlog")`` in a
  session (the data source of :mod:`txnlog.spark.datasource`);
- :func:`write` / :func:`write_files`: a DataFrame to a table, Parquet written by the executors;
- :func:`read` / :func:`read_files`: a snapshot's live files as a DataFrame;
- :func:`read_changes`: the change data feed between versions or timestamps;
- :func:`files`: the live file list reconstructed on the executors, for tables whose list
  does not fit the driver;
- :func:`transaction`: a context manager for PySpark jobs (read, write, delete, update,
  overwrite in one atomic commit);
- :func:`with_delta` / :func:`fetch_delta_jars`: delta-spark in the same session
  (``format("delta")``, Delta SQL), its jars fetched once into a local folder.

Works with a classic SparkSession and over Spark Connect (public DataFrame APIs only).
Needs the `spark` extra (PySpark 4, pyroaring); executors need only txnlog, pyarrow and fsspec.
"""

from txnlog.spark.changes import read_changes
from txnlog.spark.common import SparkJobError, SparkWorkerPythonError
from txnlog.spark.datasource import register
from txnlog.spark.delta import delta_jars, fetch_delta_jars, with_delta
from txnlog.spark.files import files
from txnlog.spark.merge import merge
from txnlog.spark.optimize import OptimizeResult, optimize
from txnlog.spark.reader import read, read_files
from txnlog.spark.sink import foreach_batch_sink
from txnlog.spark.transaction import SparkTransaction, transaction
from txnlog.spark.writer import write, write_files

__all__ = [
    "OptimizeResult",
    "SparkJobError",
    "SparkTransaction",
    "SparkWorkerPythonError",
    "delta_jars",
    "fetch_delta_jars",
    "files",
    "foreach_batch_sink",
    "merge",
    "optimize",
    "read",
    "read_changes",
    "read_files",
    "register",
    "transaction",
    "with_delta",
    "write",
    "write_files",
]
