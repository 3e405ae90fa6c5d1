"""The test tree keeps its shape: every test in one tier folder, helpers in tests/support/."""

from __future__ import annotations

import ast

from tests.support.tiers import TESTS, TIERS, tier_of


def test_every_tier_has_its_folder_and_no_test_lies_loose() -> None:
    assert all((TESTS / tier).is_dir() for tier in TIERS)
    loose = sorted(p.name for p in TESTS.glob("test_*.py"))
    assert loose == [], f"tests/ itself holds {loose}: move them to tests/<tier>/"


def test_a_test_belongs_to_the_tier_of_its_folder() -> None:
    assert tier_of(TESTS / "unit" / "server" / "test_x.py") == "unit"
    assert tier_of(TESTS / "deploy" / "test_helm.py") == "deploy"
    assert tier_of(TESTS / "support" / "wire.py") is None
    assert tier_of(TESTS.parent / "bench" / "steps.py") is None


def test_tests_import_helpers_from_support_not_from_other_test_modules() -> None:
    """A helper that two test modules share lives in tests/support/: importing a test module
    (or a conftest) from another runs its module-level setup twice and couples the tiers."""
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tests."):
                last = node.module.rsplit(".", 1)[-1]
                if last.startswith("test_") or last == "conftest":
                    found.append(f"{path.relative_to(TESTS.parent)}: from {node.module} import ...")
    assert found == []
