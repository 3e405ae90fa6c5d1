"""The listeners have typed protocols (issue 38): the members' constructors say what a
listener is, and the listener classes to subclass satisfy them."""

from __future__ import annotations

import typing
from collections.abc import Awaitable

from regroup.client import (
    ConnectListener,
    ConnectWorker,
    GroupMember,
    PartitionListener,
    RebalanceListener,
    SyncConnectWorker,
    SyncGroupMember,
    TopicPartition,
    WorkerListener,
)


def test_the_members_take_a_typed_listener() -> None:
    for member, protocol in [
        (GroupMember, PartitionListener),
        (SyncGroupMember, PartitionListener),
        (ConnectWorker, ConnectListener),
        (SyncConnectWorker, ConnectListener),
    ]:
        assert typing.get_type_hints(member.__init__)["listener"] == protocol | None, member


def test_the_protocols_name_each_callback_with_its_types() -> None:
    for name in ("on_partitions_revoked", "on_partitions_assigned", "on_partitions_lost"):
        hints = typing.get_type_hints(getattr(PartitionListener, name))
        assert hints == {
            "partitions": frozenset[TopicPartition],
            "return": Awaitable[None] | None,
        }
    assert set(typing.get_type_hints(ConnectListener.on_assigned)) == {"resources", "return"}


class Async:
    async def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None: ...
    async def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None: ...
    async def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> None: ...


def test_listener_classes_and_coroutine_listeners_satisfy_them() -> None:
    assert isinstance(RebalanceListener(), PartitionListener)
    assert isinstance(WorkerListener(), ConnectListener)
    assert isinstance(Async(), PartitionListener)
    assert not isinstance(object(), PartitionListener)
