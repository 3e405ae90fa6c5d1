"""Draining a member (GroupAdmin.DrainMember), driven through `EngineHarness`.

Members follow the protocol as real clients do (`Fleet`): they use what a
response gives them, report what they own, and revoke what it no longer lists.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest

from regroup.reconciler import ApiError, ErrorCode, GroupConfig, GroupState, Topic
from regroup.reconciler.assignors import BUILTIN_ASSIGNORS, LeaderAssignor
from regroup.reconciler.client_assignment import install_assignment, prepare_assignment
from regroup.reconciler.context import ScheduleAssignment
from regroup.reconciler.drain import DRAINED, DRAINING, IN_SERVICE, DrainOutcome, drain_member, drain_state
from regroup.reconciler.messages import ConsumerGroupHeartbeat, InstallAssignment, PrepareAssignment
from regroup.reconciler.model import Assignment, ClientAssignor, Member, MemberMetadata, partition_count
from regroup.reconciler.records import (
    GroupMetadataRecord,
    MemberMetadataRecord,
    TargetAssignmentEpochRecord,
    TargetAssignmentMemberRecord,
)
from regroup.reconciler.target_assignment import compute_target_assignment, group_spec
from regroup.reconciler.topics import TopicsImage
from tests.support.engine import EngineHarness, beat, join

GROUP = "g"
#: The assignors that share partitions (the leader assignor hands out leadership only:
#: tests/unit/reconciler/test_leader.py).
PARTITION_ASSIGNORS = sorted(n for n in BUILTIN_ASSIGNORS if n != LeaderAssignor.name)


@dataclass
class Fleet:
    """Members of one group, each holding what the coordinator last gave it."""

    h: EngineHarness
    epochs: dict[str, int] = field(default_factory=dict)
    held: dict[str, Assignment] = field(default_factory=dict)
    joins: dict[str, ConsumerGroupHeartbeat] = field(default_factory=dict)

    def join(self, member_id: str, topics: tuple[str, ...] = ("foo", "bar"), **kwargs: object) -> None:
        self.joins[member_id] = join(GROUP, member_id, list(topics), **kwargs)
        resp = self.h.heartbeat(self.joins[member_id])
        self.epochs[member_id] = resp.member_epoch
        self.held[member_id] = resp.assignment or {}

    def beat(self, member_id: str) -> None:
        epoch = self.epochs[member_id]
        # Still at epoch 0 (a client-side group before its first target): join again.
        req = self.joins[member_id] if epoch == 0 else beat(GROUP, member_id, epoch, self.held[member_id])
        resp = self.h.heartbeat(req)
        self.epochs[member_id] = resp.member_epoch
        if resp.assignment is not None:
            self.held[member_id] = resp.assignment

    def leave(self, member_id: str) -> None:
        self.h.heartbeat(ConsumerGroupHeartbeat(GROUP, member_id, -1))
        del self.epochs[member_id], self.held[member_id]

    def settle(self, rounds: int = 10) -> None:
        for _ in range(rounds):
            for member_id in sorted(self.epochs):
                self.beat(member_id)
            self.h.advance(0)
            if self.h.groups[GROUP].state() is GroupState.STABLE:
                return
        raise AssertionError(f"not stable after {rounds} rounds")

    def drain(self, member_id: str = "", instance_id: str = "", undrain: bool = False) -> DrainOutcome:
        result = drain_member(self.h.groups.get(GROUP), GROUP, member_id, instance_id, undrain, self.h.ctx())
        self.h.apply(GROUP, result)
        return result.response

    def counts(self) -> dict[str, int]:
        return {m: partition_count(a) for m, a in self.held.items()}


def fleet(assignor: str = "uniform", foo: int = 6, bar: int = 3) -> Fleet:
    h = EngineHarness(config=GroupConfig())
    h.create_topic("foo", foo)
    h.create_topic("bar", bar)
    f = Fleet(h)
    for member_id in ("a", "b", "c"):
        f.join(member_id, server_assignor=assignor)
    f.settle()
    return f


def test_drain_refuses_bad_input_and_unknown_groups_and_members() -> None:
    f = fleet()
    group, ctx = f.h.groups[GROUP], f.h.ctx()
    cases: list[tuple[Mapping[str, object], ErrorCode, str]] = [
        ({"member_id": "", "instance_id": ""}, ErrorCode.INVALID_REQUEST, "got neither"),
        ({"member_id": "a", "instance_id": "i"}, ErrorCode.INVALID_REQUEST, "got both"),
        (
            {"member_id": "zz", "instance_id": ""},
            ErrorCode.UNKNOWN_MEMBER_ID,
            "Member zz is not a member of group g",
        ),
        ({"member_id": "", "instance_id": "nope"}, ErrorCode.UNKNOWN_MEMBER_ID, "has instance id nope"),
    ]
    for args, code, message in cases:
        with pytest.raises(ApiError) as e:
            drain_member(group, GROUP, str(args["member_id"]), str(args["instance_id"]), False, ctx)
        assert e.value.code is code and message in e.value.message, (args, e.value.message)
    with pytest.raises(ApiError) as e:
        drain_member(None, "other", "a", "", False, ctx)
    assert e.value.code is ErrorCode.GROUP_ID_NOT_FOUND and "other" in e.value.message
    with pytest.raises(ApiError) as e:
        drain_member(None, "", "a", "", False, ctx)
    assert e.value.code is ErrorCode.INVALID_REQUEST


def test_drain_records_the_flag_and_bumps_the_epoch_and_is_idempotent() -> None:
    f = fleet()
    group = f.h.groups[GROUP]
    epoch = group.group_epoch
    result = drain_member(group, GROUP, "b", "", False, f.h.ctx())
    assert result.response == DrainOutcome("b", DRAINING, epoch + 1)
    meta, bump = result.records
    assert isinstance(meta, MemberMetadataRecord) and meta.member_id == "b" and meta.metadata.draining
    assert meta.metadata == MemberMetadata(**{**_fields(group.members["b"].metadata), "draining": True})
    assert bump == GroupMetadataRecord(epoch + 1, group.metadata_hash, group.group_type)
    assert result.timers == (ScheduleAssignment(f.h.now_ms),)
    f.h.apply(GROUP, result)

    again = drain_member(f.h.groups[GROUP], GROUP, "b", "", False, f.h.ctx())
    assert again.records == () and again.timers == ()
    assert again.response == DrainOutcome("b", DRAINING, epoch + 1)

    # Undrain of a member in service: nothing either.
    in_service = drain_member(f.h.groups[GROUP], GROUP, "a", "", True, f.h.ctx())
    assert in_service.records == () and in_service.response == DrainOutcome("a", IN_SERVICE, epoch + 1)


def _fields(metadata: MemberMetadata) -> dict[str, object]:
    return {name: getattr(metadata, name) for name in MemberMetadata.__slots__}


@pytest.mark.parametrize("assignor", PARTITION_ASSIGNORS)
def test_a_drained_member_gives_everything_up_through_revocation_and_the_rest_stay_balanced(
    assignor: str,
) -> None:
    f = fleet(assignor)
    before = dict(f.held)
    assert f.counts() == {"a": 3, "b": 3, "c": 3}
    f.drain("b")
    group = f.h.groups[GROUP]
    assert drain_state(group.members["b"]) == DRAINING

    # b's next heartbeat asks it to revoke everything; nobody gets its partitions yet.
    f.beat("b")
    group = f.h.groups[GROUP]
    assert group.target_of("b") == {}
    b = group.members["b"]
    assert b.pending_revocation == before["b"] and not b.assigned and f.held["b"] == {}
    assert drain_state(b) == DRAINING
    for member_id in ("a", "c"):
        f.beat(member_id)
        owned = f.h.groups[GROUP].members[member_id]
        assert not any(set(owned.assigned.get(t, ())) & set(p) for t, p in b.pending_revocation.items()), (
            "a partition went to another member before b released it"
        )

    f.settle()
    group = f.h.groups[GROUP]
    assert drain_state(group.members["b"]) == DRAINED
    counts = f.counts()
    assert counts["b"] == 0 and counts["a"] + counts["c"] == 9 and abs(counts["a"] - counts["c"]) <= 1
    if assignor == "uniform":
        # Sticky: a and c kept everything they had and only took b's partitions.
        for member_id in ("a", "c"):
            for topic_id, partitions in before[member_id].items():
                assert partitions <= f.held[member_id].get(topic_id, frozenset())

    # Leaving once drained moves nothing: the others' targets stay as they are.
    targets = {m: group.target_of(m) for m in ("a", "c")}
    f.leave("b")
    f.h.advance(0)
    f.settle()
    group = f.h.groups[GROUP]
    assert {m: group.target_of(m) for m in ("a", "c")} == targets
    assert {m: f.held[m] for m in ("a", "c")} == targets


def test_undrain_puts_the_member_back_and_balances_again() -> None:
    f = fleet()
    f.drain("b")
    f.settle()
    assert f.counts()["b"] == 0
    outcome = f.drain("b", undrain=True)
    assert outcome.drain_state == IN_SERVICE
    f.settle()
    assert f.counts() == {"a": 3, "b": 3, "c": 3}
    assert not f.h.groups[GROUP].members["b"].draining


def test_a_member_that_owns_nothing_is_drained_at_once() -> None:
    f = fleet()
    f.join("d", ("unknown-topic",))
    f.settle()
    assert f.held["d"] == {}
    assert f.drain("d").drain_state == DRAINED


def test_heartbeats_keep_the_flag_and_a_static_replacement_inherits_it() -> None:
    h = EngineHarness(config=GroupConfig())
    h.create_topic("foo", 4)
    f = Fleet(h)
    f.join("a", ("foo",))
    f.join("s1", ("foo",), instance_id="i1")
    f.settle()
    assert f.drain(instance_id="i1").member_id == "s1"
    # A full heartbeat with every metadata field keeps the flag.
    resp = h.heartbeat(
        beat(
            GROUP,
            "s1",
            f.epochs["s1"],
            f.held["s1"],
            instance_id="i1",
            rebalance_timeout_ms=300_000,
            subscribed_topic_names=("foo",),
            client_id="cid",
        )
    )
    f.epochs["s1"] = resp.member_epoch
    if resp.assignment is not None:
        f.held["s1"] = resp.assignment
    assert h.groups[GROUP].members["s1"].draining
    f.settle()
    assert f.held["s1"] == {} and f.counts()["a"] == 4
    # The static member leaves temporarily and a new incarnation takes its instance id.
    h.heartbeat(ConsumerGroupHeartbeat(GROUP, "s1", -2, instance_id="i1"))
    del f.epochs["s1"], f.held["s1"]
    f.join("s2", ("foo",), instance_id="i1")
    group = h.groups[GROUP]
    assert "s1" not in group.members and group.members["s2"].draining
    f.settle()
    assert f.held["s2"] == {} and f.counts()["a"] == 4
    assert drain_state(h.groups[GROUP].members["s2"]) == DRAINED


@pytest.mark.parametrize("assignor", PARTITION_ASSIGNORS)
def test_no_assignor_sees_a_draining_member(assignor: str) -> None:
    image = TopicsImage([Topic("T", "t", 7)])
    subscribed = MemberMetadata(subscribed_topic_names=("t",))
    members = {
        m: Member(m, MemberMetadata(subscribed_topic_names=("t",), draining=m == "b"))
        for m in ("a", "b", "c")
    }
    members["a"] = Member("a", subscribed)
    current = {"b": {"T": frozenset({0, 1, 2})}, "a": {"T": frozenset({3, 4})}}
    spec = group_spec(members, current, image)
    assert set(spec.members) == {"a", "c"} and spec.is_homogeneous()
    assert spec.withheld == {"b": current["b"]}
    records, targets = compute_target_assignment(members, current, image, assignor, GroupConfig(), 5)
    assert targets["b"] == {}
    assert sorted(partition_count(targets[m]) for m in ("a", "c")) == [3, 4]
    member_records = [r for r in records if isinstance(r, TargetAssignmentMemberRecord)]
    assert [r.member_id for r in member_records] == sorted(r.member_id for r in member_records)
    assert {r.member_id: r.partitions for r in member_records}["b"] == {}
    assert records[-1] == TargetAssignmentEpochRecord(5, None)


def test_client_side_assignment_shows_a_draining_member_no_subscription_and_refuses_to_give_it_anything() -> (
    None
):
    h = EngineHarness(config=GroupConfig())
    h.create_topic("foo", 4)
    assignors = (ClientAssignor("x", 1, 1, version=1),)
    f = Fleet(h)
    f.join("a", ("foo",), client_assignors=assignors)
    f.join("b", ("foo",), client_assignors=assignors)
    f.drain("b")
    f.beat("a")  # a is chosen to compute the target for the new epoch
    group = h.groups[GROUP]
    assert group.computation is not None and group.computation.member_id == "a"
    prepared = prepare_assignment(group, PrepareAssignment(GROUP, "a", f.epochs["a"]), h.ctx())
    views = {v.member_id: v for v in prepared.response.members}
    assert views["b"].subscribed_topic_ids == frozenset() and views["a"].subscribed_topic_ids == {"foo-id"}
    h.apply(GROUP, prepared)
    group = h.groups[GROUP]
    epoch = prepared.response.group_epoch

    def install(members: tuple[tuple[str, Assignment], ...]) -> InstallAssignment:
        return InstallAssignment(GROUP, "a", f.epochs["a"], epoch, 0, "", members, {}, b"")

    with pytest.raises(ApiError) as e:
        install_assignment(
            group,
            install((("a", {"foo-id": frozenset({0, 1})}), ("b", {"foo-id": frozenset({2, 3})}))),
            h.ctx(),
        )
    assert e.value.code is ErrorCode.INVALID_ASSIGNMENT
    assert e.value.message == "member b is draining (GroupAdmin.DrainMember): it may be given nothing."
    installed = install_assignment(group, install((("a", {"foo-id": frozenset(range(4))}),)), h.ctx())
    h.apply(GROUP, installed)
    assert h.groups[GROUP].target_of("b") == {}
