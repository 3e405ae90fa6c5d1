"""A real Postgres for tests: one embedded server per run, one database per test.

The migrations run once into a template database; each test gets a fresh copy
(`CREATE DATABASE ... TEMPLATE`), which takes a few milliseconds.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import psutil

from regroup.server.embedded import PostgresKeeper
from regroup.server.migrate import apply_migrations
from tests.support.timing import scaled

TEMPLATE = "regroup_template"
_counter = itertools.count()


def dsn_for(base_dsn: str, database: str) -> str:
    parts = urlsplit(base_dsn)
    return urlunsplit(parts._replace(path=f"/{database}"))


class EmbeddedPostgres:
    """One per test process (a worker of `make test` has its own: tests that check that
    nothing wrote read the cluster-wide transaction counter)."""

    def __init__(self) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="regroup-pg-"))
        # Kept by a process of its own, as the server's: pgserver forks to run pg_ctl, and a
        # test process runs gRPC threads (server/embedded.py says why that must not happen).
        # Not durable: nothing is flushed to disk, so that its start, its checkpoints and its
        # stop stay cheap however busy the machine is.
        self._server = PostgresKeeper.start(self._dir, cleanup_mode="delete", durable=False)
        self.base_dsn = self._server.dsn
        self._template_ready = False

    def close(self) -> None:
        # Past the wait its keeper finishes alone, and deletes its data (cleanup "delete").
        if self._server.close(wait_s=scaled(20)):
            shutil.rmtree(self._dir, ignore_errors=True)

    async def _ensure_template(self) -> None:
        if self._template_ready:
            return
        conn = await asyncpg.connect(self.base_dsn)
        try:
            # No autovacuum in tests: its ANALYZE of a busy table (the history's group_events
            # fills up in many test databases) takes a transaction id, which tests that check
            # that nothing wrote (pg_snapshot_xmax, cluster-wide) would take for a write.
            await conn.execute("ALTER SYSTEM SET autovacuum = off")
            await conn.execute("SELECT pg_reload_conf()")
            await conn.execute(f"DROP DATABASE IF EXISTS {TEMPLATE}")
            await conn.execute(f"CREATE DATABASE {TEMPLATE}")
        finally:
            await conn.close()
        conn = await asyncpg.connect(dsn_for(self.base_dsn, TEMPLATE))
        try:
            await apply_migrations(conn)
        finally:
            await conn.close()
        self._template_ready = True

    async def empty_database(self) -> str:
        """A new database with nothing in it; returns its DSN."""
        name = f"test_empty_{next(_counter)}"
        conn = await asyncpg.connect(self.base_dsn)
        try:
            await conn.execute(f"CREATE DATABASE {name}")
        finally:
            await conn.close()
        return dsn_for(self.base_dsn, name)

    async def migrated_database(self) -> str:
        """A new database with every migration applied; returns its DSN."""
        await self._ensure_template()
        name = f"test_{next(_counter)}"
        conn = await asyncpg.connect(self.base_dsn)
        try:
            await conn.execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}")
        finally:
            await conn.close()
        return dsn_for(self.base_dsn, name)


class StoppablePostgres(EmbeddedPostgres):
    """An embedded Postgres of a test's own, which the test can take away (an
    immediate shutdown, as a crash or a failover looks to clients) and bring
    back on the same socket, so that the same DSN works again."""

    def stop_immediately(self, timeout_s: float = 10.0) -> None:
        pid = self._server.pid
        assert pid is not None
        # SIGQUIT is Postgres' immediate shutdown: no checkpoint, every client cut off.
        os.kill(pid, signal.SIGQUIT)
        deadline = time.monotonic() + timeout_s
        while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
            if time.monotonic() > deadline:
                raise TimeoutError(f"Postgres {pid} did not stop")
            time.sleep(0.02)

    def restart(self, timeout_s: float = 30.0) -> None:
        self._server.restart(timeout_s)
