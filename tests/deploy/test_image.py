"""The service image installs exactly the pinned runtime set (there is no docker here, so
these read the Dockerfile and the requirement files rather than build the image).

server/accept.py depends on grpcio internals: an image that resolves `>=` ranges by
itself runs versions nobody tested (it once got a newer grpcio than the pinned one).
"""

from __future__ import annotations

import importlib.metadata
import re
import shlex
import tomllib
from dataclasses import dataclass

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support.requirements import DEV, IMAGE_ENV, LOCAL, ROOT, RUNTIME, pins

DOCKERFILE = ROOT / "Dockerfile"


def runtime_requirements() -> list[Requirement]:
    """What regroup and regroup-client declare they need at run time, in the image."""
    declared = []
    for pyproject in (ROOT / "pyproject.toml", ROOT / "clients/python/pyproject.toml"):
        declared += tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    requirements = [Requirement(r) for r in declared]
    return [r for r in requirements if r.marker is None or r.marker.evaluate(IMAGE_ENV)]


@dataclass(frozen=True)
class Stage:
    name: str
    #: (instruction, arguments) in order, continuation lines joined.
    instructions: list[tuple[str, str]]

    def commands(self) -> list[list[str]]:
        """The shell commands of every RUN, split on && and tokenized."""
        commands = []
        for instruction, arguments in self.instructions:
            if instruction == "RUN":
                commands += [shlex.split(part) for part in arguments.split("&&")]
        return commands

    def pip_installs(self) -> list[list[str]]:
        return [c for c in self.commands() if c[:2] == ["pip", "install"]]


def stages() -> list[Stage]:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    result: list[Stage] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, arguments = line.partition(" ")
        instruction = instruction.upper()
        if instruction == "FROM":
            words = arguments.split()
            result.append(Stage(words[2] if len(words) == 3 and words[1].upper() == "AS" else "", []))
        else:
            result[-1].instructions.append((instruction, arguments.strip()))
    return result


def test_the_image_installs_the_pinned_runtime_set_then_its_own_wheels_without_dependencies() -> None:
    final = stages()[-1]
    copies = [a.split() for i, a in final.instructions if i == "COPY"]
    runtime_copy = next(c for c in copies if c[0] == "requirements/runtime.txt")
    installs = final.pip_installs()
    assert installs, "the final stage installs nothing with pip"
    pinned, own = installs[0], installs[1:]
    # First the pinned set, resolved by nothing but runtime.txt ...
    assert pinned[pinned.index("-r") + 1] == runtime_copy[-1], pinned
    # ... then regroup and regroup-client, which must not pull anything in themselves.
    assert own and all("--no-deps" in c for c in own), own
    assert all(c[-1].endswith(".whl") for c in own), own
    # And pip confirms the installed set satisfies every declared requirement.
    assert ["pip", "check"] in final.commands()


def test_the_image_builds_its_wheels_with_the_pinned_build_backend() -> None:
    build = stages()[0]
    assert build.name, "the wheels are built in a stage of their own"
    assert ["pip", "install", "--no-cache-dir", "-r", "requirements/build.txt"] in build.commands()
    (wheel,) = [c for c in build.commands() if c[:2] == ["pip", "wheel"]]
    assert "--no-deps" in wheel and "--no-build-isolation" in wheel, wheel
    build_pins = pins(ROOT / "requirements" / "build.txt")
    backend = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    for requirement in map(Requirement, backend):
        name = canonicalize_name(requirement.name)
        assert name in build_pins and requirement.specifier.contains(build_pins[name]), requirement
        assert pins(DEV)[name] == build_pins[name], name


def test_the_image_takes_its_migrations_from_the_package() -> None:
    text = DOCKERFILE.read_text()
    assert "REGROUP_MIGRATIONS_DIR" not in text
    final = stages()[-1]
    assert not [a for i, a in final.instructions if i == "COPY" and "migrations" in a]


def test_every_runtime_dependency_is_pinned_as_in_dev() -> None:
    runtime, dev = pins(RUNTIME), pins(DEV)
    for requirement in runtime_requirements():
        name = canonicalize_name(requirement.name)
        if name in LOCAL:
            continue
        assert name in runtime, f"{name} is a runtime dependency but runtime.txt does not pin it"
        assert requirement.specifier.contains(runtime[name]), f"{name}=={runtime[name]} breaks {requirement}"
    for name, version in runtime.items():
        assert dev.get(name) == version, f"runtime.txt pins {name}=={version}, dev.txt {dev.get(name)}"


def test_the_runtime_set_is_closed_and_is_what_the_tests_ran_with() -> None:
    """With runtime.txt installed first, pip has nothing left to choose: every requirement of
    every pinned package is pinned too. And the venv the tests run in has these versions."""
    runtime = pins(RUNTIME)
    for name, version in runtime.items():
        assert importlib.metadata.version(name) == version, (
            f"the venv has {name} {importlib.metadata.version(name)}"
        )
    for name in runtime:
        for line in importlib.metadata.requires(name) or []:
            requirement = Requirement(line)
            if requirement.marker is not None and not requirement.marker.evaluate(IMAGE_ENV):
                continue
            dependency = canonicalize_name(requirement.name)
            assert dependency in runtime, f"{name} needs {requirement}, which runtime.txt does not pin"
            assert requirement.specifier.contains(runtime[dependency], prereleases=True), (name, requirement)
    assert not set(runtime) & LOCAL


def image_environment() -> dict[str, str]:
    """The final stage's ENV, as the server reads it (`ENV A=1 B=2` lines)."""
    env: dict[str, str] = {}
    for instruction, arguments in stages()[-1].instructions:
        if instruction == "ENV":
            env.update(word.split("=", 1) for word in shlex.split(arguments))
    return env


def test_the_image_serves_metrics_for_prometheus_but_no_web_view_unless_asked() -> None:
    """Prometheus scrapes every interface's /metrics; the web view, which has no
    authentication, is off until REGROUP_WEB_VIEW=on says otherwise (issue 37)."""
    from regroup.server.config import load_settings

    env = image_environment()
    settings = load_settings(env)
    assert (settings.listen, settings.metrics_listen) == ("0.0.0.0:50051", "0.0.0.0:9464")
    assert not settings.web_view_served()
    assert load_settings({**env, "REGROUP_WEB_VIEW": "on"}).web_view_served()


#: The embedded Postgres (the extra regroup[embedded]) and what only it pulls in.
EMBEDDED = {canonicalize_name(n) for n in ("pgserver", "psutil", "fasteners", "platformdirs")}


def test_the_image_has_no_embedded_postgres() -> None:
    """pgserver is 34 MB of Postgres binaries that a deployment, which always has a
    DATABASE_URL, never runs (issue 38): it is an extra, which the image does not install."""
    assert not set(pins(RUNTIME)) & EMBEDDED, set(pins(RUNTIME)) & EMBEDDED
    assert not {canonicalize_name(r.name) for r in runtime_requirements()} & EMBEDDED
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert {canonicalize_name(Requirement(r).name) for r in extras["embedded"]} == {
        canonicalize_name("pgserver"),
        canonicalize_name("psutil"),
    }
    # What the final stage installs: runtime.txt, then the wheels without their dependencies
    # or extras (the first test checks both), and no requirement named anywhere else.
    final = stages()[-1]
    copied = [a.split()[0] for i, a in final.instructions if i == "COPY" and not a.startswith("--from")]
    assert copied == ["requirements/runtime.txt"], copied
    words = [word for command in final.pip_installs() for word in command]
    assert not [w for w in words if "[" in w or canonicalize_name(w.split("=")[0]) in EMBEDDED], words
