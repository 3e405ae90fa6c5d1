"""The embedded Postgres used when no DATABASE_URL is given (pgserver from PyPI).

pgserver starts and stops Postgres with `subprocess.run(..., user=...)`, which forks the
calling process (a fork, not a vfork: it changes user in the child). A process whose
gRPC threads are running must not fork: the child inherits locks those threads held,
and gRPC's fork handlers print a line that breaks the JSON log; pg_ctl forked from a
test process full of gRPC threads was seen to die of a segmentation fault. So the
embedded Postgres is kept by a process of its own, the keeper (`python -m
regroup.server.embedded`), which runs no gRPC: `PostgresKeeper.start` spawns it (a
vfork and exec, safe whatever threads run), and it starts Postgres, answers the DSN,
then waits for `restart` or `stop` on its stdin.

- `stop` stops Postgres when the keeper is its last user (pgserver's own rule), then
  exits; the caller waits at most `STOP_WAIT_S` and the keeper finishes on its own.
- Its stdin closing without `stop` (the server was killed) leaves Postgres running, as
  a killed process always did; the next start on the data directory reuses it.
- SIGINT and SIGTERM are ignored: Ctrl-C reaches the whole foreground process group,
  and the server, still stopping, needs its database until it says `stop`.

pgserver (34 MB of Postgres binaries) and psutil come with the `regroup[embedded]` extra,
which `make run` and the tests install and the service image does not: this module
imports them only where the keeper uses them, so that a server with DATABASE_URL runs
without them, and one without either says how to get one (`EmbeddedPostgresMissing`).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import warnings
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pgserver.postgres_server import PostgresServer

#: pgserver's list of the processes using a pgdata: the last one to exit stops Postgres.
HANDLE_PIDS = ".handle_pids.json"
#: Slack for comparing a process's start with the list's mtime: psutil derives start times
#: from the boot time in whole seconds, so a start can read up to a second off.
_CLOCK_SLACK_S = 1.0
#: How long a start may take (initdb the first time: about a second on an idle machine).
START_TIMEOUT_S = 120.0
#: How long `close` waits for Postgres to stop (its shutdown checkpoint) before it lets
#: the keeper finish alone: part of the server's stop bound (docs/operations.md).
STOP_WAIT_S = 3.0
#: cleanup modes: stop Postgres when its last user leaves, also delete its data, or keep it.
CLEANUP_MODES = ("stop", "delete", "keep")


#: What installs the embedded Postgres: the extra that brings pgserver and psutil.
EXTRA = "regroup[embedded]"
#: The one line a server without DATABASE_URL and without the extra exits with.
MISSING_MESSAGE = (
    "no DATABASE_URL and no embedded Postgres: set DATABASE_URL=postgresql://..., "
    f"or install {EXTRA} (pip install '{EXTRA}')"
)


class EmbeddedPostgresError(Exception):
    """The keeper could not start or restart the embedded Postgres."""


class EmbeddedPostgresMissing(EmbeddedPostgresError):
    """pgserver is not installed (the service image has no embedded Postgres)."""

    def __init__(self) -> None:
        super().__init__(MISSING_MESSAGE)


def embedded_available() -> bool:
    """Whether the embedded extra is installed, found without importing it (pgserver's
    import is slow and warns without XDG_RUNTIME_DIR) and without starting the keeper."""
    return all(importlib.util.find_spec(name) is not None for name in ("pgserver", "psutil"))


class PostgresKeeper:
    """The embedded Postgres under `data_dir`/pgdata, kept by a process of its own."""

    def __init__(self, process: subprocess.Popen[str], answer: dict[str, Any]) -> None:
        self._process = process
        self.dsn = str(answer["dsn"])
        #: The postmaster's pid (None if pgserver did not tell).
        self.pid: int | None = answer.get("pid")
        #: Postgres' own log (pg_ctl's), where `log_statement` writes.
        self.log = Path(answer["log"])

    @classmethod
    def start(
        cls,
        data_dir: Path,
        cleanup_mode: str = "stop",
        timeout_s: float = START_TIMEOUT_S,
        *,
        durable: bool = True,
    ) -> PostgresKeeper:
        """Spawns the keeper and waits until Postgres accepts connections (blocking).

        `durable=False` is for tests' throwaway servers: nothing is flushed to disk (initdb
        --no-sync, fsync and full-page writes off), which makes their start, their
        checkpoints and their stop cheap on a busy machine. Commits stay synchronous (WAL
        written before the answer), so a crash of Postgres itself, which outage tests
        cause, loses nothing acknowledged; a crash of the machine may, which a test server
        never needs.
        """
        if cleanup_mode not in CLEANUP_MODES:
            raise ValueError(f"cleanup_mode must be one of {CLEANUP_MODES}, got {cleanup_mode!r}")
        if not embedded_available():
            # Said here, not by a keeper that fails to import: one line that names both ways out.
            raise EmbeddedPostgresMissing()
        command = [sys.executable, "-m", "regroup.server.embedded", str(data_dir), "--cleanup", cleanup_mode]
        process = subprocess.Popen(
            command if durable else [*command, "--not-durable"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            answer = _read_answer(process, timeout_s)
        except BaseException:
            process.kill()
            process.wait()
            raise
        return cls(process, answer)

    def restart(self, timeout_s: float = START_TIMEOUT_S) -> int | None:
        """Starts Postgres again after it stopped (a test's outage); returns its new pid."""
        self._send("restart")
        self.pid = _read_answer(self._process, timeout_s).get("pid")
        return self.pid

    def close(self, wait_s: float = STOP_WAIT_S) -> bool:
        """Asks the keeper to stop Postgres (if it is its last user) and waits up to
        `wait_s`; True when the keeper is done, False when it goes on alone."""
        if self._process.poll() is None:
            try:
                self._send("stop")
                assert self._process.stdin is not None
                self._process.stdin.close()
            except (BrokenPipeError, ValueError):
                pass  # gone already
        try:
            self._process.wait(wait_s)
        except subprocess.TimeoutExpired:
            # It finishes alone: something must still collect its exit status, whenever
            # that comes, or it lingers as a zombie (and Python warns of it when collected).
            threading.Thread(target=self._reap, name="regroup-keeper-reaper", daemon=True).start()
            return False
        self._reap()
        return True

    def _reap(self) -> None:
        self._process.wait()
        if self._process.stdout is not None:
            self._process.stdout.close()

    def _send(self, command: str) -> None:
        stdin = self._process.stdin
        assert stdin is not None
        stdin.write(command + "\n")
        stdin.flush()


def _read_answer(process: subprocess.Popen[str], timeout_s: float) -> dict[str, Any]:
    """The keeper's next answer (one JSON line); EmbeddedPostgresError for an error or an exit."""
    stdout = process.stdout
    assert stdout is not None
    ready, _, _ = select.select([stdout], [], [], timeout_s)
    line = stdout.readline() if ready else ""
    if not ready:
        raise EmbeddedPostgresError(f"The embedded Postgres did not start within {timeout_s:.0f} s.")
    if not line:
        code = process.wait()
        raise EmbeddedPostgresError(f"The embedded Postgres keeper exited with {code} (errors above).")
    answer: dict[str, Any] = json.loads(line)
    if "error" in answer:
        raise EmbeddedPostgresError(f"The embedded Postgres did not start: {answer['error']}")
    return answer


def keeper_main(argv: list[str] | None = None) -> int:
    """The keeper process: `python -m regroup.server.embedded DATA_DIR [--cleanup MODE]`."""
    parser = argparse.ArgumentParser(prog="python -m regroup.server.embedded")
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("--cleanup", choices=CLEANUP_MODES, default="stop")
    parser.add_argument("--not-durable", action="store_true", help="for tests: nothing flushed to disk")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # platformdirs (through pgserver) warns whenever it reads XDG_RUNTIME_DIR and finds it
    # unset, as in containers: a line on the server's stderr that says nothing to its user.
    warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR")
    patient_pg_ctl(durable=not args.not_durable)
    out = sys.stdout
    try:
        server = embedded_postgres(args.data_dir, None if args.cleanup == "keep" else args.cleanup)
    except Exception as e:  # noqa: BLE001 - told to the server, which reports it
        _answer(out, {"error": f"{type(e).__name__}: {e}"})
        return 1
    _answer(out, {"dsn": str(server.get_uri()), "pid": server.get_pid(), "log": str(server.log)})
    for line in sys.stdin:
        command = line.strip()
        if command == "stop":
            return 0  # pgserver's exit hook stops Postgres if this was its last user
        if command == "restart":
            try:
                server.ensure_postgres_running()
            except Exception as e:  # noqa: BLE001 - told to the caller
                _answer(out, {"error": f"{type(e).__name__}: {e}"})
            else:
                _answer(out, {"pid": server.get_pid()})
    # Stdin closed without a stop: the server was killed. Leave Postgres as a killed
    # server always did (no exit hooks); the next start reuses it.
    os._exit(0)


#: What a throwaway server (`durable=False`) adds to pgserver's commands.
NOT_DURABLE_INITDB = ("--no-sync",)
NOT_DURABLE_START = ("-o", "-c fsync=off -c full_page_writes=off")


def patient_pg_ctl(timeout_s: float = START_TIMEOUT_S, *, durable: bool = True) -> None:
    """Gives pg_ctl `timeout_s` to start or stop Postgres, in this (the keeper's) process.

    pgserver runs `pg_ctl -w start` under a 10 s subprocess timeout, and pg_ctl waits 60 s
    by itself (PGCTLTIMEOUT). On a machine busy with other work (a CI host, a laptop, tests
    on several workers) a start can take longer than 10 s, and pgserver then gives up on a
    Postgres that is still starting. Its pg_ctl, a module-level function that
    `pgserver.postgres_server` imported, is wrapped to pass the same command and options with
    the longer timeout (pgserver is pinned: tests/unit/server/test_embedded.py checks the
    name is still there); pg_ctl's own wait follows PGCTLTIMEOUT, its documented setting.
    Not `durable`, initdb gets NOT_DURABLE_INITDB and `pg_ctl start` NOT_DURABLE_START.
    """
    from pgserver import postgres_server

    os.environ["PGCTLTIMEOUT"] = str(int(timeout_s))
    names = vars(postgres_server)  # its module globals, where the call looks pg_ctl up
    original = names["pg_ctl"]

    original_initdb = names["initdb"]

    def pg_ctl(args: list[str], pgdata: Path | None = None, **kwargs: Any) -> str:
        if kwargs.get("timeout") is not None:
            kwargs["timeout"] = max(float(kwargs["timeout"]), timeout_s)
        if not durable and args[-1:] == ["start"]:
            args = [*args[:-1], *NOT_DURABLE_START, "start"]
        return str(original(args, pgdata=pgdata, **kwargs))

    def initdb(args: list[str], pgdata: Path | None = None, **kwargs: Any) -> str:
        return str(original_initdb([*args, *NOT_DURABLE_INITDB], pgdata=pgdata, **kwargs))

    names["pg_ctl"] = pg_ctl
    if not durable:
        names["initdb"] = initdb


def _answer(out: IO[str], answer: dict[str, Any]) -> None:
    out.write(json.dumps(answer) + "\n")
    out.flush()


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
    import psutil  # the embedded extra's, as pgserver: only the keeper (and tests) get here

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


if __name__ == "__main__":
    sys.exit(keeper_main())
