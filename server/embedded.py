"""The embedded Postgres used when no DATABASE_URL is given (pgserver from PyPI)."""

from __future__ import annotations

from pathlib import Path

from pgserver.postgres_server import get_server


def start_embedded_postgres(data_dir: Path) -> str:
    """Starts (or reuses) a Postgres under `data_dir`/pgdata; returns its DSN.

    The server stops when this process exits. It listens on a Unix socket
    only, so it is reachable from this machine alone.
    """
    pgdata = (data_dir / "pgdata").resolve()
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    server = get_server(pgdata, cleanup_mode="stop")
    return str(server.get_uri())
