"""The replica id of the default single-process set-up (server/identity.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from regroup.server.identity import ID_FILE, claim_identity


def test_a_configured_id_is_never_alone(tmp_path: Path) -> None:
    identity = claim_identity("pod-1", True, tmp_path)
    assert (identity.replica_id, identity.sole) == ("pod-1", False)
    assert not (tmp_path / ID_FILE).exists()


def test_with_a_database_url_each_process_gets_a_new_id(tmp_path: Path) -> None:
    identity = claim_identity("", False, tmp_path)
    assert (identity.replica_id, identity.sole) == ("", False)


def test_the_data_directorys_id_is_kept_and_held_by_one_process_at_a_time(tmp_path: Path) -> None:
    first = claim_identity("", True, tmp_path / "data")
    assert first.sole and first.replica_id.startswith("regroup-")
    assert (tmp_path / "data" / ID_FILE).read_text().strip() == first.replica_id
    # Another `make run` on the same data directory meanwhile: a replica of its own.
    second = claim_identity("", True, tmp_path / "data")
    assert (second.replica_id, second.sole) == ("", False)
    first.release()
    again = claim_identity("", True, tmp_path / "data")
    assert (again.replica_id, again.sole) == (first.replica_id, True)
    again.release()


def test_the_id_is_free_again_once_its_holder_is_killed(tmp_path: Path) -> None:
    with subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, pathlib; from regroup.server.identity import claim_identity; "
            f"i = claim_identity('', True, pathlib.Path({str(tmp_path)!r})); "
            "print(i.replica_id, i.sole, flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as holder:
        assert holder.stdout is not None
        held_id, sole = holder.stdout.readline().split()
        assert sole == "True"
        assert not claim_identity("", True, tmp_path).sole
        holder.kill()  # SIGKILL: no exit hook runs, the kernel lets the lock go
        holder.wait()
    identity = claim_identity("", True, tmp_path)
    assert (identity.replica_id, identity.sole) == (held_id, True)
    identity.release()
