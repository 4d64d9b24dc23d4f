"""``python -m txnlog``: the txnlog command."""

from txnlog.cli import main

main()
