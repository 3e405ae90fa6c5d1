"""The repository's requirement files, read as the image and the install-set tests read them."""

from __future__ import annotations

from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import NormalizedName, canonicalize_name

ROOT = Path(__file__).resolve().parent.parent.parent
RUNTIME = ROOT / "requirements" / "runtime.txt"
DEV = ROOT / "requirements" / "dev.txt"
#: The packages this repository builds itself; the image installs them from their wheels.
LOCAL = {canonicalize_name("regroup"), canonicalize_name("regroup-client")}
#: Markers as they evaluate in the image (python:3.11-slim, Linux, CPython).
IMAGE_ENV = {
    **default_environment(),
    "sys_platform": "linux",
    "platform_system": "Linux",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "python_version": "3.11",
    "extra": "",
}


def pins(path: Path, includes: bool = False) -> dict[NormalizedName, str]:
    """`name==version` lines of a requirements file; anything else there fails the test,
    but for `-r other.txt` lines with `includes`, whose pins count as the file's own."""
    found: dict[NormalizedName, str] = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        if includes and line.startswith("-r "):
            for name, version in pins(path.parent / line.split()[1], includes).items():
                assert found.setdefault(name, version) == version, f"{path.name} pins {name} twice"
            continue
        requirement = Requirement(line)
        specs = list(requirement.specifier)
        assert len(specs) == 1 and specs[0].operator == "==", f"{path.name}: {line!r} is not pinned with =="
        assert requirement.marker is None and not requirement.extras, f"{path.name}: {line!r}"
        name = canonicalize_name(requirement.name)
        assert name not in found, f"{path.name} pins {name} twice"
        found[name] = specs[0].version
    return found
