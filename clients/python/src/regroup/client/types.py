"""The values the member hands to application code."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from regroup.v1 import common_pb2


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    """One partition of a topic. The topic id is part of the identity so that a
    topic deleted and created again under the same name is a different partition."""

    topic: str
    partition: int
    topic_id: str = ""

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class PartitionToken:
    """The fencing token of an owned partition: compare (member_epoch,
    assigned_epoch) pairs; a writer holding a smaller one is a zombie."""

    member_epoch: int
    assigned_epoch: int


@dataclass(frozen=True, slots=True)
class Assignment:
    """What the member owns now and the epoch under which it owns it.

    `member_epoch` is the fencing token for commits and external sinks;
    `assigned_epochs` gives, per partition, the member epoch at which this
    member was handed it."""

    member_epoch: int
    partitions: frozenset[TopicPartition]
    assigned_epochs: dict[TopicPartition, int] = field(default_factory=dict, compare=False)

    def token(self, partition: TopicPartition) -> PartitionToken:
        return PartitionToken(self.member_epoch, self.assigned_epochs[partition])

    def __contains__(self, partition: object) -> bool:
        return partition in self.partitions

    def __len__(self) -> int:
        return len(self.partitions)


@runtime_checkable
class PartitionListener(Protocol):
    """What a GroupMember's listener is: three callbacks, each given a frozenset of
    TopicPartition, each a plain function or a coroutine function (for a
    SyncGroupMember, plain functions: they run in worker threads). Subclass
    `RebalanceListener` to override only some."""

    def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> Awaitable[None] | None:
        """Stop working on these: another member gets them once this returns."""

    def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> Awaitable[None] | None:
        """Start working on these."""

    def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> Awaitable[None] | None:
        """These were taken away without a revocation (fenced, session expired): do not commit."""


class RebalanceListener:
    """Callbacks around ownership changes; override what you need.

    Methods may be plain functions or coroutines. The member heartbeats while
    they run; a revocation is acknowledged to the coordinator only after
    `on_partitions_revoked` returns, so finish (or flush) work on those
    partitions there. `on_partitions_lost` is called when the partitions were
    taken away without a revocation (fenced, session expired): another member
    may already own them, so do not commit for them. By default it does what
    `on_partitions_revoked` does."""

    def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> Awaitable[None] | None:
        return None

    def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> Awaitable[None] | None:
        return None

    def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> Awaitable[None] | None:
        return self.on_partitions_revoked(partitions)


async def call_listener(listener: object, method: str, partitions: frozenset[TopicPartition]) -> None:
    """Calls one listener method, awaiting it if it is a coroutine. Errors are
    logged, not raised: the member must keep following the protocol."""
    callback = getattr(listener, method, None)
    if callback is None:
        return
    try:
        result = callback(partitions)
        if inspect.isawaitable(result):
            await result
    except Exception:
        logging.getLogger("regroup.client").exception(
            "rebalance listener %s failed", method, extra={"partitions": sorted(map(str, partitions))}
        )


def partitions_from_pb(topics: Iterable[common_pb2.TopicPartitions]) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition(t.topic_name, p, t.topic_id) for t in topics for p in t.partitions)


def partitions_to_pb(partitions: Iterable[TopicPartition]) -> common_pb2.TopicPartitionsList:
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic_id, []).append(tp.partition)
    return common_pb2.TopicPartitionsList(
        topics=[
            common_pb2.TopicPartitions(topic_id=topic_id, partitions=sorted(ps))
            for topic_id, ps in sorted(by_topic.items())
        ]
    )


@dataclass(frozen=True, slots=True, order=True)
class ConnectorTaskId:
    """One task of a Connect connector (0-based task number)."""

    connector: str
    task: int

    def __str__(self) -> str:
        return f"{self.connector}-{self.task}"


#: A resource of a Connect group: a connector (its name) or one of its tasks.
ConnectResource = str | ConnectorTaskId
