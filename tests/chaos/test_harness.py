"""The chaos harness's checks catch what they claim to (no processes, no network): a fenced
member, an epoch that went back, and a partition given to a second owner."""

from __future__ import annotations

from regroup.client import TopicPartition
from regroup.v1 import common_pb2, coordinator_pb2
from tests.chaos.harness import HeartbeatWatch, Violations
from tests.support.ownership import OwnershipRegistry

Request = coordinator_pb2.ConsumerGroupHeartbeatRequest
Response = coordinator_pb2.ConsumerGroupHeartbeatResponse


def _watch() -> tuple[HeartbeatWatch, OwnershipRegistry, list[str]]:
    logged: list[str] = []
    registry = OwnershipRegistry()
    return HeartbeatWatch(registry, Violations(logged.append)), registry, logged


def test_a_fenced_member_is_a_violation_but_a_rejoin_refused_is_not() -> None:
    watch, _, logged = _watch()
    watch.check(
        Request(group_id="g", member_id="m", member_epoch=0),
        Response(error_code=common_pb2.UNKNOWN_MEMBER_ID),
    )
    assert watch.violations.found == []
    watch.check(
        Request(group_id="g", member_id="m", member_epoch=4),
        Response(error_code=common_pb2.FENCED_MEMBER_EPOCH),
    )
    assert len(watch.violations.found) == 1 and "g/m fenced at epoch 4" in watch.violations.found[0]
    assert logged == [f"VIOLATION {watch.violations.found[0]}"]
    assert watch.answers == {"UNKNOWN_MEMBER_ID": 1, "FENCED_MEMBER_EPOCH": 1}


def test_an_acknowledged_epoch_that_goes_back_is_a_violation() -> None:
    watch, _, _ = _watch()
    for epoch in (1, 3, 3):
        watch.check(Request(group_id="g", member_id="m", member_epoch=1), Response(member_epoch=epoch))
    assert watch.violations.found == []
    watch.check(Request(group_id="g", member_id="m", member_epoch=3), Response(member_epoch=2))
    assert watch.violations.found == ["g/m epoch went back from 3 to 2"]
    # A refusal carries no epoch: not a step back.
    watch.check(
        Request(group_id="g", member_id="m", member_epoch=3),
        Response(error_code=common_pb2.COORDINATOR_NOT_AVAILABLE),
    )
    assert len(watch.violations.found) == 1


def test_a_partition_given_to_a_second_owner_is_reported_at_the_next_answer() -> None:
    watch, registry, _ = _watch()
    tp = TopicPartition("t", 0, "id")
    registry.listener("a").on_partitions_assigned(frozenset({tp}))
    registry.listener("b").on_partitions_assigned(frozenset({tp}))
    watch.check(Request(group_id="g", member_id="a", member_epoch=1), Response(member_epoch=1))
    assert watch.violations.found == ["two owners: t-0 given to b while a holds it"]
