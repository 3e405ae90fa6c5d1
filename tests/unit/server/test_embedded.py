"""Pruning pgserver's list of the processes using a pgdata, and a server without the
embedded extra (server/embedded.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from regroup.server.embedded import HANDLE_PIDS, MISSING_MESSAGE, prune_dead_handle_pids

#: What `regroup[embedded]` installs (pyproject.toml), none of which the service image has.
EMBEDDED_EXTRA = ("pgserver", "psutil", "fasteners", "platformdirs")

#: Loaded by every Python started with its folder on PYTHONPATH: the import system's path
#: finder stops finding the embedded extra's packages, as if they were not installed.
WITHOUT_EMBEDDED = f"""
import sys
from importlib.machinery import PathFinder

HIDDEN = {set(EMBEDDED_EXTRA)!r}


class WithoutEmbedded(PathFinder):
    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname.partition(".")[0] in HIDDEN:
            return None
        return super().find_spec(fullname, path, target)


sys.meta_path[:] = [WithoutEmbedded if finder is PathFinder else finder for finder in sys.meta_path]
"""


def _exited_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _write(path: Path, pids: list[int], mtime: float | None = None) -> None:
    path.write_text(json.dumps(pids))
    if mtime is not None:
        os.utime(path, (mtime, mtime))


def test_dead_pids_are_dropped_and_live_ones_kept(tmp_path: Path) -> None:
    path = tmp_path / HANDLE_PIDS
    dead = _exited_pid()
    _write(path, [dead, os.getpid()])

    assert prune_dead_handle_pids(path) == [os.getpid()]
    assert json.loads(path.read_text()) == [os.getpid()]


def test_a_list_of_live_pids_is_left_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / HANDLE_PIDS
    written = time.time() - 0.5  # after this process started
    _write(path, [os.getpid()], mtime=written)

    assert prune_dead_handle_pids(path) == [os.getpid()]
    assert path.stat().st_mtime == written  # not rewritten


def test_a_pid_reused_by_a_process_started_after_the_list_was_written_is_dropped(tmp_path: Path) -> None:
    # The list was last written before this process started: the pid in it belonged to another.
    path = tmp_path / HANDLE_PIDS
    _write(path, [os.getpid()], mtime=psutil.Process().create_time() - 60)

    assert prune_dead_handle_pids(path) == []


def test_a_zombie_is_dropped(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 10
        while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE:  # exited, not reaped yet
            assert time.monotonic() < deadline, "the child did not exit"
            time.sleep(0.01)
        path = tmp_path / HANDLE_PIDS
        _write(path, [child.pid, os.getpid()])

        assert prune_dead_handle_pids(path) == [os.getpid()]
    finally:
        child.wait()


def test_no_list_yet_is_an_empty_one(tmp_path: Path) -> None:
    assert prune_dead_handle_pids(tmp_path / HANDLE_PIDS) == []
    assert not (tmp_path / HANDLE_PIDS).exists()


def _without_embedded(tmp_path: Path) -> dict[str, str]:
    """The environment of a Python in which the embedded extra is not installed."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(WITHOUT_EMBEDDED)
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(shim), env.get("PYTHONPATH")]))
    return env


def test_the_shim_hides_the_embedded_extra_and_nothing_else(tmp_path: Path) -> None:
    env = _without_embedded(tmp_path)
    for name in EMBEDDED_EXTRA:
        run = subprocess.run(
            [sys.executable, "-c", f"import {name}"], env=env, capture_output=True, text=True
        )
        assert run.returncode == 1 and f"No module named '{name}'" in run.stderr, run.stderr
    run = subprocess.run([sys.executable, "-c", "import regroup.server.main, asyncpg"], env=env)
    assert run.returncode == 0


@pytest.mark.parametrize("command", ["serve", "migrate", "cluster"])
def test_without_database_url_and_the_extra_the_server_says_how_to_get_either(
    tmp_path: Path, command: str
) -> None:
    """The service image has no embedded Postgres (issue 38): without DATABASE_URL every
    command that needs a database exits 1 with one line naming both ways out, and starts
    no keeper that would fail with a traceback."""
    env = _without_embedded(tmp_path)
    env.update(
        REGROUP_DATA_DIR=str(tmp_path / "data"),
        REGROUP_LISTEN="127.0.0.1:0",
        REGROUP_METRICS_LISTEN="127.0.0.1:0",
    )
    run = subprocess.run(
        [sys.executable, "-m", "regroup.server", command],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (run.returncode, run.stderr.splitlines()) == (1, [f"regroup: {MISSING_MESSAGE}"]), run.stderr
    assert (
        "pip install 'regroup[embedded]'" in MISSING_MESSAGE
        and "DATABASE_URL=postgresql://" in MISSING_MESSAGE
    )


def test_the_keeper_gives_pg_ctl_time_and_changes_nothing_else(monkeypatch: pytest.MonkeyPatch) -> None:
    """pgserver (pinned) calls its module's pg_ctl with a 10 s timeout to start Postgres; the
    keeper's wrapper passes the same command with its own, longer timeout."""
    from pgserver import postgres_server

    from regroup.server.embedded import START_TIMEOUT_S, patient_pg_ctl

    calls: list[tuple[list[str], Any, dict[str, Any]]] = []

    def recorded(args: list[str], pgdata: Any = None, **kwargs: Any) -> str:
        calls.append((args, pgdata, kwargs))
        return "done"

    monkeypatch.setitem(vars(postgres_server), "pg_ctl", recorded)
    monkeypatch.delenv("PGCTLTIMEOUT", raising=False)
    patient_pg_ctl()
    assert os.environ["PGCTLTIMEOUT"] == str(int(START_TIMEOUT_S))
    monkeypatch.delenv("PGCTLTIMEOUT")
    wrapped = vars(postgres_server)["pg_ctl"]
    assert wrapped(["-w", "start"], pgdata=Path("/d"), user="pgserver", timeout=10) == "done"
    assert wrapped(["-w", "stop"], pgdata=Path("/d"), user="pgserver") == "done"
    assert calls == [
        (["-w", "start"], Path("/d"), {"user": "pgserver", "timeout": START_TIMEOUT_S}),
        (["-w", "stop"], Path("/d"), {"user": "pgserver"}),
    ]


def test_a_throwaway_server_flushes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """durable=False (the tests' servers): initdb --no-sync, Postgres started with fsync off."""
    from pgserver import postgres_server

    from regroup.server.embedded import NOT_DURABLE_INITDB, NOT_DURABLE_START, patient_pg_ctl

    calls: list[tuple[str, list[str]]] = []
    monkeypatch.setitem(vars(postgres_server), "pg_ctl", lambda args, **_: calls.append(("pg_ctl", args)))
    monkeypatch.setitem(vars(postgres_server), "initdb", lambda args, **_: calls.append(("initdb", args)))
    monkeypatch.setenv("PGCTLTIMEOUT", "60")
    patient_pg_ctl(durable=False)
    names = vars(postgres_server)
    names["initdb"](["--auth=trust"], pgdata=Path("/d"))
    names["pg_ctl"](["-w", "-l", "log", "start"], pgdata=Path("/d"), timeout=10)
    names["pg_ctl"](["-w", "stop"], pgdata=Path("/d"))
    assert calls == [
        ("initdb", ["--auth=trust", *NOT_DURABLE_INITDB]),
        ("pg_ctl", ["-w", "-l", "log", *NOT_DURABLE_START, "start"]),
        ("pg_ctl", ["-w", "stop"]),
    ]
