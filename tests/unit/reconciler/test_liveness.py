"""The session a heartbeat renews while the coordinator cannot store (reconciler/liveness.py)."""

from __future__ import annotations

from regroup.reconciler import ScheduleSessionTimeout, delete_group
from regroup.reconciler.liveness import NOTHING_IN_DOUBT, WriteInDoubt, renewed_session
from regroup.reconciler.membership import on_session_timeout
from regroup.reconciler.records import CurrentAssignmentRecord, MemberMetadataTombstone
from tests.support.engine import EngineHarness, beat, join


def _group_of_two() -> EngineHarness:
    h = EngineHarness()
    h.create_topic("orders", 4)
    h.heartbeat(join("g", "a", ["orders"]))
    h.heartbeat(join("g", "b", ["orders"]))
    return h


def test_a_member_at_its_epoch_gets_a_full_session_from_now() -> None:
    h = _group_of_two()
    epoch = h.groups["g"].members["a"].member_epoch
    h.now_ms = 10_000
    timer = renewed_session(h.groups["g"], "a", epoch, NOTHING_IN_DOUBT, h.ctx())
    assert timer == ScheduleSessionTimeout("a", 10_000 + h.config.session_timeout_ms)


def test_the_previous_epoch_is_renewed_too() -> None:
    """The member may not have heard the answer that moved it on."""
    h = EngineHarness()
    h.create_topic("orders", 2)
    h.heartbeat(join("g", "a", ["orders"]))
    h.grow_topic("orders", 4)  # a bump: the member moves to the new epoch, nothing to revoke
    a = h.groups["g"].members["a"]
    h.heartbeat(beat("g", "a", a.member_epoch, a.assigned))
    a = h.groups["g"].members["a"]
    assert 0 < a.previous_member_epoch < a.member_epoch
    assert renewed_session(h.groups["g"], "a", a.previous_member_epoch, NOTHING_IN_DOUBT, h.ctx())


def test_unknown_members_old_epochs_joins_and_leaves_are_not_renewed() -> None:
    h = _group_of_two()
    group = h.groups["g"]
    epoch = group.members["a"].member_epoch
    ctx = h.ctx()
    assert renewed_session(group, "nobody", epoch, NOTHING_IN_DOUBT, ctx) is None
    assert renewed_session(group, "a", epoch + 5, NOTHING_IN_DOUBT, ctx) is None
    for special in (0, -1, -2):
        assert renewed_session(group, "a", special, NOTHING_IN_DOUBT, ctx) is None
    assert renewed_session(None, "a", epoch, NOTHING_IN_DOUBT, ctx) is None


def test_a_member_the_write_in_doubt_removes_is_not_renewed() -> None:
    h = _group_of_two()
    group = h.groups["g"]
    fencing = on_session_timeout(group, "b", h.ctx())
    in_doubt = WriteInDoubt.of(fencing.records)
    assert in_doubt.may_have_removed("b") and not in_doubt.may_have_removed("a")
    b_epoch = group.members["b"].member_epoch
    a_epoch = group.members["a"].member_epoch
    assert renewed_session(group, "b", b_epoch, in_doubt, h.ctx()) is None
    assert renewed_session(group, "a", a_epoch, in_doubt, h.ctx()) is not None


def test_a_write_in_doubt_that_deletes_the_group_may_have_removed_everyone() -> None:
    h = EngineHarness()
    h.create_topic("orders", 1)
    h.heartbeat(join("g", "a", ["orders"]))
    h.heartbeat(beat("g", "a", -1))
    in_doubt = WriteInDoubt.of(delete_group(h.groups["g"]).records)
    assert in_doubt.removes_everyone and in_doubt.may_have_removed("anyone")


def test_writes_in_doubt_add_up() -> None:
    first = WriteInDoubt.of([MemberMetadataTombstone("a")])
    h = _group_of_two()
    step = CurrentAssignmentRecord.of(h.groups["g"].members["b"])
    second = WriteInDoubt.of([step])  # removes nobody
    both = first.plus(second).plus(WriteInDoubt.of([MemberMetadataTombstone("c")]))
    assert both.removed == {"a", "c"} and not both.removes_everyone
