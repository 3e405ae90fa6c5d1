"""The registry the client tests rely on must itself catch double ownership."""

from regroup.client import TopicPartition
from tests.support.ownership import OwnershipRegistry

P0 = frozenset({TopicPartition("t", 0, "id")})


def test_two_owners_is_a_violation() -> None:
    registry = OwnershipRegistry()
    registry.listener("a").on_partitions_assigned(P0)
    registry.listener("b").on_partitions_assigned(P0)
    assert registry.violations


def test_hand_over_after_revocation_is_fine() -> None:
    registry = OwnershipRegistry()
    registry.listener("a").on_partitions_assigned(P0)
    registry.listener("a").on_partitions_revoked(P0)
    registry.listener("b").on_partitions_assigned(P0)
    registry.assert_safe()
    assert registry.held_by("b") == P0


def test_crash_releases_and_foreign_revocation_is_a_violation() -> None:
    registry = OwnershipRegistry()
    registry.listener("a").on_partitions_assigned(P0)
    registry.crashed("a")
    registry.listener("b").on_partitions_assigned(P0)
    registry.assert_safe()
    registry.listener("a").on_partitions_revoked(P0)
    assert registry.violations
