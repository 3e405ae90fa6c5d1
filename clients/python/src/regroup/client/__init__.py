"""The Python client for regroup: the member side of the protocol and an admin client.

    from regroup.client import GroupMember, RebalanceListener

See clients/python/README.md for examples.
"""

from regroup.client.admin import GroupAdmin, SyncGroupAdmin
from regroup.client.connect import ConnectWorker, WorkerListener
from regroup.client.errors import CommitFailed, RegroupError
from regroup.client.leader import LeaderElection, SyncLeaderElection
from regroup.client.member import GroupMember, MemberOptions
from regroup.client.sync import SyncConnectWorker, SyncGroupMember
from regroup.client.tls import TlsConfig
from regroup.client.types import (
    Assignment,
    ConnectorTaskId,
    ConnectResource,
    PartitionToken,
    RebalanceListener,
    TopicPartition,
)

__all__ = [
    "Assignment",
    "CommitFailed",
    "ConnectResource",
    "ConnectWorker",
    "ConnectorTaskId",
    "GroupAdmin",
    "GroupMember",
    "LeaderElection",
    "MemberOptions",
    "PartitionToken",
    "RebalanceListener",
    "RegroupError",
    "SyncConnectWorker",
    "SyncGroupAdmin",
    "SyncGroupMember",
    "SyncLeaderElection",
    "TlsConfig",
    "TopicPartition",
    "WorkerListener",
]
