"""Command line: `python -m regroup.server [serve|migrate|cluster] [--flags]`.

`cluster` runs several replicas on one Postgres, to try failover by hand (server/cluster.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import signal
import sys
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import structlog

from .app import RegroupServer, close_embedded, find_migrations, resolve_database_url, run_migrations
from .cluster import DEFAULT_REPLICAS, run_cluster
from .config import (
    ConfigError,
    Settings,
    add_arguments,
    flag_environment,
    named_as_given,
    settings_from_environment,
)
from .listeners import ListenError
from .logs import configure_logging
from .migrate import MigrationError
from .store import StoreUnavailable

T = TypeVar("T")


async def _serve(settings: Settings) -> None:
    server = RegroupServer(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    await server.start()
    # Most of what is alive now (modules, gRPC and Postgres machinery) lives as
    # long as the process: moving it out of the collector's reach shortens every
    # full collection, which pauses the event loop (in the stall benchmark from
    # about 30 ms to 5 ms). Frozen objects are still freed when their last
    # reference goes (the groups loaded at start, as they change); only one that
    # later ends in a reference cycle (a pool connection replaced by a new one)
    # is never reclaimed, which is bounded by what is alive now, once. Garbage
    # is collected first, so nothing is frozen that should have been freed.
    gc.collect()
    gc.freeze()
    try:
        await stop.wait()
    finally:
        await stop_within_bound(server, settings.stop_bound_s())


#: What the process's exit may take after the stop: the stop itself gets the rest of the bound.
EXIT_SLACK_S = 1.0


async def stop_within_bound(
    server: RegroupServer, bound_s: float, exit_now: Callable[[float], None] | None = None
) -> threading.Timer:
    """Stops the server, and makes sure the process ends within `bound_s` of now
    (Settings.stop_bound_s). Each part of the stop has a bound of its own; this holds
    whatever else is slow (a worker process, an exporter): the stop is abandoned
    EXIT_SLACK_S before the bound, and a watchdog ends the process at the bound if its
    exit is still waiting then (for a thread, or a child process)."""
    watchdog = threading.Timer(bound_s, exit_now or _exit_now, args=(bound_s,))
    watchdog.daemon = True
    watchdog.start()
    try:
        async with asyncio.timeout(max(bound_s - EXIT_SLACK_S, 0.0)):
            await server.stop()
    except TimeoutError:
        structlog.get_logger("regroup").error("server_stop_timed_out", bound_s=bound_s)
    return watchdog


def _exit_now(bound_s: float) -> None:
    structlog.get_logger("regroup").error("server_exit_timed_out", bound_s=bound_s)
    os._exit(1)


async def _migrate(settings: Settings) -> None:
    migrations = find_migrations(settings)
    dsn, embedded = await resolve_database_url(settings)
    try:
        applied = await run_migrations(dsn, migrations, settings.shards)
    finally:
        await close_embedded(embedded)
    structlog.get_logger("regroup").info("migrations_applied", migrations=applied)


def _run(coro: Coroutine[Any, Any, T]) -> T:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is optional off Linux
        return asyncio.run(coro)
    return uvloop.run(coro)


def parser() -> argparse.ArgumentParser:
    """The command line; every setting's flag says its variable and default (config.OPTIONS)."""
    parser = argparse.ArgumentParser(prog="regroup-server", description="regroup group coordinator")
    parser.add_argument(
        "command",
        nargs="?",
        choices=["serve", "migrate", "cluster"],
        default="serve",
        help="serve (the default), migrate (apply the migrations and exit), or cluster (replicas "
        "on one Postgres, to try failover by hand)",
    )
    parser.add_argument(
        "--replicas",
        type=int,
        default=DEFAULT_REPLICAS,
        help="cluster: how many replicas, on consecutive ports from --listen "
        f"(no environment variable, default: {DEFAULT_REPLICAS})",
    )
    add_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        settings = settings_from_environment(args)
    except ConfigError as e:
        print(f"regroup: configuration error: {e}", file=sys.stderr)
        return 2
    if args.replicas < 1:
        print("regroup: --replicas must be at least 1", file=sys.stderr)
        return 2
    configure_logging(settings.log_level)
    try:
        if args.command == "cluster":
            return _run(run_cluster(settings, flag_environment(args), args.replicas))
        _run(_migrate(settings) if args.command == "migrate" else _serve(settings))
    except ConfigError as e:
        # A TLS file that loaded when the settings were read but not when the server started.
        print(f"regroup: configuration error: {named_as_given(str(e), os.environ, args)}", file=sys.stderr)
        return 2
    except (StoreUnavailable, ListenError) as e:
        # A port in use or a database out of reach: one line that says which (the setting as
        # the user gave it: --listen or REGROUP_LISTEN), no traceback.
        print(f"regroup: {named_as_given(str(e), os.environ, args)}", file=sys.stderr)
        return 1
    except MigrationError as e:
        # Missing, misnamed or edited migrations: an install or release problem to fix, not a crash.
        print(f"regroup: migrations: {e}", file=sys.stderr)
        return 1
    return 0
