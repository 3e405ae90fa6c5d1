"""The test tiers: a test's tier is the folder under tests/ that holds it (tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
TIERS = ("unit", "integration", "docs", "deploy", "chaos", "slow")


def tier_of(path: Path) -> str | None:
    try:
        first = path.resolve().relative_to(TESTS).parts[0]
    except ValueError:
        return None
    return first if first in TIERS else None
