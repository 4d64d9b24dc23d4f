"""The moto S3 server fixtures of the storage tests, for the export on S3."""

from tests.storage.conftest import moto_s3, s3_bucket  # noqa: F401
