"""The Python client for regroup: the member side of the protocol and an admin client.

    from regroup.client import GroupMember, RebalanceListener

See clients/python/README.md for examples.
"""

from regroup.client.admin import GroupAdmin, SyncGroupAdmin
from regroup.client.connect import ConnectListener, ConnectWorker, WorkerListener
from regroup.client.errors import (
    AuthorizationFailed,
    CommitFailed,
    Fenced,
    GroupError,
    InvalidRequest,
    NotCoordinator,
    RegroupError,
    RetriableError,
    ServerError,
    TimedOut,
    TopicError,
    Unavailable,
)
from regroup.client.leader import LeaderElection, SyncLeaderElection
from regroup.client.member import GroupMember, MemberOptions
from regroup.client.sync import SyncConnectWorker, SyncGroupMember
from regroup.client.tls import TlsConfig
from regroup.client.types import (
    Assignment,
    ConnectorTaskId,
    ConnectResource,
    PartitionListener,
    PartitionToken,
    RebalanceListener,
    TopicPartition,
)

__all__ = [
    "Assignment",
    "AuthorizationFailed",
    "CommitFailed",
    "ConnectListener",
    "ConnectResource",
    "ConnectWorker",
    "ConnectorTaskId",
    "Fenced",
    "GroupAdmin",
    "GroupError",
    "GroupMember",
    "InvalidRequest",
    "LeaderElection",
    "MemberOptions",
    "NotCoordinator",
    "PartitionListener",
    "PartitionToken",
    "RebalanceListener",
    "RegroupError",
    "RetriableError",
    "ServerError",
    "SyncConnectWorker",
    "SyncGroupAdmin",
    "SyncGroupMember",
    "SyncLeaderElection",
    "TimedOut",
    "TlsConfig",
    "TopicError",
    "TopicPartition",
    "Unavailable",
    "WorkerListener",
]
