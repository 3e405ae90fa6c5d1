"""assign_target: which members get a target record after an assignor runs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import pytest

from regroup.reconciler import Topic
from regroup.reconciler.assignors import GroupAssignment, GroupSpec, MemberSpec, SubscriptionType
from regroup.reconciler.context import GroupConfig
from regroup.reconciler.model import EMPTY_ASSIGNMENT, Assignment, ClientAssignor, Member, MemberMetadata
from regroup.reconciler.records import Record, TargetAssignmentEpochRecord, TargetAssignmentMemberRecord
from regroup.reconciler.target_assignment import assign_target, group_spec, pending_target, target_after
from regroup.reconciler.topics import TopicsImage
from tests.support.engine import EngineHarness, beat, join

TOPIC = Topic("t-id", "t", 8)
KEPT: Assignment = {"t-id": frozenset({0, 1})}


@dataclass
class FixedAssignor:
    """Returns a fixed result, whatever the spec."""

    result: Mapping[str, Assignment]
    name: str = "fixed"

    def assign(self, spec: GroupSpec) -> Mapping[str, Assignment]:
        return self.result if isinstance(self.result, GroupAssignment) else dict(self.result)


def spec(currents: dict[str, Assignment], order: list[str] | None = None) -> GroupSpec:
    ids = frozenset({TOPIC.topic_id})
    members = {m: MemberSpec(m, None, None, ids, currents[m]) for m in order or sorted(currents)}
    return GroupSpec(members=members, topics={TOPIC.topic_id: TOPIC})


def run(
    currents: dict[str, Assignment], result: Mapping[str, Assignment], order: list[str] | None = None
) -> tuple[list[Record], Mapping[str, Assignment]]:
    config = replace(GroupConfig(), assignors={"fixed": FixedAssignor(result)})
    records, targets = assign_target(spec(currents, order), "fixed", config, group_epoch=7, now_ms=5)
    return records, targets


def test_only_changed_targets_get_records_in_member_id_order() -> None:
    equal_copy = {"t-id": frozenset({2, 3})}
    currents = {"d": {"t-id": frozenset({4})}, "a": KEPT, "c": {"t-id": frozenset({2, 3})}, "b": {}}
    result = {"a": KEPT, "b": {"t-id": frozenset({5})}, "c": equal_copy, "d": {"t-id": frozenset({4, 6})}}

    records, targets = run(currents, result)

    # a: the very object; c: an equal copy; neither is recorded.
    assert records == [
        TargetAssignmentMemberRecord("b", {"t-id": frozenset({5})}),
        TargetAssignmentMemberRecord("d", {"t-id": frozenset({4, 6})}),
        TargetAssignmentEpochRecord(7, 5),
    ]
    assert targets == result


CURRENTS: dict[str, Assignment] = {
    "d": {"t-id": frozenset({4})},
    "a": KEPT,
    "c": {"t-id": frozenset({2, 3})},
    "b": {},
}
RESULT: dict[str, Assignment] = {
    "a": KEPT,
    "b": {"t-id": frozenset({5})},
    "c": {"t-id": frozenset({2, 3})},
    "d": {"t-id": frozenset({4, 6})},
}
CHANGED = [
    TargetAssignmentMemberRecord("b", {"t-id": frozenset({5})}),
    TargetAssignmentMemberRecord("d", {"t-id": frozenset({4, 6})}),
    TargetAssignmentEpochRecord(7, 5),
]


@pytest.mark.parametrize(
    ("spec_order", "result_order"),
    [
        (["a", "b", "c", "d"], ["a", "b", "c", "d"]),  # the coordinator's case: no dict is built
        (["d", "b", "a", "c"], ["d", "b", "a", "c"]),  # the spec's order, not id order
        (["a", "b", "c", "d"], ["c", "a", "d", "b"]),  # another order: read as a mapping
    ],
)
def test_a_group_assignment_gives_the_same_records_in_member_id_order_whatever_its_order(
    spec_order: list[str], result_order: list[str]
) -> None:
    result = GroupAssignment(result_order, [RESULT[m] for m in result_order])

    records, targets = run(CURRENTS, result, spec_order)

    assert records == CHANGED
    assert targets == RESULT


def test_group_assignment_reads_as_a_mapping() -> None:
    result = GroupAssignment(["b", "a"], [KEPT, EMPTY_ASSIGNMENT])

    assert result == {"a": EMPTY_ASSIGNMENT, "b": KEPT}
    assert {"a": EMPTY_ASSIGNMENT, "b": KEPT} == result  # noqa: SIM300 - the reflected compare
    assert result != {"b": KEPT}
    assert list(result) == ["b", "a"]
    assert len(result) == 2
    assert result["b"] is KEPT
    assert result.get("zz") is None
    assert "a" in result
    assert "GroupAssignment" in repr(result)
    with pytest.raises(ValueError, match="2 member ids but 1 targets"):
        GroupAssignment(["a", "b"], [KEPT])


def test_target_after_finds_a_members_new_target_in_the_records() -> None:
    records, _ = run(CURRENTS, RESULT)

    assert target_after(records, "b", {}) == {"t-id": frozenset({5})}
    assert target_after(records, "d", {}) == {"t-id": frozenset({4, 6})}
    assert target_after(records, "a", KEPT) is KEPT  # unchanged
    assert target_after(records, "zz", EMPTY_ASSIGNMENT) is EMPTY_ASSIGNMENT
    assert target_after([TargetAssignmentEpochRecord(7, 5)], "a", KEPT) is KEPT


def test_members_an_assignor_leaves_out_get_an_empty_target() -> None:
    currents = {"a": KEPT, "b": {"t-id": frozenset({2})}, "c": {}}

    records, targets = run(currents, {"a": KEPT})

    assert records == [TargetAssignmentMemberRecord("b", EMPTY_ASSIGNMENT), TargetAssignmentEpochRecord(7, 5)]
    assert targets == {"a": KEPT, "b": EMPTY_ASSIGNMENT, "c": EMPTY_ASSIGNMENT}


def test_group_spec_states_the_subscription_type_and_orders_members_by_id() -> None:
    image = TopicsImage([TOPIC, Topic("u-id", "u", 2)])
    both = ("t", "u")
    same_ids = ("t", "u", "no-such-topic")  # another tuple, the same topic ids

    homogeneous = group_spec(
        {
            "b": Member("b", MemberMetadata(subscribed_topic_names=both)),
            "a": Member("a", MemberMetadata(subscribed_topic_names=same_ids)),
        },
        {},
        image,
    )
    heterogeneous = group_spec(
        {
            "a": Member("a", MemberMetadata(subscribed_topic_names=both)),
            "b": Member("b", MemberMetadata(subscribed_topic_names=("t",))),
        },
        {},
        image,
    )

    assert homogeneous.subscription_type is SubscriptionType.HOMOGENEOUS
    assert list(homogeneous.members) == ["a", "b"]
    # Stated, so that assignors need not check it (GroupSpec.members_in_id_order).
    assert homogeneous.members_in_id_order and heterogeneous.members_in_id_order
    assert heterogeneous.subscription_type is SubscriptionType.HETEROGENEOUS
    assert heterogeneous.members["b"].subscribed_topic_ids == frozenset({"t-id"})


def test_pending_target_reads_the_indexes_and_resolves_as_the_whole_image_would() -> None:
    """A big group's computation is built from the subscribed topics alone (no pass
    over the members); resolving every member against them gives the very spec
    that resolving against the whole image gives."""
    h = EngineHarness(config=GroupConfig(inline_assignment_max_partitions=1), now_ms=5)
    for name, partitions in (("foo", 4), ("bar", 3), ("baz", 2), ("other", 5)):
        h.create_topic(name, partitions)
    h.heartbeat(join("g", "a", ["foo", "missing"]))
    h.heartbeat(join("g", "b", [], subscribed_topic_regex="ba.*"))
    h.heartbeat(join("g", "c", ["foo"], subscribed_topic_regex="baz"))
    group, ctx = h.groups["g"], h.ctx()

    pending = pending_target(group, ctx)
    assert pending is not None
    assert list(pending.topics) == ["bar-id", "baz-id", "foo-id"]
    whole = group_spec(group.members, group.target, ctx.image, group.member_ids_in_order())
    assert pending.with_members(group.members, group.target, group.member_ids_in_order()).spec == whole
    assert whole.subscription_type is SubscriptionType.HETEROGENEOUS


def test_no_server_side_computation_while_members_assign_client_side() -> None:
    h = EngineHarness(config=GroupConfig(inline_assignment_max_partitions=1), now_ms=5)
    h.create_topic("foo", 4)
    client_side = (ClientAssignor("sticky", 0, 1),)
    h.heartbeat(join("g", "a", ["foo"], client_assignors=client_side))
    h.heartbeat(join("g", "b", ["foo"], client_assignors=client_side))
    assert h.groups["g"].has_client_assignors()
    assert pending_target(h.groups["g"], h.ctx()) is None

    h.heartbeat(beat("g", "a", -1))
    assert h.groups["g"].has_client_assignors()
    h.heartbeat(beat("g", "b", -1))
    assert not h.groups["g"].has_client_assignors()
    h.heartbeat(join("g", "c", ["foo"]))
    assert pending_target(h.groups["g"], h.ctx()) is not None
