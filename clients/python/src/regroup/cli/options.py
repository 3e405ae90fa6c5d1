"""The options every command takes: where the coordinator is, how to connect, --json.

They sit on each command rather than on `regroup` itself, so that they may come anywhere
on the line (`regroup groups describe g1 --json`), as kafka-consumer-groups users type them.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from regroup.cli.connection import DEFAULT_ADDRESS, Connection, Target
from regroup.cli.exits import ERROR, CliError
from regroup.client.tls import TlsConfig

#: The bearer token, from the environment only: a token on the command line would show in `ps`.
TOKEN_ENV = "REGROUP_TOKEN"


@dataclass(frozen=True)
class Session:
    """What a command was asked for beyond its own arguments."""

    target: Target
    as_json: bool

    def connect(self) -> Connection:
        return Connection(self.target)


def _file(path: str | None) -> Path | None:
    return None if path is None else Path(path)


def _target(
    bootstrap: str,
    tls: bool,
    tls_ca: str | None,
    tls_cert: str | None,
    tls_key: str | None,
    tls_server_name: str | None,
    token_file: str | None,
    request_timeout: float,
) -> Target:
    if (tls_cert is None) != (tls_key is None):
        raise click.UsageError("--tls-cert and --tls-key go together (a client certificate needs its key)")
    config = None
    if tls or tls_ca or tls_cert or tls_server_name:
        config = TlsConfig(
            ca=_file(tls_ca), cert=_file(tls_cert), key=_file(tls_key), server_name_override=tls_server_name
        )
    token = os.environ.get(TOKEN_ENV) or None
    if token_file is not None:
        token = Path(token_file).read_text().strip()
    if token is not None and (not token or "\n" in token):
        raise CliError(ERROR, "the token must be one line, not empty")
    return Target(address=bootstrap, tls=config, token=token, timeout=request_timeout)


_PATH = click.Path(exists=True, dir_okay=False)

_OPTIONS = [
    click.option(
        "--bootstrap",
        "-b",
        envvar="REGROUP_ADDRESS",
        show_envvar=True,
        default=DEFAULT_ADDRESS,
        show_default=True,
        metavar="HOST:PORT",
        help="Any replica of the coordinator; group calls follow the replica that owns the group.",
    ),
    click.option(
        "--tls",
        is_flag=True,
        envvar="REGROUP_CLIENT_TLS",
        show_envvar=True,
        help="Speak TLS, verifying the server with the system's roots (implied by the --tls-* options).",
    ),
    click.option(
        "--tls-ca",
        type=_PATH,
        envvar="REGROUP_CLIENT_TLS_CA",
        show_envvar=True,
        help="PEM CA certificates that verify the server's certificate.",
    ),
    click.option(
        "--tls-cert",
        type=_PATH,
        envvar="REGROUP_CLIENT_TLS_CERT",
        show_envvar=True,
        help="PEM client certificate, for a server that requires one (mTLS); with --tls-key.",
    ),
    click.option(
        "--tls-key",
        type=_PATH,
        envvar="REGROUP_CLIENT_TLS_KEY",
        show_envvar=True,
        help="Its PEM private key.",
    ),
    click.option(
        "--tls-server-name",
        metavar="NAME",
        help="Check the server's certificate against NAME instead of the host dialled.",
    ),
    click.option(
        "--token-file",
        type=_PATH,
        envvar="REGROUP_TOKEN_FILE",
        show_envvar=True,
        help=f"A file holding the bearer token to send (or set {TOKEN_ENV}; never on the command line).",
    ),
    click.option(
        "--request-timeout",
        type=click.FloatRange(min=0.001),
        default=10.0,
        show_default=True,
        metavar="SECONDS",
        help="How long each call may take, following the group's coordinator included.",
    ),
    click.option(
        "--json", "as_json", is_flag=True, help="Print JSON (stable keys, docs/cli.md) instead of text."
    ),
]


def common(command: Callable[..., Any]) -> Callable[..., Any]:
    """Adds the connection options and --json; the command gets them as `session`."""

    @functools.wraps(command)
    def run(**kwargs: Any) -> Any:
        target = _target(
            kwargs.pop("bootstrap"),
            kwargs.pop("tls"),
            kwargs.pop("tls_ca"),
            kwargs.pop("tls_cert"),
            kwargs.pop("tls_key"),
            kwargs.pop("tls_server_name"),
            kwargs.pop("token_file"),
            kwargs.pop("request_timeout"),
        )
        return command(Session(target, kwargs.pop("as_json")), **kwargs)

    own: list[Any] = list(getattr(run, "__click_params__", []))
    for option in reversed(_OPTIONS):
        run = option(run)
    # click lists the parameters in the reverse order of this list: the command's own
    # arguments and options first in --help, these common ones after them.
    params: list[Any] = run.__click_params__  # type: ignore[attr-defined]
    params[:] = [p for p in params if p not in own] + own
    return run
