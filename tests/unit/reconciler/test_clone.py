"""Group.clone: an independent copy (the write path computes a batch of heartbeats on one)."""

from __future__ import annotations

from array import array

from regroup.reconciler import ConsumerGroupHeartbeat, Group, OwnedTopicPartitions, replay_all
from regroup.reconciler.records import MemberMetadataTombstone
from tests.support.engine import EngineHarness, join

#: Values a replay never changes in place: a clone may share them.
IMMUTABLE = (int, str, bytes, type(None), tuple, frozenset, bool)


def _fields(group: Group) -> dict[str, object]:
    return {name: getattr(group, name) for name in Group.__slots__}


def _grown_group() -> Group:
    h = EngineHarness()
    h.create_topic("orders", 12)
    for member in ("a", "b", "c"):
        h.heartbeat(join("g", member, ["orders"]))
    for _ in range(3):
        for member in ("a", "b", "c"):
            m = h.groups["g"].members[member]
            h.heartbeat(join("g", member, ["orders"]) if m.member_epoch == 0 else _plain(h, member))
    return h.groups["g"]


def _plain(h: EngineHarness, member: str) -> ConsumerGroupHeartbeat:
    m = h.groups["g"].members[member]
    owned = tuple(OwnedTopicPartitions(t, "", tuple(p)) for t, p in m.assigned.items())
    return ConsumerGroupHeartbeat("g", member, m.member_epoch, owned_topic_partitions=owned)


def test_a_clone_holds_every_field_and_shares_no_container_a_replay_changes() -> None:
    group = _grown_group()
    copy = group.clone()
    assert _fields(copy) == _fields(group)
    for name, value in _fields(group).items():
        if name == "connectors":
            continue  # replaced whole by its record, never changed in place
        if not isinstance(value, IMMUTABLE):
            assert getattr(copy, name) is not value, name
    for topic_id, epochs in group._partition_epochs.items():
        assert isinstance(epochs, array) and copy._partition_epochs[topic_id] is not epochs


def test_replaying_onto_a_clone_leaves_the_group_as_it_was() -> None:
    group = _grown_group()
    before = {name: repr(value) for name, value in _fields(group).items()}
    copy = replay_all(group.clone(), "g", [MemberMetadataTombstone("b")])
    assert copy is not None and "b" not in copy.members
    assert {name: repr(value) for name, value in _fields(group).items()} == before
    assert "b" in group.members and group.state() is not None
