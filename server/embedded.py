"""The embedded Postgres used when no DATABASE_URL is given (pgserver from PyPI)."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pgserver.postgres_server import PostgresServer


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
        from pgserver.postgres_server import get_server

    pgdata = (data_dir / "pgdata").resolve()
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    return get_server(pgdata, cleanup_mode=cleanup_mode)
