"""Writing data files and their per-file statistics."""

from txnlog.write.parquet import write_data_files
from txnlog.write.stats import file_stats, stats_columns

__all__ = ["file_stats", "stats_columns", "write_data_files"]
