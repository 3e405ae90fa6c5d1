"""Runs mypy on the regroup namespace: strict on the engine, the server, the client and its command.

reconciler/ and server/ are installed as regroup.reconciler and regroup.server
through a setuptools package-dir mapping, which mypy cannot follow. This script
lays out directory symlinks under build/typecheck/regroup/ so that mypy sees
the real package names, then checks them. Stubs for dependencies that ship no
type hints (google-re2) live in typings/, on mypy's search path.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STUBS = ROOT / "typings"
LINKS = {
    "reconciler": ROOT / "reconciler",
    "server": ROOT / "server",
    "client": ROOT / "clients/python/src/regroup/client",
    "cli": ROOT / "clients/python/src/regroup/cli",
    "v1": ROOT / "clients/python/src/regroup/v1",
}


def main() -> int:
    base = ROOT / "build" / "typecheck"
    pkg = base / "regroup"
    pkg.mkdir(parents=True, exist_ok=True)
    for name, target in LINKS.items():
        link = pkg / name
        if link.is_symlink() and link.resolve() == target:
            continue
        if link.is_symlink():
            link.unlink()
        link.symlink_to(target, target_is_directory=True)
    cmd = [
        sys.executable,
        "-m",
        "mypy",
        "--strict",
        "--cache-dir",
        str(ROOT / ".mypy_cache"),
        "--namespace-packages",
        "--explicit-package-bases",
        "-p",
        "regroup.reconciler",
        "-p",
        "regroup.server",
        "-p",
        "regroup.client",
        "-p",
        "regroup.cli",
    ]
    return subprocess.call(cmd, cwd=base, env={**os.environ, "MYPYPATH": str(STUBS)})


if __name__ == "__main__":
    sys.exit(main())
