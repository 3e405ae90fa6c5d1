"""Protocol-following members and helpers over the real generated gRPC stubs.

`WireMember` is a minimal, honest KIP-848 member for integration tests: it
applies each assignment it receives (dropping what is no longer listed),
acknowledges by sending what it owns, and rejoins with epoch 0 when fenced.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import grpc

from regroup.v1 import admin_pb2, admin_pb2_grpc, common_pb2, coordinator_pb2, coordinator_pb2_grpc

Request = coordinator_pb2.ConsumerGroupHeartbeatRequest
Response = coordinator_pb2.ConsumerGroupHeartbeatResponse
FENCED = {common_pb2.FENCED_MEMBER_EPOCH, common_pb2.UNKNOWN_MEMBER_ID}


@dataclass
class Stubs:
    channel: grpc.aio.Channel
    coordinator: coordinator_pb2_grpc.GroupCoordinatorStub
    admin: admin_pb2_grpc.GroupAdminStub

    @classmethod
    def connect(cls, target: str, credentials: grpc.ChannelCredentials | None = None) -> Stubs:
        """Stubs on a channel to `target`: TLS with `credentials`, else plain text."""
        channel = (
            grpc.aio.insecure_channel(target)
            if credentials is None
            else grpc.aio.secure_channel(target, credentials)
        )
        return cls(
            channel,
            coordinator_pb2_grpc.GroupCoordinatorStub(channel),
            admin_pb2_grpc.GroupAdminStub(channel),
        )

    async def create_topic(self, name: str, partitions: int) -> str:
        resp = await self.admin.CreateTopics(
            admin_pb2.CreateTopicsRequest(
                topics=[admin_pb2.CreatableTopic(name=name, num_partitions=partitions)]
            )
        )
        result = resp.topics[0]
        assert result.error_code == common_pb2.NONE, result.error_message
        return result.topic_id

    async def describe(self, group_id: str) -> admin_pb2.DescribedGroup:
        resp = await self.admin.DescribeGroups(admin_pb2.DescribeGroupsRequest(group_ids=[group_id]))
        return resp.groups[0]


def owned_pb(owned: dict[str, set[int]]) -> common_pb2.TopicPartitionsList:
    return common_pb2.TopicPartitionsList(
        topics=[
            common_pb2.TopicPartitions(topic_id=t, partitions=sorted(p))
            for t, p in sorted(owned.items())
            if p
        ]
    )


@dataclass
class WireMember:
    stub: coordinator_pb2_grpc.GroupCoordinatorStub
    group_id: str
    member_id: str
    topics: list[str]
    instance_id: str | None = None
    rebalance_timeout_ms: int = 60_000
    epoch: int = 0
    owned: dict[str, set[int]] = field(default_factory=dict)
    last: Response | None = None

    def join_request(self) -> Request:
        req = Request(
            group_id=self.group_id,
            member_id=self.member_id,
            member_epoch=0,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
            subscribed_topic_names=common_pb2.StringList(values=self.topics),
            topic_partitions=common_pb2.TopicPartitionsList(),
        )
        if self.instance_id is not None:
            req.instance_id = self.instance_id
        return req

    def heartbeat_request(self) -> Request:
        if self.epoch == 0:
            return self.join_request()
        req = Request(
            group_id=self.group_id,
            member_id=self.member_id,
            member_epoch=self.epoch,
            topic_partitions=owned_pb(self.owned),
        )
        if self.instance_id is not None:
            req.instance_id = self.instance_id
        return req

    async def heartbeat(self, **overrides: Any) -> Response:
        req = self.heartbeat_request()
        for name, value in overrides.items():
            setattr(req, name, value)
        return self.handle(await self.stub.ConsumerGroupHeartbeat(req))

    def handle(self, resp: Response) -> Response:
        self.last = resp
        if resp.error_code in FENCED:
            self.owned.clear()
            self.epoch = 0
        elif resp.error_code == common_pb2.NONE:
            self.member_id = resp.member_id
            self.epoch = resp.member_epoch
            if resp.HasField("assignment"):
                # Apply at once: drop what is no longer listed (revocation, acked by
                # the next heartbeat), take what is new.
                self.owned = {tp.topic_id: set(tp.partitions) for tp in resp.assignment.topic_partitions}
        return resp

    async def leave(self) -> Response:
        req = Request(group_id=self.group_id, member_id=self.member_id, member_epoch=-1)
        if self.instance_id is not None:
            req.instance_id = self.instance_id
        resp = await self.stub.ConsumerGroupHeartbeat(req)
        self.owned.clear()
        self.epoch = 0
        return resp

    def partitions(self) -> set[tuple[str, int]]:
        return {(t, p) for t, ps in self.owned.items() for p in ps}


async def converge(stubs: Stubs, group_id: str, members: list[WireMember], max_rounds: int = 20) -> int:
    """Heartbeats every member in rounds until the group is Stable; returns the rounds used."""
    for round_ in range(1, max_rounds + 1):
        for member in members:
            await member.heartbeat()
            assert_disjoint(members)
        if (await stubs.describe(group_id)).group_state == "Stable":
            return round_
    raise AssertionError(f"group {group_id} did not converge in {max_rounds} rounds")


def assert_disjoint(members: list[WireMember]) -> None:
    seen: dict[tuple[str, int], str] = {}
    for member in members:
        for tp in member.partitions():
            assert tp not in seen, f"{tp} owned by {seen[tp]} and {member.member_id}"
            seen[tp] = member.member_id


def commit_request(member: WireMember, topic_id: str, partitions: dict[int, int], **fields: object) -> object:
    request = coordinator_pb2.OffsetCommitRequest(
        group_id=member.group_id, member_id=member.member_id, member_epoch=member.epoch
    )
    for key, value in fields.items():
        setattr(request, key, value)
    request.topics.add(topic_id=topic_id).partitions.extend(
        coordinator_pb2.OffsetCommitRequest.Partition(partition=p, offset=o) for p, o in partitions.items()
    )
    return request
