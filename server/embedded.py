"""The embedded Postgres used when no DATABASE_URL is given (pgserver from PyPI)."""

from __future__ import annotations

import json
import logging
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

if TYPE_CHECKING:
    from pgserver.postgres_server import PostgresServer

#: pgserver's list of the processes using a pgdata: the last one to exit stops Postgres.
HANDLE_PIDS = ".handle_pids.json"
#: Slack for comparing a process's start with the list's mtime: psutil derives start times
#: from the boot time in whole seconds, so a start can read up to a second off.
_CLOCK_SLACK_S = 1.0


def start_embedded_postgres(data_dir: Path, cleanup_mode: str | None = "stop") -> str:
    """Starts (or reuses) a Postgres under `data_dir`/pgdata; returns its DSN.

    See `embedded_postgres` for the server handle itself.
    """
    return str(embedded_postgres(data_dir, cleanup_mode).get_uri())


def embedded_postgres(data_dir: Path, cleanup_mode: str | None = "stop") -> PostgresServer:
    """Starts (or reuses) a Postgres under `data_dir`/pgdata.

    With the default cleanup mode the server stops when this process exits.
    It listens on a Unix socket only, so it is reachable from this machine alone.
    """
    # pgserver logs every command it runs at INFO; only its problems matter here.
    logging.getLogger("pgserver").setLevel(logging.WARNING)
    with warnings.catch_warnings():
        # platformdirs warns at import when XDG_RUNTIME_DIR is unset (containers, CI).
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR")
        from pgserver.postgres_server import PostgresServer, get_server

    pgdata = (data_dir / "pgdata").resolve()
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    # pgserver stops Postgres at exit only if the exiting process is the last one in its list,
    # and a process that was killed (SIGKILL, OOM) never removes itself: without this, every
    # later instance on the data dir would leave Postgres running when it stops. Its own lock
    # serialises this with every other process registering or leaving.
    with PostgresServer._lock:
        prune_dead_handle_pids(pgdata / HANDLE_PIDS)
    return get_server(pgdata, cleanup_mode=cleanup_mode)


def prune_dead_handle_pids(path: Path) -> list[int]:
    """Removes from pgserver's pid list the processes that no longer use the pgdata; returns the rest.

    The caller holds pgserver's inter-process lock. A pid is dropped when no such process
    exists, when it is a zombie (it can use nothing), or when its process started after
    the list was last written: that is a later process that reused the pid, since a
    registered one started before it registered.
    """
    try:
        written = path.stat().st_mtime
        pids: list[int] = json.loads(path.read_text())
    except FileNotFoundError:
        return []
    kept = [pid for pid in pids if _may_be_registered(pid, written)]
    if kept != pids:
        path.write_text(json.dumps(kept))
    return kept


def _may_be_registered(pid: int, written: float) -> bool:
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        return process.create_time() <= written + _CLOCK_SLACK_S
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        # It exists (another user's); keeping a pid errs on the side of leaving Postgres up.
        return True
