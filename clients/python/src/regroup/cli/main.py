"""The console script's entry point: checks for the cli extra before importing it."""

from __future__ import annotations

import sys

from regroup.cli.exits import ERROR

HINT = "regroup: the command needs the cli extra: pip install 'regroup-client[cli]'"


def main(argv: list[str] | None = None) -> None:
    """Runs the command and exits with its code (docs/cli.md, "Exit codes")."""
    try:
        # Only here, not at module level: the base client installs neither of them.
        import click  # noqa: F401
        import rich  # noqa: F401
    except ImportError:
        print(HINT, file=sys.stderr)
        sys.exit(ERROR)
    from regroup.cli.app import run

    sys.exit(run(sys.argv[1:] if argv is None else argv))
