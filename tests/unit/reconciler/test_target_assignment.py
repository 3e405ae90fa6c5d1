"""assign_target: which members get a target record after an assignor runs."""

from __future__ import annotations

from dataclasses import dataclass, replace

from regroup.reconciler import Topic
from regroup.reconciler.assignors import GroupSpec, MemberSpec, SubscriptionType
from regroup.reconciler.context import GroupConfig
from regroup.reconciler.model import EMPTY_ASSIGNMENT, Assignment, Member
from regroup.reconciler.records import TargetAssignmentEpochRecord, TargetAssignmentMemberRecord
from regroup.reconciler.target_assignment import assign_target, group_spec
from regroup.reconciler.topics import TopicsImage

TOPIC = Topic("t-id", "t", 8)
KEPT: Assignment = {"t-id": frozenset({0, 1})}


@dataclass
class FixedAssignor:
    """Returns a fixed result, whatever the spec."""

    result: dict[str, Assignment]
    name: str = "fixed"

    def assign(self, spec: GroupSpec) -> dict[str, Assignment]:
        return dict(self.result)


def spec(currents: dict[str, Assignment]) -> GroupSpec:
    ids = frozenset({TOPIC.topic_id})
    members = {m: MemberSpec(m, None, None, ids, currents[m]) for m in sorted(currents)}
    return GroupSpec(members=members, topics={TOPIC.topic_id: TOPIC})


def run(
    currents: dict[str, Assignment], result: dict[str, Assignment]
) -> tuple[list[object], dict[str, Assignment]]:
    config = replace(GroupConfig(), assignors={"fixed": FixedAssignor(result)})
    records, targets = assign_target(spec(currents), "fixed", config, group_epoch=7, now_ms=5)
    return list(records), targets


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
        {"b": Member("b", subscribed_topic_names=both), "a": Member("a", subscribed_topic_names=same_ids)},
        {},
        image,
    )
    heterogeneous = group_spec(
        {"a": Member("a", subscribed_topic_names=both), "b": Member("b", subscribed_topic_names=("t",))},
        {},
        image,
    )

    assert homogeneous.subscription_type is SubscriptionType.HOMOGENEOUS
    assert list(homogeneous.members) == ["a", "b"]
    assert heterogeneous.subscription_type is SubscriptionType.HETEROGENEOUS
    assert heterogeneous.members["b"].subscribed_topic_ids == frozenset({"t-id"})
