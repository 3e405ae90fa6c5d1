"""Java for the Spark tests: PySpark starts a JVM, which needs Java 17 or newer.

Without one here a Spark test is skipped with what to install (README.md says `make test`
needs it); under CI (CI set) it fails instead, for .ci/run installs it there and a Spark
test that quietly skips in CI tests nothing."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

MIN_VERSION = 17
INSTALL = "apt-get install -y openjdk-17-jre-headless, or set JAVA_HOME"


@functools.cache
def missing_java() -> str | None:
    """Why Spark cannot start a JVM here, or None. As Spark's launcher does: JAVA_HOME's java
    when JAVA_HOME is set, else the java on PATH."""
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home, "bin", "java")) if home else shutil.which("java")
    if java is None or not os.access(java, os.X_OK):
        where = f"JAVA_HOME={home}" if home else "PATH"
        return f"no java on {where} for Spark ({INSTALL})"
    try:
        shown = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60).stderr
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{java} -version failed ({e}); Spark needs Java {MIN_VERSION} or newer ({INSTALL})"
    # `openjdk version "17.0.15"`, `java version "1.8.0_392"` (Java 8), `"21"`.
    found = re.search(r'version "(?:1\.)?(\d+)', shown)
    if found is None or int(found[1]) < MIN_VERSION:
        return f"{java} is not Java {MIN_VERSION} or newer ({shown.strip()[:80]!r}; {INSTALL})"
    return None


def require_java() -> None:
    """Skips the calling test without Java 17+, or fails it under CI."""
    reason = missing_java()
    if reason is None:
        return
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)
