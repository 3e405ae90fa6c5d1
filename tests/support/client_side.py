"""A wire member that computes targets itself (client-side assignment): COMPUTE_ASSIGNMENT,
PrepareAssignment and InstallAssignment as a real client sends them."""

from __future__ import annotations

from typing import Any

from regroup.v1 import common_pb2, coordinator_pb2
from tests.support.service import Service
from tests.support.wire import Request, WireMember


class ClientSideMember(WireMember):
    """A WireMember that advertises client assignors and remembers COMPUTE_ASSIGNMENT."""

    def __init__(self, stubs: Any, group: str, member_id: str, topics: list[str], *entries: Any) -> None:
        super().__init__(stubs.coordinator, group, member_id, topics, rebalance_timeout_ms=500)
        self.entries = entries or (("x", 0, 1),)
        self.compute = False

    def join_request(self) -> Request:
        req = super().join_request()
        req.client_assignors.CopyFrom(assignors(*self.entries))
        return req

    def handle(self, resp: Any) -> Any:
        self.compute = resp.error_code == COMPUTE
        if self.compute:
            resp.error_code = common_pb2.NONE  # the rest of the response is valid as usual
        return super().handle(resp)

    async def prepare(self) -> coordinator_pb2.PrepareAssignmentResponse:
        return await self.stub.PrepareAssignment(
            coordinator_pb2.PrepareAssignmentRequest(
                group_id=self.group_id, member_id=self.member_id, member_epoch=self.epoch
            )
        )

    async def install(
        self, group_epoch: int, plan: dict[str, dict[str, list[int]]], **extra: Any
    ) -> coordinator_pb2.InstallAssignmentResponse:
        members = [
            coordinator_pb2.InstalledMemberAssignment(
                member_id=m,
                topic_partitions=[common_pb2.TopicPartitions(topic_id=t, partitions=p) for t, p in a.items()],
            )
            for m, a in plan.items()
        ]
        return await self.stub.InstallAssignment(
            coordinator_pb2.InstallAssignmentRequest(
                group_id=self.group_id,
                member_id=self.member_id,
                member_epoch=self.epoch,
                group_epoch=group_epoch,
                members=members,
                **extra,
            )
        )


async def _setup(service: Service, *specs: tuple[str, tuple[Any, ...]]) -> tuple[str, list[ClientSideMember]]:
    topic = await service.stubs.create_topic("orders", 4)
    members = [ClientSideMember(service.stubs, "g", mid, ["orders"], *entries) for mid, entries in specs]
    for m in members:
        resp = await m.heartbeat()
        assert resp.error_code == common_pb2.NONE, resp.error_message
    return topic, members


COMPUTE = common_pb2.COMPUTE_ASSIGNMENT


def assignors(*entries: tuple[str, int, int]) -> common_pb2.ClientAssignorList:
    return common_pb2.ClientAssignorList(
        assignors=[
            common_pb2.ClientAssignor(name=n, minimum_version=lo, maximum_version=hi, version=lo)
            for n, lo, hi in entries
        ]
    )
