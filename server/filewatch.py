"""What a configured path leads to now, for files the server re-reads when they change
(TLS certificates, the ACL and tokens files)."""

from __future__ import annotations

import os
from pathlib import Path

#: (device, inode, mtime, size) of the file a path leads to; None when there is none.
FileSignature = tuple[int, int, int, int] | None


def file_signature(path: Path) -> FileSignature:
    """Stats the path, following symlinks: Kubernetes swaps a mounted Secret's or
    ConfigMap's files by moving a symlink, and a rewrite in place changes mtime and size."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
