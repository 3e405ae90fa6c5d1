"""Runs a command after setting up what `preexec_fn` would: without forking the caller.

`subprocess` runs `preexec_fn` in a forked copy of the caller (a fork, not a vfork), and a
process whose gRPC threads run must not fork (server/embedded.py says why). So a test or a
benchmark spawns this file instead, by vfork and exec, and it sets up the child's side
before it execs the command:

    python tests/support/child.py [--die-with-parent] [--controlling-terminal] -- CMD ARGS...
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import os
import signal
import sys
import termios
from collections.abc import Sequence

PR_SET_PDEATHSIG = 1
PATH = os.path.abspath(__file__)


def command(
    args: Sequence[str], *, die_with_parent: bool = False, controlling_terminal: bool = False
) -> list[str]:
    """`args` run through this file with the options asked for."""
    options = ["--die-with-parent"] * die_with_parent + ["--controlling-terminal"] * controlling_terminal
    return [sys.executable, PATH, *options, "--", *args]


def main(argv: Sequence[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--die-with-parent", action="store_true", help="SIGTERM when the parent exits (Linux)"
    )
    parser.add_argument("--controlling-terminal", action="store_true", help="stdin's terminal becomes ours")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    parent = os.getppid()
    if args.die_with_parent:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the parent died before the signal was asked for
            sys.exit(0)
    if args.controlling_terminal:
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    run = args.command[1:] if args.command[:1] == ["--"] else args.command
    os.execvp(run[0], run)


if __name__ == "__main__":
    main(sys.argv[1:])
