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
from regroup.client.assignors.eager import EagerAssignor
from regroup.client.assignors.incremental_cooperative import IncrementalCooperativeAssignor
from regroup.client.assignors.range import RangeAssignor
from regroup.client.assignors.uniform import UniformAssignor

__all__ = [
    "CONNECT",
    "CONSUMER",
    "AssignmentPlan",
    "AssignorMember",
    "ClientAssignor",
    "EagerAssignor",
    "GroupSnapshot",
    "IncrementalCooperativeAssignor",
    "RangeAssignor",
    "TopicInfo",
    "UniformAssignor",
]
