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


def _fenced(known: int) -> Response:
    return Response(
        error_code=common_pb2.FENCED_MEMBER_EPOCH,
        error_message=f"The consumer group member has a smaller member epoch (3) than the one known by "
        f"the group coordinator ({known}). The member must abandon all its partitions and rejoin.",
    )


def test_a_fencing_after_two_lost_answers_is_the_protocols_and_counted_not_a_violation() -> None:
    watch, _, _ = _watch()
    at_3 = Request(group_id="g", member_id="m", member_epoch=3)
    watch.check(at_3, Response(member_epoch=3))  # the last answer the member received
    # One lost answer: the protocol forgives it, so a fencing is a violation.
    watch.unanswered["g/m"] += 1
    watch.check(at_3, _fenced(5))
    assert len(watch.violations.found) == 1
    # Two lost answers, but the coordinator moved it one epoch only: a violation too.
    watch.unanswered["g/m"] += 2
    watch.check(at_3, _fenced(4))
    assert len(watch.violations.found) == 2
    # Two lost answers and two epochs the member never saw: KIP-848 fences it.
    watch.unanswered["g/m"] += 2
    watch.check(at_3, _fenced(5))
    assert len(watch.violations.found) == 2 and watch.fenced_after_lost == {"g/m": 1}
    assert watch.unanswered["g/m"] == 0  # an answer starts the count again


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
