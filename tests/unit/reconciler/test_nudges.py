"""nudge_reason: which members a change of their group concerns (members a heartbeat
would move now), for each state a member can be in."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from hypothesis import event, settings
from hypothesis.stateful import invariant

from regroup.reconciler import (
    ConsumerGroupHeartbeat,
    Context,
    Group,
    Record,
    consumer_group_heartbeat,
    replay_all,
)
from regroup.reconciler.model import Computation, Member, MemberState, union
from regroup.reconciler.nudges import NudgeReason, nudge_reason
from regroup.reconciler.records import CurrentAssignmentRecord
from regroup.reconciler.target_assignment import assignment_due, on_assignment_timer
from tests.support.depth import examples
from tests.support.engine import EngineHarness, beat, join, owned
from tests.support.group_machine import GROUP, GroupMachine, _norm


def _two_members() -> tuple[EngineHarness, str]:
    """a owns every partition, then b joins: a must revoke half, b waits for them."""
    h = EngineHarness()
    topic = h.create_topic("orders", 4)
    h.heartbeat(join("g", "a", ["orders"]))
    h.heartbeat(join("g", "b", ["orders"]))
    return h, topic


def _group(h: EngineHarness) -> Group:
    return h.groups["g"]


def test_a_deleted_group_and_a_removed_member_are_told() -> None:
    h, _ = _two_members()
    assert nudge_reason(None, "a") is NudgeReason.GROUP_DELETED
    assert nudge_reason(_group(h), "gone") is NudgeReason.MEMBER_REMOVED


def test_a_member_behind_the_target_epoch_is_told_its_target_moved() -> None:
    h, _ = _two_members()
    group = _group(h)
    a = group.members["a"]
    assert a.state is MemberState.STABLE and a.member_epoch < group.assignment_epoch
    assert nudge_reason(group, "a") is NudgeReason.TARGET_CHANGED


def test_a_member_revoking_is_not_told_and_its_waiting_peer_is_told_once_released() -> None:
    h, _ = _two_members()
    a = _group(h).members["a"]
    h.heartbeat(beat("g", "a", a.member_epoch, a.assigned))  # a learns it must revoke
    group = _group(h)
    assert group.members["a"].state is MemberState.UNREVOKED_PARTITIONS
    assert group.members["b"].state is MemberState.UNRELEASED_PARTITIONS
    assert nudge_reason(group, "a") is None  # only its own acknowledgement moves it
    assert nudge_reason(group, "b") is None  # nothing it waits for is free yet
    kept = group.members["a"].assigned
    h.heartbeat(beat("g", "a", group.members["a"].member_epoch, kept))  # acknowledges
    assert nudge_reason(_group(h), "b") is NudgeReason.PARTITIONS_RELEASED
    b = _group(h).members["b"]
    h.heartbeat(beat("g", "b", b.member_epoch, b.assigned))
    assert nudge_reason(_group(h), "b") is None and nudge_reason(_group(h), "a") is None


def test_a_member_waiting_for_partitions_of_an_older_target_is_told_its_target_moved() -> None:
    h, _ = _two_members()
    h.heartbeat(join("g", "c", ["orders"]))  # a third member: the target moves on again
    group = _group(h)
    b = group.members["b"]
    assert b.state is MemberState.UNRELEASED_PARTITIONS and b.member_epoch < group.assignment_epoch
    assert nudge_reason(group, "b") is NudgeReason.TARGET_CHANGED


def test_a_stable_member_at_its_target_is_not_told() -> None:
    h = EngineHarness()
    h.create_topic("orders", 4)
    h.heartbeat(join("g", "a", ["orders"]))
    assert _group(h).members["a"].is_reconciled_to(_group(h).assignment_epoch)
    assert nudge_reason(_group(h), "a") is None


def test_a_stable_member_holding_what_its_target_no_longer_has_is_told() -> None:
    h = EngineHarness()
    h.create_topic("orders", 4)
    h.heartbeat(join("g", "a", ["orders"]))
    group = _group(h)
    group.target["a"] = {}  # the same epoch, a smaller target (as a static member's replacement)
    assert nudge_reason(group, "a") is NudgeReason.TARGET_CHANGED


def test_the_member_chosen_to_compute_is_told_until_it_fetched_the_group() -> None:
    h = EngineHarness()
    h.create_topic("orders", 4)
    h.heartbeat(join("g", "a", ["orders"]))
    group = _group(h)
    group.computation = Computation("a", "my-assignor", deadline_ms=10_000)
    assert nudge_reason(group, "a") is NudgeReason.COMPUTE_ASSIGNMENT
    group.computation = replace(group.computation, prepared=object())  # type: ignore[arg-type]
    assert nudge_reason(group, "a") is None


# -- the rule against the engine (hypothesis) -----------------------------------------


def _plain_heartbeats(member: Member) -> list[ConsumerGroupHeartbeat]:
    """The heartbeats a well-behaved client of `member` may send next, as the coordinator
    knows it: at its epoch, saying what it owns (what it holds, plus, while it revokes,
    what it has not given up yet) or not saying it (incremental: owned unchanged)."""
    holds = member.assigned
    if member.state is MemberState.UNREVOKED_PARTITIONS:
        holds = union(holds, member.pending_revocation)
    return [
        ConsumerGroupHeartbeat(GROUP, member.member_id, member.member_epoch, instance_id=member.instance_id),
        ConsumerGroupHeartbeat(
            GROUP,
            member.member_id,
            member.member_epoch,
            instance_id=member.instance_id,
            owned_topic_partitions=owned(holds),
        ),
    ]


def _learnt(m: Member | CurrentAssignmentRecord) -> tuple[object, ...]:
    return (m.state, m.member_epoch, _norm(m.assigned), _norm(m.pending_revocation))


def _moves(member: Member, records: Sequence[Record]) -> bool:
    """Whether `records` move the member: a CurrentAssignmentRecord of it that changes
    what its client learns (epoch, state, partitions). One that changes only its
    previous epoch does not count: a member waiting since it joined writes one at its
    next heartbeat (previous epoch 0 -> its epoch), as Kafka's does, and its answer is
    the same as without it."""
    for record in records:
        if isinstance(record, CurrentAssignmentRecord) and record.member_id == member.member_id:
            if _learnt(record) != _learnt(member):
                return True
            event("nudge rule: a heartbeat writes the previous epoch only")
    return False


class NudgeRuleMachine(GroupMachine):
    """The engine's group state machine (tests/unit/reconciler/test_properties.py: joins,
    static members, leaves, crashes, lost responses, topic changes, subscription and
    assignor changes, time), checking after every step, for every member of the group:

    `nudge_reason(group, m) is None` implies that a heartbeat m's client may send now
    (its current epoch; owned partitions sent or not, and when sent, what the coordinator
    knows it holds; for a member revoking, that still includes the partitions being
    revoked, since only their acknowledgement moves it) produces no CurrentAssignmentRecord
    for m that changes its epoch, state or partitions (see `_moves`): the rule never leaves
    out a member a heartbeat would move, which is what makes a stream member learn a change
    at once instead of at its next interval.

    Excluded: members away (epoch -2, their next heartbeat is a rejoin). A group ahead of
    its target whose computation is due is checked as the assignment timer leaves it: any
    heartbeat would compute that target, but the runtime's timer fires at once when due,
    in a write that nudges (the engine harness fires it only when time advances).

    The other direction is allowed to fail (a needless nudge costs one heartbeat that
    writes nothing); it is only counted, by event()."""

    @invariant()
    def no_member_a_heartbeat_would_move_is_left_out(self) -> None:
        group = self.group
        if group is None:
            return
        # Not self.h.ctx(): it would draw a server-generated member id, changing the example.
        ctx = Context(now_ms=self.h.now_ms, config=self.h.config, image=self.h.image)
        if group.group_epoch > group.assignment_epoch and assignment_due(group, ctx):
            # The runtime's assignment timer fires at once when due (the harness's only when
            # time advances): check the group as it leaves it.
            timer = on_assignment_timer(group, ctx)
            if not timer.records:
                event("nudge rule: not checked, a due computation left for elsewhere")
                return
            event("nudge rule: checked after the due target computation")
            computed = replay_all(group.clone(), GROUP, timer.records)
            assert computed is not None
            group = computed
        for member in group.members.values():
            if member.member_epoch < 0:
                continue
            reason = nudge_reason(group, member.member_id)
            for request in _plain_heartbeats(member):
                result = consumer_group_heartbeat(group, request, ctx)
                moved = _moves(member, result.records)
                if reason is None:
                    assert not moved, (
                        f"nudge_reason says a heartbeat of {member.member_id} changes nothing, "
                        f"but {request} moves it: {result.records}\n{self._describe()}"
                    )
                    event(f"nudge rule: {member.state.name}, not nudged")
                elif moved:
                    event(f"nudge rule: {reason.name}, and the heartbeat moves it")
                else:
                    event(f"nudge rule: {reason.name}, but the heartbeat does not move it")


# GroupMachine's settings with fewer examples: about 11 s on a 2-core machine (a soak of 3,000 x 80
# steps, about 3 minutes, found nothing).
NudgeRuleMachine.TestCase.settings = settings(GroupMachine.TestCase.settings, max_examples=examples(200))
TestNudgeRuleMachine = NudgeRuleMachine.TestCase
