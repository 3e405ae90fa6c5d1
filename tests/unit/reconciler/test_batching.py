"""Batched target assignment (Kafka's KIP-1263): at most one computation per group per interval."""

from __future__ import annotations

from regroup.reconciler import GroupConfig, GroupState, Result, ScheduleAssignment
from regroup.reconciler.model import ClientAssignor
from regroup.reconciler.records import Record, TargetAssignmentEpochRecord, TargetAssignmentMemberRecord
from regroup.reconciler.target_assignment import (
    PendingTarget,
    install_computed_target,
    on_assignment_timer,
    pending_assignment,
)
from tests.support.engine import EngineHarness, beat, join


def harness() -> EngineHarness:
    h = EngineHarness(config=GroupConfig(assignment_interval_ms=1_000), now_ms=10_000)
    h.create_topic("foo", 4)
    return h


def settled() -> EngineHarness:
    """A group in which member a owns everything, its last computation long ago."""
    h = harness()
    assert h.heartbeat(join("g", "a", ["foo"])).assignment == {"foo-id": frozenset({0, 1, 2, 3})}
    h.now_ms += 60_000
    h.sessions.clear()
    return h


def test_first_bump_after_a_quiet_period_is_computed_at_once() -> None:
    h = settled()
    response = h.heartbeat(join("g", "b", ["foo"]))
    assert response.member_epoch == 2
    assert TargetAssignmentEpochRecord(2, h.now_ms) in h.last_records
    assert h.groups["g"].last_assignment_ms == h.now_ms


def test_a_bump_within_the_interval_is_deferred_to_a_timer() -> None:
    h = settled()
    h.heartbeat(join("g", "b", ["foo"]))
    h.now_ms += 200

    response = h.heartbeat(join("g", "c", ["foo"]))

    group = h.groups["g"]
    assert (group.group_epoch, group.assignment_epoch) == (3, 2)
    assert group.state() is GroupState.ASSIGNING
    assert not any(
        isinstance(r, TargetAssignmentEpochRecord | TargetAssignmentMemberRecord) for r in h.last_records
    )
    assert (response.member_epoch, response.assignment) == (2, {})
    assert h.assignments == {"g": h.now_ms + 800}


def test_the_timer_computes_the_target_and_members_reconcile_to_it() -> None:
    h = settled()
    h.heartbeat(join("g", "b", ["foo"]))
    h.now_ms += 200
    h.heartbeat(join("g", "c", ["foo"]))
    h.heartbeat(join("g", "d", ["foo"]))  # another bump in the same interval: still one computation

    h.advance(799)
    assert h.groups["g"].assignment_epoch == 2
    h.advance(1)
    group = h.groups["g"]
    assert (group.group_epoch, group.assignment_epoch) == (4, 4)
    assert sorted(len(group.target_of(m).get("foo-id", ())) for m in "abcd") == [1, 1, 1, 1]

    for _ in range(3):
        for member_id in "abcd":
            member = group.members[member_id]
            h.heartbeat(beat("g", member_id, member.member_epoch, member.assigned))
    assert h.groups["g"].state() is GroupState.STABLE


def test_a_heartbeat_after_the_interval_computes_without_waiting_for_the_timer() -> None:
    h = settled()
    h.heartbeat(join("g", "b", ["foo"]))
    h.now_ms += 1_500
    h.heartbeat(join("g", "c", ["foo"]))
    assert h.groups["g"].assignment_epoch == 3


def test_zero_interval_computes_on_every_bump() -> None:
    h = EngineHarness()
    h.create_topic("foo", 2)
    h.heartbeat(join("g", "a", ["foo"]))
    h.heartbeat(join("g", "b", ["foo"]))
    assert h.groups["g"].assignment_epoch == 2
    assert not h.assignments


def test_schedule_assignment_is_a_timer_op() -> None:
    assert ScheduleAssignment(5).deadline_ms == 5


