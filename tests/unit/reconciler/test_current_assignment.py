"""Transitions of `reconcile`, Kafka's CurrentAssignmentBuilder, one test per transition.

Every test builds a member, a target and the owners of the partitions, then
asserts the whole resulting member: state, epochs, assigned and pending.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from regroup.reconciler import ErrorCode, Group, Member, MemberState, replay
from regroup.reconciler.current_assignment import PartitionEpoch, reconcile
from regroup.reconciler.errors import FencedMemberEpoch
from regroup.reconciler.model import Assignment, IllegalStateError, MemberMetadata, make_assignment
from regroup.reconciler.records import CurrentAssignmentRecord, MemberMetadataRecord

T1 = "t1-id"
T2 = "t2-id"

STABLE = MemberState.STABLE
UNREVOKED = MemberState.UNREVOKED_PARTITIONS
UNRELEASED = MemberState.UNRELEASED_PARTITIONS


def parts(t1: Iterable[int] = (), t2: Iterable[int] = ()) -> Assignment:
    """Partitions of the two topics, by id."""
    return make_assignment([(T1, t1), (T2, t2)])


def member(
    state: MemberState,
    epoch: int,
    previous: int,
    assigned: Assignment,
    pending: Assignment | None = None,
) -> Member:
    return Member(
        member_id="m",
        metadata=MemberMetadata(subscribed_topic_names=("t1", "t2")),
        state=state,
        member_epoch=epoch,
        previous_member_epoch=previous,
        assigned=assigned,
        pending_revocation=pending or {},
    )


def every_partition_at(epoch: int) -> PartitionEpoch:
    return lambda _topic_id, _partition: epoch


FREE = every_partition_at(-1)


def owned_at(epoch: int, owned: Assignment) -> PartitionEpoch:
    """The partitions in `owned` belong to some member at `epoch`; the rest are free."""
    return lambda topic_id, partition: epoch if partition in owned.get(topic_id, ()) else -1


# -- STABLE ------------------------------------------------------------------


def test_stable_to_stable() -> None:
    current = member(STABLE, 10, 10, parts({1, 2, 3}, {4, 5, 6}))

    result = reconcile(current, 11, parts({1, 2, 3}, {4, 5, 6}), every_partition_at(10), None)

    assert result == member(STABLE, 11, 10, parts({1, 2, 3}, {4, 5, 6}))


def test_stable_to_stable_with_new_partitions() -> None:
    current = member(STABLE, 10, 10, parts({1, 2, 3}, {4, 5, 6}))

    result = reconcile(current, 11, parts({1, 2, 3, 4}, {4, 5, 6, 7}), FREE, None)

    assert result == member(STABLE, 11, 10, parts({1, 2, 3, 4}, {4, 5, 6, 7}))


def test_stable_at_target_epoch_is_left_alone() -> None:
    current = member(STABLE, 11, 10, parts({1, 2, 3}, {4, 5, 6}))

    assert reconcile(current, 11, parts({1, 2, 3}, {4, 5, 6}), FREE, None) is current


def test_stable_to_unrevoked_partitions() -> None:
    current = member(STABLE, 10, 10, parts({1, 2, 3}, {4, 5, 6}))

    result = reconcile(current, 11, parts({2, 3, 4}, {5, 6, 7}), FREE, None)

    # Revoke first: the member stays at its epoch and gets nothing new (4 and 7 are free but withheld).
    assert result == member(UNREVOKED, 10, 10, parts({2, 3}, {5, 6}), pending=parts({1}, {4}))


def test_stable_to_unreleased_partitions() -> None:
    current = member(STABLE, 10, 10, parts({1, 2, 3}, {4, 5, 6}))

    result = reconcile(current, 11, parts({1, 2, 3, 4}, {4, 5, 6, 7}), every_partition_at(10), None)

    assert result == member(UNRELEASED, 11, 10, parts({1, 2, 3}, {4, 5, 6}))


def test_stable_to_unreleased_partitions_when_revoked_partitions_already_dropped() -> None:
    # The member already dropped t2-6 (owned omits it): no revocation round, it moves on to
    # epoch 11 but t2-7 is still held by another member.
    current = member(STABLE, 10, 10, parts({1, 2, 3}, {4, 5, 6}))
    others = owned_at(10, parts(t2={7}))

    result = reconcile(current, 11, parts({1, 2, 3}, {4, 5, 7}), others, parts({1, 2, 3}, {4, 5}))

    assert result == member(UNRELEASED, 11, 10, parts({1, 2, 3}, {4, 5}))


def test_stable_to_stable_when_revoked_partitions_already_dropped() -> None:
    # Owned given without the partitions to revoke: straight to the new assignment.
    current = member(STABLE, 10, 10, parts({1, 2, 3}, {4, 5, 6}))

    result = reconcile(current, 11, parts({2, 3, 4}, {5, 6, 7}), FREE, parts({2, 3}, {5, 6}))

    assert result == member(STABLE, 11, 10, parts({2, 3, 4}, {5, 6, 7}))


def test_stable_with_empty_owned_goes_straight_to_assignment() -> None:
    current = member(STABLE, 10, 10, parts({1, 2, 3}, {4, 5, 6}))

    result = reconcile(current, 11, parts({3, 4}, {6}), FREE, {})

    assert result == member(STABLE, 11, 10, parts({3, 4}, {6}))


def test_stable_at_target_epoch_revokes_topics_missing_from_target() -> None:
    # KAFKA-19431: the caller strips unsubscribed topics from the target; a member already
    # at the target epoch must still give them up.
    current = member(STABLE, 10, 10, parts({1, 2, 3}, {4, 5, 6}))

    result = reconcile(current, 10, parts(t2={4, 5, 6}), FREE, parts({1, 2, 3}, {4, 5, 6}))

    assert result == member(UNREVOKED, 10, 10, parts(t2={4, 5, 6}), pending=parts({1, 2, 3}))


# -- UNREVOKED_PARTITIONS ----------------------------------------------------


def test_unrevoked_partitions_to_stable() -> None:
    current = member(UNREVOKED, 10, 10, parts({2, 3}, {5, 6}), pending=parts({1}, {4}))

    result = reconcile(current, 11, parts({2, 3}, {5, 6}), FREE, parts({2, 3}, {5, 6}))

    assert result == member(STABLE, 11, 10, parts({2, 3}, {5, 6}))


@pytest.mark.parametrize(
    "owned",
    [
        pytest.param(None, id="owned-not-sent"),
        pytest.param(parts({1, 2, 3}, {5, 6}), id="still-owns-t1-1"),
        pytest.param(parts({2, 3}, {4, 5, 6}), id="still-owns-t2-4"),
        pytest.param(parts(t2={4}), id="owns-only-a-revoked-one"),
    ],
)
def test_remains_in_unrevoked_partitions(owned: Assignment | None) -> None:
    current = member(UNREVOKED, 10, 10, parts({2, 3}, {5, 6}), pending=parts({1}, {4}))

    assert reconcile(current, 12, parts({3}, {6}), FREE, owned) is current


def test_unrevoked_partitions_to_unrevoked_partitions() -> None:
    # The revocation is acknowledged, but the target moved on meanwhile: a new revocation round.
    current = member(UNREVOKED, 10, 10, parts({2, 3}, {5, 6}), pending=parts({1}, {4}))

    result = reconcile(current, 12, parts({3}, {6}), FREE, parts({2, 3}, {5, 6}))

    assert result == member(UNREVOKED, 10, 10, parts({3}, {6}), pending=parts({2}, {5}))


@pytest.mark.parametrize("target_epoch", [10, 11, 12, 13])
def test_no_epoch_bump_after_revocation(target_epoch: int) -> None:
    # KAFKA-19974: Kafka used to go to memberEpoch + 1 here, which could let two members own
    # one partition at the same epoch. The member keeps its epoch until it is fully revoked.
    current = member(UNREVOKED, 10, 9, parts({2, 3}, {5, 6}), pending=parts({1}, {4}))

    result = reconcile(current, target_epoch, parts({3}, {6}), FREE, parts({2, 3}, {5, 6}))

    assert result == member(UNREVOKED, 10, 10, parts({3}, {6}), pending=parts({2}, {5}))


def test_unrevoked_partitions_to_unreleased_partitions() -> None:
    current = member(UNREVOKED, 10, 10, parts({2, 3}, {5, 6}), pending=parts({1}, {4}))
    others = owned_at(10, parts({4}, {7}))

    result = reconcile(current, 11, parts({2, 3, 4}, {5, 6, 7}), others, parts({2, 3}, {5, 6}))

    assert result == member(UNRELEASED, 11, 10, parts({2, 3}, {5, 6}))


def test_unrevoked_partitions_to_stable_with_own_pending_revocation_reassigned() -> None:
    # KAFKA-19449: t1-4 is still registered to this very member (pending revocation) and
    # comes back in the new target. It is not "unreleased": the member takes it back.
    current = member(UNREVOKED, 10, 10, parts({2, 3}, {5, 6}), pending=parts({4}))
    own = owned_at(10, parts({2, 3, 4}, {5, 6}))

    result = reconcile(current, 12, parts({2, 3, 4}, {5, 6, 7}), own, parts({2, 3}, {5, 6}))

    assert result == member(STABLE, 12, 10, parts({2, 3, 4}, {5, 6, 7}))


def test_own_pending_revocation_reassigned_keeps_single_ownership_at_new_epoch() -> None:
    # KAFKA-16147: replaying the member that took back its pending partition must register
    # that partition at the new epoch (it was lost once, allowing a double assignment).
    group = Group("g")
    current = member(UNREVOKED, 10, 10, parts({2, 3}), pending=parts({4}))
    replay(group, MemberMetadataRecord.of(current))
    replay(group, CurrentAssignmentRecord.of(current))
    assert [group.partition_epoch(T1, p) for p in (2, 3, 4, 5)] == [10, 10, 10, -1]

    updated = reconcile(current, 12, parts({2, 3, 4}), group.partition_epoch, parts({2, 3}))
    replay(group, CurrentAssignmentRecord.of(updated))

    assert updated == member(STABLE, 12, 10, parts({2, 3, 4}))
    assert [group.partition_epoch(T1, p) for p in (2, 3, 4, 5)] == [12, 12, 12, -1]


def test_remains_in_unrevoked_partitions_strips_unsubscribed_topics() -> None:
    # KAFKA-19431: the member unsubscribed from t1 while it still owns partitions to revoke.
    # t1 leaves its assignment at once (into pending revocation), at the same epoch.
    current = member(UNREVOKED, 10, 10, parts({2, 3}, {5, 6}), pending=parts({1}, {4}))

    result = reconcile(
        current, 12, parts(t2={6, 7}), FREE, parts({1, 2, 3}, {4, 5, 6}), subscribed=frozenset({T2})
    )

    assert result == member(UNREVOKED, 10, 10, parts(t2={5, 6}), pending=parts({1, 2, 3}, {4}))


def test_remains_in_unrevoked_partitions_when_subscription_keeps_every_topic() -> None:
    current = member(UNREVOKED, 10, 10, parts({2, 3}, {5, 6}), pending=parts({1}, {4}))

    result = reconcile(current, 12, parts({3}, {6}), FREE, None, subscribed=frozenset({T1, T2}))

    assert result is current


# -- UNRELEASED_PARTITIONS ---------------------------------------------------


def test_unreleased_partitions_to_stable() -> None:
    current = member(UNRELEASED, 11, 11, parts({2, 3}, {5, 6}))

    result = reconcile(current, 12, parts({2, 3}, {5, 6}), every_partition_at(10), None)

    assert result == member(STABLE, 12, 11, parts({2, 3}, {5, 6}))


def test_unreleased_partitions_to_stable_with_new_partitions() -> None:
    current = member(UNRELEASED, 11, 11, parts({2, 3}, {5, 6}))

    result = reconcile(current, 11, parts({2, 3, 4}, {5, 6, 7}), FREE, None)

    assert result == member(STABLE, 11, 11, parts({2, 3, 4}, {5, 6, 7}))


def test_unreleased_partitions_to_unreleased_partitions() -> None:
    current = member(UNRELEASED, 11, 11, parts({2, 3}, {5, 6}))

    result = reconcile(current, 11, parts({2, 3, 4}, {5, 6, 7}), every_partition_at(10), None)

    assert result == current


def test_unreleased_partitions_to_unreleased_partitions_with_some_released() -> None:
    # t1-4 was released, t2-7 is still held: the member takes what it can and keeps waiting.
    current = member(UNRELEASED, 11, 11, parts({2, 3}, {5, 6}))
    others = owned_at(10, parts(t2={7}))

    result = reconcile(current, 11, parts({2, 3, 4}, {5, 6, 7}), others, None)

    assert result == member(UNRELEASED, 11, 11, parts({2, 3, 4}, {5, 6}))


def test_unreleased_partitions_to_unrevoked_partitions() -> None:
    current = member(UNRELEASED, 11, 11, parts({2, 3}, {5, 6}))

    result = reconcile(current, 12, parts({3}, {6}), every_partition_at(10), None)

    assert result == member(UNREVOKED, 11, 11, parts({3}, {6}), pending=parts({2}, {5}))


# -- UNKNOWN -----------------------------------------------------------------


@pytest.mark.parametrize(
    "owned",
    [pytest.param(None, id="owned-not-sent"), pytest.param(parts({3}), id="owns-partitions")],
)
def test_unknown_state_fences_a_member_that_may_own_partitions(owned: Assignment | None) -> None:
    current = member(MemberState.UNKNOWN, 11, 11, parts({3}, {6}), pending=parts({2}, {5}))

    with pytest.raises(FencedMemberEpoch) as raised:
        reconcile(current, 12, parts({3}, {6}), every_partition_at(10), owned)

    assert raised.value.code is ErrorCode.FENCED_MEMBER_EPOCH
    assert raised.value.message == (
        "The consumer group member is in an unknown state. "
        "The member must abandon all its partitions and rejoin."
    )


def test_unknown_state() -> None:
    # A state byte from a newer version decodes to UNKNOWN; the member rejoins owning nothing
    # and is reconciled from scratch to the target epoch.
    current = member(MemberState.decode(42), 11, 11, parts({3}, {6}), pending=parts({2}, {5}))
    assert current.state is MemberState.UNKNOWN

    result = reconcile(current, 12, parts({3}, {6}), every_partition_at(11), {})

    assert result == member(STABLE, 12, 11, parts({3}, {6}))


def test_a_step_to_a_new_epoch_with_the_same_partitions_moves_their_epochs_only() -> None:
    # The frequent step of a big group's members: same assigned and pending partitions,
    # new epoch. Replay takes a shortcut for it; the result must be the general path's.
    group = Group("g")
    current = member(UNREVOKED, 10, 10, parts({2, 3}, {5}), pending=parts({4}))
    replay(group, MemberMetadataRecord.of(current))
    replay(group, CurrentAssignmentRecord.of(current))

    stepped = member(UNREVOKED, 12, 10, parts({2, 3}, {5}), pending=parts({4}))
    replay(group, CurrentAssignmentRecord.of(stepped))

    assert group.members["m"] == stepped
    assert [group.partition_epoch(T1, p) for p in (1, 2, 3, 4)] == [-1, 12, 12, 12]
    assert group.partition_epoch(T2, 5) == 12
    # Still owned: another member cannot claim one of them.
    other = Member(member_id="o", member_epoch=12, assigned=parts({3}))
    replay(group, MemberMetadataRecord.of(other))
    with pytest.raises(IllegalStateError):
        replay(group, CurrentAssignmentRecord.of(other))
    # And the member gives them all up as usual afterwards.
    replay(group, CurrentAssignmentRecord.of(member(STABLE, 13, 12, parts())))
    assert [group.partition_epoch(T1, p) for p in (2, 3, 4)] == [-1, -1, -1]
    assert group.partition_epoch(T2, 5) == -1
