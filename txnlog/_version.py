"""The package version, in one place (``txnlog.__version__`` and ``commitInfo.engineInfo``)."""

__version__ = "0.1.0"