def test_a_big_group_leaves_its_target_to_the_assignment_timer() -> None:
    h = EngineHarness(config=GroupConfig(inline_assignment_max_partitions=3), now_ms=5_000)
    h.create_topic("foo", 4)  # more partitions than may be assigned inside a heartbeat

    response = h.heartbeat(join("g", "a", ["foo"]))

    assert h.groups["g"].assignment_epoch == 0
    # Epoch 0 still: the member has no epoch yet and keeps joining until it gets one.
    assert (response.member_epoch, response.assignment) == (0, {})
    assert h.assignments == {"g": 5_000}  # due at once, but off the heartbeat
    h.advance(0)
    assert h.groups["g"].assignment_epoch == 1
    again = h.heartbeat(join("g", "a", ["foo"]))
    assert (again.member_epoch, again.assignment) == (1, {"foo-id": frozenset({0, 1, 2, 3})})


def test_a_small_group_is_still_assigned_inside_the_heartbeat() -> None:
    h = EngineHarness(config=GroupConfig(inline_assignment_max_partitions=4))
    h.create_topic("foo", 4)
    assert h.heartbeat(join("g", "a", ["foo"])).assignment == {"foo-id": frozenset({0, 1, 2, 3})}


def test_members_waiting_for_partitions_are_told_to_heartbeat_sooner() -> None:
    h = EngineHarness()
    h.create_topic("foo", 2)
    a = h.heartbeat(join("g", "a", ["foo"]))
    assert a.heartbeat_interval_ms == 5_000  # stable: the configured interval

    b = h.heartbeat(join("g", "b", ["foo"]))  # waits for a to release a partition
    assert h.groups["g"].members["b"].state.name == "UNRELEASED_PARTITIONS"
    assert b.heartbeat_interval_ms == 1_250

    revoking = h.heartbeat(beat("g", "a", a.member_epoch))  # asked to revoke: normal interval
    assert revoking.heartbeat_interval_ms == 5_000
    h.heartbeat(beat("g", "a", revoking.member_epoch, h.groups["g"].members["a"].assigned))
    settled_b = h.heartbeat(beat("g", "b", b.member_epoch))
    assert (settled_b.assignment, settled_b.heartbeat_interval_ms) == ({"foo-id": frozenset({1})}, 5_000)


def test_a_member_behind_a_pending_target_keeps_the_normal_interval() -> None:
    h = settled()
    h.heartbeat(join("g", "b", ["foo"]))
    h.now_ms += 200
    c = h.heartbeat(join("g", "c", ["foo"]))  # the target for c's epoch is not computed yet
    assert c.heartbeat_interval_ms == 5_000


# -- a target computed elsewhere, installed later (offloaded, KIP-1263) ------------------


def offloaded() -> tuple[EngineHarness, list[Record]]:
    """Members a, b and c; a target for epoch 4 computed from that read but not installed."""
    h = EngineHarness(config=GroupConfig(inline_assignment_max_partitions=1), now_ms=10_000)
    h.create_topic("foo", 6)
    for member_id in ("a", "b", "c"):
        h.heartbeat(join("g", member_id, ["foo"]))
    pending = pending_assignment(h.groups["g"], h.ctx())
    assert pending is not None
    return h, pending.compute(h.config)


def test_a_target_computed_elsewhere_is_installed_as_computed() -> None:
    h, records = offloaded()
    result = install_computed_target(h.groups["g"], records, h.ctx())
    assert (result.response, result.records, result.timers) == (True, tuple(records), ())


def test_members_that_left_meanwhile_get_no_target_and_the_next_computation_is_scheduled() -> None:
    h, records = offloaded()
    h.heartbeat(beat("g", "b", -1))
    result = install_computed_target(h.groups["g"], records, h.ctx())
    assert result.response
    named = [r.member_id for r in result.records if isinstance(r, TargetAssignmentMemberRecord)]
    assert named == ["a", "c"]
    assert result.timers == (ScheduleAssignment(h.now_ms),)  # the leave moved the group epoch on
    h.apply("g", result)
    assert sorted(h.groups["g"].target) == ["a", "c"]


