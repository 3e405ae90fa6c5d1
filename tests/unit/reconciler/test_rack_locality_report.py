"""When DescribeGroups reports `rack_locality` (issue 37, item 4): whenever a member or a
subscribed partition has a rack, as admin.proto says ("unset when no member and no
assigned partition has a rack"); with racks on one side only, as 0 local of N."""

from __future__ import annotations

import pytest

from regroup.reconciler.placement import target_rack_locality
from regroup.reconciler.rack_locality import RackLocality
from tests.support.engine import joined


@pytest.mark.parametrize("assignor", ["uniform", "range"])
def test_members_with_racks_and_partitions_without_get_0_of_0(assignor: str) -> None:
    group, image = joined(["r1", "r2"], (), assignor)
    assert target_rack_locality(group, image, assignor) == RackLocality(0, 0, 0)


def test_partitions_with_racks_and_members_without_get_0_of_the_partitions() -> None:
    group, image = joined([None, None], ("r1", "r2", "r1", "r2"))
    assert target_rack_locality(group, image, "uniform") == RackLocality(0, 4, 0)


def test_a_redundant_group_with_member_racks_only_gets_0_of_0_and_no_best() -> None:
    group, image = joined(["r1", "r2"], (), replicas=2)
    assert target_rack_locality(group, image, "uniform") == RackLocality(0, 0, None)


def test_no_rack_anywhere_reports_nothing() -> None:
    group, image = joined([None, None], ())
    assert target_rack_locality(group, image, "uniform") is None
