"""Which replica this process is, and whether an earlier process may still be it.

A replica's shard leases are held under its replica id. A process that starts under an
id another process used finds that one's leases, and must not take them before they
expire unless it knows that process is dead: if it were alive, both would answer for
the same groups until the old one's trust ran out (docs/ha.md, "The safety rule").

- `REGROUP_REPLICA_ID` set: the id, never known to be alone (another host may run it),
  so its earlier leases are waited for, as any other replica's.
- `DATABASE_URL` set and no id: a new id per process, as before.
- The default single-process set-up (`make run`: the embedded Postgres, no id): an id
  kept in the data directory, held under an exclusive lock (flock) on a file there for
  the process's whole life. The embedded Postgres listens on a Unix socket only, so every
  process that can use it runs on this machine, where the kernel releases the lock when
  its holder dies, however it dies. A process that takes the lock therefore knows that no
  process is serving under the id, and takes its leases over at once (at new owner epochs,
  which fence anything an earlier process left in flight). A killed `make run` started
  again serves its groups within a second instead of a lease. A second process on the same
  data directory finds the lock held and runs under a new id, as a second replica.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import IO

#: In the data directory: the kept id, and the file whose lock says a process runs under it.
ID_FILE = "replica-id"
LOCK_FILE = "replica.lock"


@dataclass
class ReplicaIdentity:
    #: The replica id ("": the store makes a new one for this process).
    replica_id: str = ""
    #: True when no other process can serve under this id while this one runs: leases left
    #: under it were an earlier, dead process's, and may be taken over at once.
    sole: bool = False
    _lock: IO[str] | None = None

    def release(self) -> None:
        """Lets the next process take the id (at stop; the kernel does it at any exit)."""
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.close()


def claim_identity(replica_id: str, embedded: bool, data_dir: Path) -> ReplicaIdentity:
    """The identity of this process: `replica_id` as configured, and with `embedded` (no
    DATABASE_URL) and no id, the data directory's own id when no live process holds it."""
    if replica_id or not embedded:
        return ReplicaIdentity(replica_id)
    data_dir.mkdir(parents=True, exist_ok=True)
    lock = (data_dir / LOCK_FILE).open("a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        return ReplicaIdentity()  # another process on this data directory: a replica of its own
    try:
        kept = _kept_id(data_dir / ID_FILE)
    except BaseException:
        lock.close()
        raise
    return ReplicaIdentity(kept, sole=True, _lock=lock)


def _kept_id(path: Path) -> str:
    """The id kept at `path`, made the first time (written whole, then renamed into place)."""
    with contextlib.suppress(FileNotFoundError):
        kept = path.read_text().strip()
        if kept:
            return kept
    made = f"regroup-{uuid.uuid4()}"
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(made + "\n")
    partial.replace(path)
    return made
