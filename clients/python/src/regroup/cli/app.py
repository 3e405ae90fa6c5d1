"""`regroup`: the command's root, and how its outcomes become exit codes."""

from __future__ import annotations

import os
import sys

import click

from regroup.cli import events, watch  # noqa: F401  (they add `history` and `watch` to `groups`)
from regroup.cli.connectors import connectors
from regroup.cli.exits import DESCRIPTIONS, ERROR, OK, CliError
from regroup.cli.groups import groups
from regroup.cli.members import members
from regroup.cli.offsets import offsets
from regroup.cli.output import warn
from regroup.cli.topics import topics

EXIT_CODES = "\b\nExit codes:\n" + "\n".join(f"  {code}  {text}" for code, text in DESCRIPTIONS.items())


@click.group(
    epilog=EXIT_CODES,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(package_name="regroup-client", prog_name="regroup")
def cli() -> None:
    """Operate a regroup coordinator: groups, topics, offsets, connectors and members.

    Every command takes --bootstrap HOST:PORT (or REGROUP_ADDRESS; default
    127.0.0.1:50051, where `make run` serves), the TLS and token options, and --json.
    `regroup COMMAND --help` shows them with examples; docs/cli.md has them all.

    \b
    Examples:
      regroup groups list
      regroup groups describe orders-consumers
      regroup groups watch orders-consumers
      regroup offsets reset orders-consumers --to-offset 0 --topic orders --execute
      regroup members drain orders-consumers --instance-id worker-3 --wait
    """


for command in (groups, topics, offsets, connectors, members):
    command.epilog = EXIT_CODES
    cli.add_command(command)
    for sub in getattr(command, "commands", {}).values():
        sub.epilog = EXIT_CODES


def run(argv: list[str]) -> int:
    """Runs the command line `argv`; returns the exit code (exits.py)."""
    try:
        result = cli.main(args=argv, prog_name="regroup", standalone_mode=False)
    except click.ClickException as err:
        # Usage errors too: click's own code for them is 2, which here means "refused".
        err.show()
        return ERROR
    except click.Abort:
        warn("interrupted")
        return 130
    except CliError as err:
        warn(err.message)
        return err.code
    except BrokenPipeError:
        # The reader stopped reading (`regroup groups watch g --json | head -1`): its choice, not
        # an error of ours. Python would complain again flushing stdout at exit: point it nowhere.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return OK
    return result if isinstance(result, int) else OK
