"""nudge_reason: which members a change of their group concerns (members a heartbeat
would move now), for each state a member can be in."""

from __future__ import annotations

from dataclasses import replace

from regroup.reconciler import Group
from regroup.reconciler.model import Computation, MemberState
from regroup.reconciler.nudges import NudgeReason, nudge_reason
from tests.support.engine import EngineHarness, beat, join


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
