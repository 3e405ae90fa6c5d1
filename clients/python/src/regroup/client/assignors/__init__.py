"""Client-side assignors (see base.py for the contract)."""

from regroup.client.assignors.base import (
    CONNECT,
    CONSUMER,
    AssignmentPlan,
    AssignorMember,
    ClientAssignor,
    GroupSnapshot,
    TopicInfo,
)

__all__ = [
    "CONNECT",
    "CONSUMER",
    "AssignmentPlan",
    "AssignorMember",
    "ClientAssignor",
    "GroupSnapshot",
    "TopicInfo",
]
