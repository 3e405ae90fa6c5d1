"""The leader assignor: one member of the group holds leadership, the others nothing.

A leader group (docs/leader-election.md) is a consumer group whose members name
this assignor and subscribe to no topics. Its one resource is leadership, partition
0 of the reserved topic `LEADERSHIP_TOPIC_ID`, which the coordinator adds to the
input of this assignor only (`target_assignment.assign_target`). Because it is an
ordinary partition to the rest of the engine, a new leader receives it only after
the old one revoked it or was removed (session or rebalance timeout): never two
leaders at once.

The rule, deterministic and sticky:
1. the member whose current target holds leadership keeps it while it is in the
   spec (draining members are withheld from the spec, so DrainMember hands
   leadership over);
2. otherwise static members first, by instance id (a restarted static member
   gets it back without a change of leader); then dynamic members, by member id.
   Member ids are random for the Python client, so "the smallest id" is a fair
   draw that every replica and every recomputation agrees on.
"""

from __future__ import annotations

from dataclasses import replace

from ..model import EMPTY_ASSIGNMENT, Assignment
from ..topics import LEADERSHIP_TOPIC, LEADERSHIP_TOPIC_ID
from .base import GroupAssignment, GroupSpec, MemberSpec

#: The target of the leader: partition 0 of the leadership topic.
LEADERSHIP: Assignment = {LEADERSHIP_TOPIC_ID: frozenset({0})}


def holds_leadership(assignment: Assignment) -> bool:
    return 0 in assignment.get(LEADERSHIP_TOPIC_ID, ())


def _election_key(member: MemberSpec) -> tuple[int, str, str]:
    if member.instance_id is not None:
        return (0, member.instance_id, member.member_id)
    return (1, member.member_id, "")


class LeaderAssignor:
    name = "leader"

    def assign(self, spec: GroupSpec) -> GroupAssignment:
        members = list(spec.members.values())
        ids = [m.member_id for m in members]
        if not members:
            return GroupAssignment(ids, [])
        leader = next((m for m in members if holds_leadership(m.current)), None)
        if leader is None:
            leader = min(members, key=_election_key)
        # The very objects of unchanged targets (assign_target then skips comparing them).
        targets = [
            (m.current if m.current == LEADERSHIP else LEADERSHIP)
            if m is leader
            else (m.current if not m.current else EMPTY_ASSIGNMENT)
            for m in members
        ]
        return GroupAssignment(ids, targets)


def with_leadership(spec: GroupSpec) -> GroupSpec:
    """The spec with leadership in it: the leadership topic among the topics, and every
    member subscribed to it (members of a leader group subscribe to no real topics)."""
    topics = {**spec.topics, LEADERSHIP_TOPIC_ID: LEADERSHIP_TOPIC}
    members = {
        member_id: replace(m, subscribed_topic_ids=m.subscribed_topic_ids | _LEADERSHIP_IDS)
        for member_id, m in spec.members.items()
    }
    return replace(spec, members=members, topics=topics)


_LEADERSHIP_IDS = frozenset({LEADERSHIP_TOPIC_ID})