def test_a_static_member_replaced_meanwhile_gets_the_target_computed_again() -> None:
    """A static member's replacement (same instance id) moves no group epoch and inherits the
    old target. Installed, the computation would lose the departed member's new target and
    could overlap the replacement's: it is computed again for the members there now. (Found
    by the offloaded state machine: partitions given to nobody, or two members each waiting
    for the other's, for ever.)"""
    h = EngineHarness(config=GroupConfig(inline_assignment_max_partitions=1), now_ms=10_000)
    h.create_topic("foo", 6)
    h.heartbeat(join("g", "a", ["foo"]))
    h.heartbeat(join("g", "b", ["foo"], instance_id="s-b"))
    h.heartbeat(join("g", "c", ["foo"]))
    pending = pending_assignment(h.groups["g"], h.ctx())
    assert pending is not None
    records = pending.compute(h.config)
    epoch = h.groups["g"].group_epoch
    h.heartbeat(beat("g", "b", -2, instance_id="s-b"))  # away for a restart
    h.heartbeat(join("g", "b2", ["foo"], instance_id="s-b"))  # its replacement takes its place
    group = h.groups["g"]
    assert group.group_epoch == epoch and sorted(group.members) == ["a", "b2", "c"]

    result = install_computed_target(group, records, h.ctx())
    assert (result.response, result.records, result.timers) == (False, (), (ScheduleAssignment(h.now_ms),))
    again = pending_assignment(group, h.ctx())
    assert again is not None
    h.apply("g", install_computed_target(group, again.compute(h.config), h.ctx()))
    targets = [p for t in h.groups["g"].target.values() for ps in t.values() for p in ps]
    assert sorted(targets) == [0, 1, 2, 3, 4, 5]  # every partition, once
    assert sorted(h.groups["g"].target) == ["a", "b2", "c"]


def test_a_target_is_not_installed_over_a_newer_one_or_into_a_client_side_group() -> None:
    h, records = offloaded()
    h.apply("g", install_computed_target(h.groups["g"], records, h.ctx()))
    assert install_computed_target(h.groups["g"], records, h.ctx()).response is False  # already there
    assert install_computed_target(None, records, h.ctx()).response is False  # the group is gone

    h, records = offloaded()
    for member_id in ("a", "b", "c"):
        h.heartbeat(beat("g", member_id, -1))
    client_side = (ClientAssignor("sticky", 0, 1),)
    h.heartbeat(join("g", "d", ["foo"], client_assignors=client_side))
    assert install_computed_target(h.groups["g"], records, h.ctx()).response is False


def test_the_assignment_timers_rules_in_one_function() -> None:
    """on_assignment_timer: the runtime and the engine harness both run it."""
    h = settled()
    h.heartbeat(join("g", "b", ["foo"]))
    h.now_ms += 200
    h.heartbeat(join("g", "c", ["foo"]))  # deferred: within the interval
    group = h.groups["g"]

    early = on_assignment_timer(group, h.ctx())
    assert (early.response, early.records, early.timers) == (False, (), (ScheduleAssignment(h.now_ms + 800),))
    h.now_ms += 800
    assert on_assignment_timer(group, h.ctx(), computing=True) == Result(False)
    inline = on_assignment_timer(group, h.ctx())
    assert inline.response is True and TargetAssignmentEpochRecord(3, h.now_ms) in inline.records
    assert on_assignment_timer(None, h.ctx()) == Result(False)

    h.config = GroupConfig(assignment_interval_ms=1_000, inline_assignment_max_partitions=3)
    offloaded = on_assignment_timer(group, h.ctx())
    assert isinstance(offloaded.response, PendingTarget) and offloaded.records == ()
    assert offloaded.response.group_epoch == 3
