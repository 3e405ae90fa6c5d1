"""The client is its own package: grpcio and protobuf only, stubs and type stubs inside."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

ROOT = Path(__file__).resolve().parent.parent.parent


def test_client_wheel_contents(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            str(ROOT / "clients/python"),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("regroup_client-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        (metadata_name,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        metadata = Parser().parsestr(archive.read(metadata_name).decode())
        (entry_points_name,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        entry_points = archive.read(entry_points_name).decode()
    requires = [r for r in metadata.get_all("Requires-Dist") or [] if "extra ==" not in r]
    assert sorted(r.split(">")[0].split("=")[0] for r in requires) == ["grpcio", "protobuf"]
    # The Spark extra must install beside the pyspark a cluster already runs: a range, never a pin,
    # and one that admits the version the tests run (requirements/dev.txt).
    spark = [r for r in metadata.get_all("Requires-Dist") or [] if 'extra == "spark"' in r]
    assert len(spark) == 1 and spark[0].startswith("pyspark"), spark
    specifier = SpecifierSet(spark[0].split(";")[0].removeprefix("pyspark").strip())
    assert not any(s.operator in ("==", "===") for s in specifier), specifier
    assert specifier.contains(_dev_pin("pyspark")) and not specifier.contains("3.4.0")
    # The `regroup` command: its extra brings click and rich, in ranges that admit the tested
    # pins; the console script is in the base wheel (without the extra it says what to install).
    cli = sorted(
        (Requirement(r) for r in metadata.get_all("Requires-Dist") or [] if 'extra == "cli"' in r),
        key=lambda r: r.name,
    )
    assert [r.name for r in cli] == ["click", "rich"], cli
    for requirement in cli:
        assert not any(s.operator in ("==", "===") for s in requirement.specifier), requirement
        assert requirement.specifier.contains(_dev_pin(requirement.name)), requirement
    assert "[console_scripts]\nregroup = regroup.cli.main:main" in entry_points, entry_points
    for expected in (
        "regroup/cli/__init__.py",
        "regroup/cli/__main__.py",
        "regroup/cli/main.py",
        "regroup/cli/app.py",
        "regroup/client/__init__.py",
        "regroup/client/member.py",
        "regroup/client/py.typed",
        "regroup/v1/py.typed",
        "regroup/v1/coordinator_pb2.py",
        "regroup/v1/coordinator_pb2.pyi",
        "regroup/v1/coordinator_pb2_grpc.py",
        "regroup/v1/coordinator_pb2_grpc.pyi",
    ):
        assert expected in names, expected
    # regroup is a namespace shared with the server package: the client must not own it.
    assert "regroup/__init__.py" not in names
    assert metadata["Description-Content-Type"] == "text/markdown"


GRPC_GENERATED = re.compile(r"^GRPC_GENERATED_VERSION = '([0-9.]+)'$", re.M)
PROTOBUF_GENCODE = re.compile(
    r"ValidateProtobufRuntimeVersion\(\s*_runtime_version\.Domain\.PUBLIC,\s*(\d+),\s*(\d+),\s*(\d+),"
)


def test_client_floors_are_the_oldest_versions_the_generated_stubs_accept() -> None:
    """Issue 38: the client asked for the newest grpcio and protobuf only. Its floors are the
    versions below which the committed stubs refuse to import (lower would break at import,
    higher would exclude applications for nothing); `make test` runs the client's unit tests
    at exactly these floors as well as at the pins."""
    floors = _pins(ROOT / "requirements" / "client-floors.txt")
    stubs = ROOT / "clients" / "python" / "src" / "regroup" / "v1"
    grpc_generated = {_match(GRPC_GENERATED, f).group(1) for f in stubs.glob("*_pb2_grpc.py")}
    protobuf_gencode = {".".join(_match(PROTOBUF_GENCODE, f).groups()) for f in stubs.glob("*_pb2.py")}
    assert len(grpc_generated) == 1 and len(protobuf_gencode) == 1, (grpc_generated, protobuf_gencode)
    assert floors == {"grpcio": grpc_generated.pop(), "protobuf": protobuf_gencode.pop()}, floors
    project = tomllib.loads((ROOT / "clients" / "python" / "pyproject.toml").read_text())["project"]
    declared = {r.name: r.specifier for r in map(Requirement, project["dependencies"])}
    assert declared == {name: SpecifierSet(f">={version}") for name, version in floors.items()}, declared
    assert all(declared[name].contains(_dev_pin(name)) for name in floors)
    (test_target,) = re.findall(r"^test:(.*)$", (ROOT / "Makefile").read_text(), re.M)
    assert "test-client-floors" in test_target.split(), test_target


def _match(pattern: re.Pattern[str], path: Path) -> re.Match[str]:
    match = pattern.search(path.read_text())
    assert match, f"{path.name}: no {pattern.pattern!r}"
    return match


def _pins(path: Path) -> dict[str, str]:
    """The `name==version` lines of a requirements file."""
    lines = [line.strip() for line in path.read_text().splitlines()]
    return dict(line.split("==", 1) for line in lines if line and not line.startswith("#"))


def _dev_pin(name: str) -> str:
    """The exact version of `name` that requirements/dev.txt pins."""
    for line in (ROOT / "requirements" / "dev.txt").read_text().splitlines():
        if line.startswith(f"{name}=="):
            return line.split("==", 1)[1].strip()
    raise AssertionError(f"{name} is not pinned in requirements/dev.txt")
