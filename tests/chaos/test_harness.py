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
    assert (
        len(watch.violations.found) == 1
        and "g/m fenced at epoch 4 (0 calls at it moved unseen)" in watch.violations.found[0]
    )
    assert logged == [f"VIOLATION {watch.violations.found[0]}"]
    assert watch.answers == {"UNKNOWN_MEMBER_ID": 1, "FENCED_MEMBER_EPOCH": 1}


def _fenced(sent: int, known: int) -> Response:
    relation = "smaller" if sent < known else "greater"
    return Response(
        error_code=common_pb2.FENCED_MEMBER_EPOCH,
        error_message=f"The consumer group member has a {relation} member epoch ({sent}) than the one "
        f"known by the group coordinator ({known}). The member must abandon all its partitions and rejoin.",
    )


def test_a_fencing_after_two_unseen_moves_is_the_protocols_and_counted_not_a_violation() -> None:
    watch, _, _ = _watch()
    at_3 = Request(group_id="g", member_id="m", member_epoch=3)
    watch.check(at_3, Response(member_epoch=3))  # answered and seen: nothing moved unseen
    watch.check(at_3, _fenced(3, 4))
    assert len(watch.violations.found) == 1
    # One call without an answer: the protocol forgives it (the previous epoch is accepted).
    watch.unseen(at_3)
    watch.check(at_3, _fenced(3, 4))
    assert len(watch.violations.found) == 2
    # A second: an answer that moved it to epoch 4, which the member never applied (a member
    # stream's answer that came after it stopped waiting), since it sends epoch 3 again. The
    # coordinator is one epoch ahead only, but the accepted retry moved its previous epoch on.
    watch.check(at_3, Response(member_epoch=4))
    watch.check(at_3, _fenced(3, 4))
    assert len(watch.violations.found) == 2 and watch.fenced_after_lost == {"g/m": 1}
    # An epoch greater than the coordinator's is never the protocol's, lost answers or not.
    at_5 = Request(group_id="g", member_id="m", member_epoch=5)
    watch.unseen(at_5)
    watch.unseen(at_5)
    watch.check(at_5, _fenced(5, 4))
    assert len(watch.violations.found) == 3
    # Unseen calls at another epoch do not count for this one.
    at_6 = Request(group_id="g", member_id="m", member_epoch=6)
    watch.check(at_6, _fenced(6, 7))
    assert len(watch.violations.found) == 4 and watch.fenced_after_lost == {"g/m": 1}


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


def test_a_stream_call_the_member_gave_up_counts_once_and_its_late_answer_not_again() -> None:
    watch, _, _ = _watch()
    at_3 = Request(group_id="g", member_id="m", member_epoch=3)
    watch.sending(at_3, "stream 1", (1, 7))
    watch.sending(at_3, "stream 1", (1, 8))  # the member stopped waiting for call 7: one unseen
    watch.check(at_3, Response(member_epoch=4), (1, 7))  # 7's late answer: already counted
    assert watch.unseen_at["g/m", 3] == 1 and watch.late_answers == 1
    watch.check(at_3, _fenced(3, 4), (1, 8))
    assert len(watch.violations.found) == 1
    assert "gave up waiting for the previous call" in watch.violations.found[0]
    assert "late answer NONE at epoch 4" in watch.violations.found[0]
    # Gave up on call 9 too: two calls at epoch 3 may have moved it on unseen.
    watch.sending(at_3, "stream 1", (1, 9))
    watch.sending(at_3, "unary", None)
    watch.check(at_3, _fenced(3, 4))
    assert len(watch.violations.found) == 1 and watch.fenced_after_lost == {"g/m": 1}


def test_a_late_answer_fences_nobody_and_moves_no_epoch() -> None:
    """A replica that slept through a call answers it when it wakes; the member gave up on
    it and its client drops the answer: neither a fencing nor an epoch going back."""
    watch, registry, _ = _watch()
    at_5, at_6 = (Request(group_id="g", member_id="m", member_epoch=e) for e in (5, 6))
    watch.sending(at_5, "stream 1", (1, 1))
    watch.sending(at_5, "stream 2", (2, 1))  # gave up on the sleeping replica's stream
    watch.check(at_5, Response(member_epoch=6), (2, 1))
    watch.sending(at_6, "stream 2", (2, 2))
    watch.check(at_6, Response(member_epoch=6), (2, 2))
    watch.check(at_5, _fenced(5, 6), (1, 1))  # the sleeper wakes and answers call 1
    assert watch.violations.found == [] and watch.late_answers == 1 and watch.fenced_after_lost == {}
    # Two owners are still caught on a late answer.
    tp = TopicPartition("t", 0, "id")
    registry.listener("a").on_partitions_assigned(frozenset({tp}))
    registry.listener("b").on_partitions_assigned(frozenset({tp}))
    watch.sending(at_6, "stream 2", (2, 3))
    watch.sending(at_6, "stream 2", (2, 4))
    watch.check(at_6, Response(member_epoch=6), (2, 3))
    assert watch.violations.found == ["two owners: t-0 given to b while a holds it"]
