"""Rack locality of a group's assignment, for reporting (DescribeGroups).

Pure: a `GroupSpec` (members with their racks and capacities, the subscribed
topics with their partition racks) and an assignment in, three counts out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from .assignors.base import GroupSpec
from .assignors.racks import best_local, partitions_by_rack, rack_gains, rack_sizes
from .assignors.range_racks import unit_racks
from .assignors.shares import equal_shares, shares
from .model import Assignment


class RackLocality(NamedTuple):
    #: (member, partition) pairs of the assignment where the member's rack is the partition's.
    local_partitions: int
    #: Partitions of the subscribed topics whose rack is known.
    partitions_with_known_racks: int
    #: The most local pairs the named assignor's balance rule allows for this
    #: group (what it achieves when the assignment is its current target), or
    #: None when that assignor promises no optimum here.
    best_achievable: int | None


def rack_locality(
    spec: GroupSpec, assignment: Mapping[str, Assignment], assignor: str = "uniform"
) -> RackLocality:
    """Locality of `assignment` (targets by member id; members not in `spec`
    are ignored) over `spec`'s topics. `best_achievable` is defined for the
    built-in assignors: "uniform" on a homogeneous group (weighted or not),
    "range" when the topics of each co-partitioned class share one rack layout;
    None otherwise (a heterogeneous uniform group: that path ignores racks)."""
    subscribed = frozenset().union(*(m.subscribed_topic_ids for m in spec.members.values()))
    known = sum(
        t.num_partitions for t_id, t in spec.topics.items() if t.partition_racks and t_id in subscribed
    )
    local = 0
    for member_id, target in assignment.items():
        member = spec.members.get(member_id)
        if member is None or member.rack_id is None:
            continue
        for topic_id, partitions in target.items():
            topic = spec.topics.get(topic_id)
            if topic is not None and topic.partition_racks:
                mine = partitions_by_rack(topic.partition_racks).get(member.rack_id)
                if mine is not None:
                    local += len(partitions & mine)
    best: int | None = None
    if assignor == "uniform":
        best = _best_uniform(spec)
    elif assignor == "range":
        best = _best_range(spec)
    return RackLocality(local, known, best)


def _best_uniform(spec: GroupSpec) -> int | None:
    if not spec.members:
        return 0
    if not spec.is_homogeneous():
        return None
    subscribed = next(iter(spec.members.values())).subscribed_topic_ids
    topics = [t for topic_id, t in spec.topics.items() if topic_id in subscribed]
    total = sum(t.num_partitions for t in topics)
    members = list(spec.members.values())
    if spec.is_weighted():
        floors, candidates, extra = shares(total, [m.capacity for m in members])
    else:
        floors, candidates, extra = equal_shares(total, len(members))
    racks = [m.rack_id for m in members]
    sizes = rack_sizes(topics, {r for r in racks if r is not None})
    return best_local(racks, floors, candidates, extra, sizes)


def _best_range(spec: GroupSpec) -> int | None:
    """Per co-partitioned class (same subscribers, same size): the best local
    units times the class's topics with racks."""
    classes: dict[tuple[frozenset[str], int], list[str]] = {}
    for topic_id, topic in spec.topics.items():
        subscribers = frozenset(m for m, s in spec.members.items() if topic_id in s.subscribed_topic_ids)
        if subscribers and topic.num_partitions:
            classes.setdefault((subscribers, topic.num_partitions), []).append(topic_id)
    best = 0
    for (subscribers, size), topic_ids in classes.items():
        topics = [spec.topics[t] for t in topic_ids]
        layouts = [t.partition_racks for t in topics if t.partition_racks]
        if not layouts:
            continue
        if layouts.count(layouts[0]) != len(layouts):
            return None
        units = unit_racks(topics)
        assert units is not None
        unit_sizes: dict[str, int] = {}
        for rack in units:
            if rack is not None:
                unit_sizes[rack] = unit_sizes.get(rack, 0) + 1
        racks = [spec.members[m].rack_id for m in sorted(subscribers)]
        floors, candidates, extra = equal_shares(size, len(racks))
        base_local, gains = rack_gains(racks, floors, candidates, unit_sizes)
        best += (base_local + min(extra, sum(gains.values()))) * len(layouts)
    return best
