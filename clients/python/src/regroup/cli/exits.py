"""Exit codes that scripts can rely on, and the error that carries one to the exit.

No click or rich here: main.py needs ERROR before it knows whether they are installed.
"""

from __future__ import annotations

#: Everything asked was done.
OK = 0
#: A usage error (bad options or arguments), or any error not listed below.
ERROR = 1
#: The coordinator refused an item (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, TOPIC_ALREADY_EXISTS,
#: UNKNOWN_MEMBER_ID, ...): the others of the same command were still done, and printed.
REFUSED = 2
#: The coordinator could not be reached (nothing listens, TLS refused, DNS failed).
UNREACHABLE = 3
#: A call's deadline passed (--request-timeout), or `members drain --wait` ran out of --timeout.
TIMEOUT = 4
#: The coordinator does not implement the call (a server older than this command).
UNSUPPORTED = 5
#: The coordinator refused the bearer token (REGROUP_TOKEN, --token-file): UNAUTHENTICATED.
#: Not "unreachable" nor "refused": fixing it means fixing the token, not the call.
BAD_TOKEN = 6

#: For the help and the docs, in order.
DESCRIPTIONS = {
    OK: "success",
    ERROR: "usage error, or another error",
    REFUSED: "the coordinator refused an item (e.g. GROUP_ID_NOT_FOUND); the rest was done",
    UNREACHABLE: "cannot reach the coordinator",
    TIMEOUT: "timed out (a call's --request-timeout, or drain --wait's --timeout)",
    UNSUPPORTED: "the coordinator does not support the call (an older server)",
    BAD_TOKEN: "the coordinator did not accept the token (REGROUP_TOKEN, --token-file)",
}


class CliError(Exception):
    """Ends the command with `message` on stderr and exit code `code`."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
