"""Writing data files: Parquet in the table's layout, with per-file statistics."""

from txnlog.write.parquet import write_data_files
from txnlog.write.stats import StatsCollector, file_stats

__all__ = ["StatsCollector", "file_stats", "write_data_files"]
