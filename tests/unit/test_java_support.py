"""tests/support/java.py: a Spark test without Java skips with what to install, and fails
under CI, where .ci/run installs Java."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import java


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    java.missing_java.cache_clear()
    yield
    java.missing_java.cache_clear()


def _fake_java(folder: Path, shown: str) -> Path:
    """A JAVA_HOME whose bin/java prints `shown` as `java -version` does (on stderr)."""
    binary = folder / "bin" / "java"
    binary.parent.mkdir(parents=True)
    binary.write_text(f"#!/bin/sh\necho '{shown}' >&2\n")
    binary.chmod(0o755)
    return folder


def test_no_java_skips_naming_what_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nowhere"))
    with pytest.raises(pytest.skip.Exception, match=r"no java on JAVA_HOME=.*openjdk-17-jre-headless"):
        java.require_java()


def test_no_java_fails_under_ci(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CI", "true")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nowhere"))
    with pytest.raises(pytest.fail.Exception, match="no java"):
        java.require_java()


def test_an_old_java_is_missing_java(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("JAVA_HOME", str(_fake_java(tmp_path, 'java version "1.8.0_392"')))
    assert "is not Java 17 or newer" in (java.missing_java() or "")


@pytest.mark.parametrize("shown", ['openjdk version "17.0.15" 2025-04-15', 'openjdk version "21" 2023-09-19'])
def test_java_17_or_newer_is_enough(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, shown: str) -> None:
    monkeypatch.setenv("JAVA_HOME", str(_fake_java(tmp_path, shown)))
    assert java.missing_java() is None
    java.require_java()  # neither skips nor fails


def test_without_java_home_the_java_on_path_counts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    home = _fake_java(tmp_path, 'openjdk version "17.0.15"')
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", f"{home / 'bin'}{os.pathsep}/nonexistent")
    assert java.missing_java() is None
    monkeypatch.setenv("PATH", "/nonexistent")
    java.missing_java.cache_clear()
    assert "no java on PATH" in (java.missing_java() or "")
