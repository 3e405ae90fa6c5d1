"""Starting the servers under test in their own processes, and measuring them."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import psutil

from tests.support import child

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ServerProcess:
    proc: subprocess.Popen[bytes]
    port: int
    log: Path
    #: The database of a coordinator (empty for the bare server).
    dsn: str = ""

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def cpu_seconds(self) -> float:
        times = psutil.Process(self.proc.pid).cpu_times()
        return float(times.user + times.system)

    def rss_bytes(self) -> int:
        return int(psutil.Process(self.proc.pid).memory_info().rss)

    def wait_listening(self, timeout: float = 60) -> None:
        _wait_port(self.port, self.proc, self.log, timeout)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _wait_port(port: int, proc: subprocess.Popen[bytes], log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"server did not listen on {port} in {timeout}s:\n{log.read_text()[-3000:]}")


def _spawn(args: list[str], env: dict[str, str], port: int, name: str, wait: bool = True) -> ServerProcess:
    log = Path(tempfile.mkstemp(prefix=f"regroup-bench-{name}-", suffix=".log")[1])
    with log.open("wb") as out:
        # A server outlives no benchmark (PR_SET_PDEATHSIG), set up without forking this
        # process, whose gRPC threads run (tests/support/child.py).
        proc = subprocess.Popen(
            child.command(args, die_with_parent=True), env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT
        )
    server = ServerProcess(proc, port, log)
    if wait:
        server.wait_listening()
    return server


def start_bare(loop: str = "uvloop", accept_depth: int | None = None) -> ServerProcess:
    """The bare server, on uvloop (as regroup runs) or on asyncio's own loop, with regroup's
    accept depth unless `accept_depth` is given (1: grpc.aio's own single pipeline)."""
    port = free_port()
    args = [sys.executable, "-m", "bench.bare_server", str(port), *(["asyncio"] if loop == "asyncio" else [])]
    env = dict(os.environ)
    if accept_depth is not None:
        env["REGROUP_ACCEPT_DEPTH"] = str(accept_depth)
    return _spawn(args, env, port, f"bare-{loop}")


def start_coordinator(dsn: str, port: int | None = None, wait: bool = True, **settings: Any) -> ServerProcess:
    """regroup on `dsn`; settings are REGROUP_* variables without the prefix (session_timeout_ms=...).
    Without `wait` it returns at once (`wait_listening()` then waits), so that replicas start together."""
    port = port or free_port()
    env = dict(os.environ)
    env.update(DATABASE_URL=dsn, REGROUP_LISTEN=f"127.0.0.1:{port}", REGROUP_LOG_LEVEL="warning")
    # Several servers at once: metrics only where a benchmark asks (metrics_listen=...).
    env.update(REGROUP_METRICS_LISTEN="off")
    env.update(PYTHONUNBUFFERED="1")  # so that a failing server's last words reach its log
    env.update({f"REGROUP_{k.upper()}": str(v) for k, v in settings.items()})
    name = str(settings.get("replica_id", "coordinator"))
    server = _spawn([sys.executable, "-m", "regroup.server"], env, port, name, wait)
    server.dsn = dsn
    return server


@dataclass
class BenchPostgres:
    """An embedded Postgres for one benchmark run, deleted afterwards."""

    _dir: tempfile.TemporaryDirectory[str] = field(
        default_factory=lambda: tempfile.TemporaryDirectory(prefix="regroup-bench-pg-")
    )
    base_dsn: str = ""
    _server: Any = None
    _count: int = 0

    def __post_init__(self) -> None:
        from regroup.server.embedded import PostgresKeeper

        # A benchmark stopped by SIGTERM (a timeout) still runs its finally blocks and
        # atexit hooks, so the embedded Postgres and the servers are cleaned up.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

        # Kept by a process of its own: nothing forks this one once gRPC runs (server/embedded.py).
        self._server = PostgresKeeper.start(Path(self._dir.name), cleanup_mode="delete")
        self.base_dsn = self._server.dsn

    def new_database(self) -> str:
        self._count += 1
        name = f"bench_{self._count}"

        async def create() -> None:
            conn = await asyncpg.connect(self.base_dsn)
            try:
                await conn.execute(f"CREATE DATABASE {name}")
            finally:
                await conn.close()

        asyncio.run(create())
        from tests.support.pg import dsn_for

        return dsn_for(self.base_dsn, name)

    @property
    def log_path(self) -> Path:
        """The server's own log (pg_ctl's), where `log_statement` writes."""
        return Path(self._server.log)

    def disable_autovacuum(self) -> None:
        """Switches Postgres' autovacuum daemon off. Even with nothing to clean,
        its worker visits each database every autovacuum_naptime and commits a
        few catalog transactions there (4 per visit, measured), which
        pg_stat_database counts as the database's commits like anyone else's."""

        async def alter() -> None:
            conn = await asyncpg.connect(self.base_dsn)
            try:
                await conn.execute("ALTER SYSTEM SET autovacuum = off")
                await conn.execute("SELECT pg_reload_conf()")
            finally:
                await conn.close()

        asyncio.run(alter())

    def close(self) -> None:
        self._server.close(wait_s=60)
        self._dir.cleanup()


async def vacuum_analyze(dsn: str) -> None:
    """Does now the autovacuum and autoanalyze that a join of many members calls
    for: left to Postgres, they run (as transactions of their own) up to a
    minute later, inside whatever window is measured next. The coordinator's
    statistics are flushed first, or their late arrival would call for them again."""
    await _flush_statistics(dsn)
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("VACUUM (ANALYZE)")
    finally:
        await conn.close()


async def _flush_statistics(dsn: str) -> None:
    """Ends every connection to the database, which makes each flush its
    statistics: Postgres does so lazily otherwise, up to 10 s after a backend
    goes idle. (The coordinator's pool simply reconnects.)"""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    finally:
        await conn.close()
    await asyncio.sleep(0.3)  # backends exit, and flush, after the call returns


async def postgres_activity(dsn: str) -> dict[str, int]:
    """Commits and transaction ids of the database so far, with every
    connection's statistics flushed.

    What measuring costs is the same every time, so a caller can subtract it
    (two probes in a row): one connection ends the others, and a fresh one reads
    everything in its first statement, before any transaction of its own counts.
    """
    await _flush_statistics(dsn)
    conn = await asyncpg.connect(dsn)
    try:
        row = await conn.fetchrow(
            "SELECT xact_commit, pg_snapshot_xmax(pg_current_snapshot())::text AS next_xid,"
            # Rows the coordinator wrote, and Postgres' own background work
            # (autovacuum and autoanalyze take transaction ids of their own).
            " (SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0) FROM pg_stat_user_tables) AS rows,"
            " (SELECT coalesce(sum(autovacuum_count + autoanalyze_count), 0) FROM pg_stat_user_tables)"
            " AS background"
            " FROM pg_stat_database WHERE datname = current_database()"
        )
    finally:
        await conn.close()
    return {
        "xact_commit": int(row["xact_commit"]),
        "next_xid": int(row["next_xid"]),
        "rows_written": int(row["rows"]),
        "autovacuum_runs": int(row["background"]),
    }
