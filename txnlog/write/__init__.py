"""Writing data files: Parquet in the table's layout, with per-file statistics.

This ``__all__`` is what engines may use; the modules behind it are the core's own.
"""

from txnlog.write.context import WriteContext, WrittenFiles
from txnlog.write.parquet import write_data_files
from txnlog.write.stats import StatsCollector, file_stats

__all__ = ["StatsCollector", "WriteContext", "WrittenFiles", "file_stats", "write_data_files"]
