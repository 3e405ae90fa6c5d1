"""Server-side assignors, by name."""

from __future__ import annotations

from collections.abc import Mapping

from .base import (
    Assignor,
    GroupAssignment,
    GroupSpec,
    MemberSpec,
    PartitionAssignorError,
    SubscriptionType,
    TargetSummary,
)
from .leader import LeaderAssignor
from .range import RangeAssignor
from .uniform import UniformAssignor

BUILTIN_ASSIGNORS: Mapping[str, Assignor] = {
    UniformAssignor.name: UniformAssignor(),
    RangeAssignor.name: RangeAssignor(),
    # After the partition assignors: the first is the default (GroupConfig.default_assignor).
    LeaderAssignor.name: LeaderAssignor(),
}

__all__ = [
    "BUILTIN_ASSIGNORS",
    "Assignor",
    "GroupAssignment",
    "GroupSpec",
    "LeaderAssignor",
    "MemberSpec",
    "PartitionAssignorError",
    "RangeAssignor",
    "SubscriptionType",
    "TargetSummary",
    "UniformAssignor",
]
