"""The ``txnlog`` command (see docs/cli.md): the click commands in :mod:`txnlog.cli.console`,
what they print in :mod:`txnlog.cli.output`."""

from txnlog.cli.console import (
    EXIT_CONFLICT,
    EXIT_OK,
    EXIT_PROBLEM,
    EXIT_TABLE_NOT_FOUND,
    EXIT_USAGE,
    cli,
    exit_code_of,
    main,
)

__all__ = ["EXIT_CONFLICT", "EXIT_OK", "EXIT_PROBLEM", "EXIT_TABLE_NOT_FOUND", "EXIT_USAGE", "cli", "exit_code_of", "main"]
