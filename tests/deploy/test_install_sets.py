"""What `make run` and `make setup` install (issue 38): serving needs the pinned runtime set
and the embedded Postgres, shown as pip installs it; the tests and tools come with make
setup / make test only. Read from `make -n` (what make would run) and the requirement files.
"""

from __future__ import annotations

import importlib.metadata
import shlex
import subprocess
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support.requirements import DEV, IMAGE_ENV, ROOT, RUNTIME, pins

RUN = ROOT / "requirements" / "run.txt"
BUILD = ROOT / "requirements" / "build.txt"
#: The three targets that serve: they install requirements/run.txt, not dev.txt.
SERVING = ("run", "run-cluster", "migrate")
#: Tests and tools that made the first `make run` a silent 1.3 GB install (issue 38).
DEV_ONLY = ("pyspark", "playwright", "matplotlib", "mypy", "pytest", "ruff", "hypothesis", "grpcio-tools")


#: The venv that make run, make setup and make test install into (make test-client-floors has its own).
VENV_PYTHON = ".venv/bin/python"


def pip_installs(target: str) -> list[list[str]]:
    """The pip installs into .venv that `make TARGET` runs in a fresh clone (-B: as if nothing
    were installed)."""
    printed = subprocess.run(
        ["make", "-n", "-B", target], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    commands = printed.replace("\\\n", " ").splitlines()  # a recipe line continued with a backslash
    return [
        words for words in map(shlex.split, commands) if words[:4] == [VENV_PYTHON, "-m", "pip", "install"]
    ]


def requirement_files(installs: list[list[str]]) -> list[str]:
    return [words[i + 1] for words in installs for i, word in enumerate(words) if word == "-r"]


def embedded_extra() -> list[Requirement]:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    return [Requirement(r) for r in extras["embedded"]]


@pytest.mark.parametrize("target", SERVING)
def test_serving_installs_the_run_set_with_pips_progress(target: str) -> None:
    installs = pip_installs(target)
    assert requirement_files(installs) == ["requirements/run.txt"], installs
    quiet = [words for words in installs if {"-q", "--quiet", "-qq"} & set(words)]
    assert not quiet, f"make {target} installs in silence: {quiet}"


@pytest.mark.parametrize("target", ["setup", "test"])
def test_setup_and_test_install_the_dev_set(target: str) -> None:
    assert requirement_files(pip_installs(target)) == ["requirements/dev.txt"]


def test_the_run_set_is_the_runtime_set_the_build_backend_and_the_embedded_postgres() -> None:
    run = pins(RUN, includes=True)
    names = set(run)
    for name in DEV_ONLY:
        assert canonicalize_name(name) not in names, f"run.txt installs {name}, a test or development tool"
    expected = set(pins(RUNTIME)) | set(pins(BUILD)) | {canonicalize_name(r.name) for r in embedded_extra()}
    # ... and what the extra pulls in, which the closure test below finds pinned.
    assert expected <= names, expected - names
    assert canonicalize_name("pgserver") in names
    for requirement in embedded_extra():
        name = canonicalize_name(requirement.name)
        assert requirement.specifier.contains(run[name]), f"{name}=={run[name]} breaks {requirement}"


def test_the_run_set_is_closed_agrees_with_dev_and_is_what_the_venv_has() -> None:
    """pip finds every requirement of the run set pinned in it, so a first `make run` gets
    the versions the tests ran with; and make setup, which marks the run set installed
    too, installs all of it (dev.txt is a superset, with the same versions)."""
    run, dev = pins(RUN, includes=True), pins(DEV)
    for name, version in run.items():
        assert dev.get(name) == version, f"run.txt pins {name}=={version}, dev.txt {dev.get(name)}"
        assert importlib.metadata.version(name) == version, name
        for line in importlib.metadata.requires(name) or []:
            requirement = Requirement(line)
            if requirement.marker is not None and not requirement.marker.evaluate(IMAGE_ENV):
                continue
            dependency = canonicalize_name(requirement.name)
            assert dependency in run, f"{name} needs {requirement}, which run.txt does not pin"
            assert requirement.specifier.contains(run[dependency], prereleases=True), (name, requirement)
