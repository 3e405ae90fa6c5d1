"""`buf breaking` compares proto/ with a committed baseline image, so a breaking change
fails the check even after it is committed (comparing with main let it pass once merged)."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "tools"))

from proto_checks import BASELINE, breaking_changes  # noqa: E402


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A copy of what buf reads: buf.yaml and proto/."""
    shutil.copy(ROOT / "buf.yaml", tmp_path / "buf.yaml")
    shutil.copytree(ROOT / "proto", tmp_path / "proto")
    return tmp_path


def edit(path: Path, pattern: str, replacement: str) -> None:
    text = path.read_text()
    edited, count = re.subn(pattern, replacement, text, count=1, flags=re.MULTILINE)
    assert count == 1, f"{pattern!r} not found in {path.name}"
    path.write_text(edited)


def test_the_baseline_is_a_committed_image_of_the_api() -> None:
    # A buf image is a FileDescriptorSet on the wire (buf adds fields protobuf keeps as unknown).
    image = descriptor_pb2.FileDescriptorSet.FromString(BASELINE.read_bytes())
    files = {f.name for f in image.file}
    assert {"regroup/v1/coordinator.proto", "regroup/v1/admin.proto", "regroup/v1/common.proto"} <= files
    assert BASELINE.is_relative_to(ROOT / "tools")  # not under proto/, where buf would lint it as API


def test_the_current_proto_is_compatible_with_the_baseline() -> None:
    assert breaking_changes() == []


def test_the_same_check_copied_elsewhere_passes_unchanged(checkout: Path) -> None:
    assert breaking_changes(checkout) == []


def test_a_deleted_field_fails_the_check(checkout: Path) -> None:
    edit(checkout / "proto/regroup/v1/admin.proto", r"^\s*repeated string partition_racks = 3;\n", "")

    findings = breaking_changes(checkout)

    assert any("partition_racks" in f or '"3"' in f for f in findings), findings
    assert all("admin.proto" in f for f in findings), findings


def test_a_renamed_rpc_fails_the_check(checkout: Path) -> None:
    edit(checkout / "proto/regroup/v1/admin.proto", r"rpc DeleteGroups\(", "rpc RemoveGroups(")

    findings = breaking_changes(checkout)

    assert any("DeleteGroups" in f for f in findings), findings


def test_a_proto_that_does_not_compile_is_an_error_not_a_finding(checkout: Path) -> None:
    edit(
        checkout / "proto/regroup/v1/admin.proto", r"^message CreatableTopic \{", "message CreatableTopic {{"
    )

    with pytest.raises(RuntimeError, match="could not compare"):
        breaking_changes(checkout)
