"""Redundant assignment: each partition on `replicas` distinct members.

The engine's unit of ownership stays the (topic id, partition) pair, and a copy is
one more such unit: copy c >= 1 of topic T is the copy topic `T#c` (topic ids are
UUIDs, which never hold a `#`), copy 0 is T itself, so that a group going from one
copy to two keeps every assignment it had. Everything the engine guarantees per
partition then holds per (partition, copy) slot, with no new code on its paths:
at most one owner per slot, revocation acknowledged before a slot goes to someone
else, the rebalance timeout, fencing.

Three things are added around it:
- the assignor (assignors/redundant.py) never gives a member two copies of one
  partition, in any target;
- a member holds at most one copy of a partition, so on the wire it sees and
  sends plain partitions: `collapse` folds copy topics into their topic for the
  answers (heartbeats, DescribeGroups), and `expand_owned` maps what a member
  says it owns back to the copies it holds. A member that moves from copy 0 to
  copy 1 of a partition (which the assignor avoids) revokes it and gets it again:
  it never holds both;
- offsets are per copy: the holder of copy c commits and fetches under `T#c`,
  since each copy (a search index, a cache) makes its own progress, and a former
  holder of that copy is fenced out as for any partition.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .model import Assignment, Member
from .topics import Topic

SEPARATOR = "#"
#: Copies of a partition a redundant group may ask for.
MAX_REPLICAS = 16


def copy_id(topic_id: str, copy: int) -> str:
    """The topic id of copy `copy` of `topic_id` (copy 0 is the topic itself)."""
    return topic_id if copy == 0 else f"{topic_id}{SEPARATOR}{copy}"


def split(topic_id: str) -> tuple[str, int]:
    """(the topic's id, the copy) of a topic or copy topic id."""
    base, sep, copy = topic_id.partition(SEPARATOR)
    return (base, int(copy)) if sep else (topic_id, 0)


def is_copy(topic_id: str) -> bool:
    return SEPARATOR in topic_id


def group_replicas(members: Iterable[Member]) -> int:
    """The copies a group asks for: the largest any assigned member asks for."""
    return max((m.metadata.replicas for m in members if not m.metadata.draining), default=1)


def with_copies(topics: Mapping[str, Topic], replicas: int) -> dict[str, Topic]:
    """`topics` and their copy topics 1..replicas-1 (same name, size and racks)."""
    out = dict(topics)
    for topic in topics.values():
        for copy in range(1, replicas):
            cid = copy_id(topic.topic_id, copy)
            out[cid] = Topic(cid, topic.name, topic.num_partitions, topic.partition_racks)
    return out


def subscribed_with_copies(topic_ids: frozenset[str], replicas: int) -> frozenset[str]:
    if replicas <= 1:
        return topic_ids
    return topic_ids | {copy_id(t, c) for t in topic_ids for c in range(1, replicas)}


def holds_copies(assignment: Assignment) -> bool:
    return any(SEPARATOR in t for t in assignment)


def collapse(assignment: Assignment) -> Assignment:
    """The partitions as the member sees them: copy topics folded into their topic."""
    if not holds_copies(assignment):
        return assignment
    out: dict[str, frozenset[int]] = {}
    for topic_id, partitions in assignment.items():
        base = split(topic_id)[0]
        out[base] = out[base] | partitions if base in out else partitions
    return out


def expand_owned(owned: Assignment, member: Member) -> Assignment:
    """What a member says it owns (plain partitions), as the copies it holds: a
    partition it holds as copy c (assigned or being revoked) is that copy; any
    other stays as sent."""
    held = [a for a in (member.assigned, member.pending_revocation) if holds_copies(a)]
    if not held:
        return owned
    copy_of: dict[tuple[str, int], str] = {}
    for assignment in held:
        for topic_id, partitions in assignment.items():
            base = split(topic_id)[0]
            for p in partitions:
                copy_of[base, p] = topic_id
    out: dict[str, set[int]] = {}
    for topic_id, partitions in owned.items():
        for p in partitions:
            out.setdefault(copy_of.get((topic_id, p), topic_id), set()).add(p)
    return {t: frozenset(p) for t, p in out.items()}


def copy_held(member: Member, topic_id: str, partition: int) -> str:
    """The topic id under which `member` holds `partition` of `topic_id` (a copy
    topic, or the topic itself when it holds copy 0 or nothing)."""
    for assignment in (member.assigned, member.pending_revocation):
        if not holds_copies(assignment):
            continue
        for held_id, partitions in assignment.items():
            if partition in partitions and split(held_id)[0] == topic_id:
                return held_id
    return topic_id
