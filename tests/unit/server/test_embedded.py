"""Pruning pgserver's list of the processes using a pgdata (server/embedded.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from regroup.server.embedded import HANDLE_PIDS, prune_dead_handle_pids


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
