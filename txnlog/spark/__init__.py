from txnlog.spark.files import files as files
