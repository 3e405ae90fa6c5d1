"""The consumer group model: members, assignments and the group itself.

A `Group` is changed only by `replay` (see `replay.py`), which applies the
records an operation produced after the shell has stored them. Handlers read a
group and never mutate it, so a refused or failed write leaves nothing to undo.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from enum import Enum, IntEnum
from typing import TypeVar

from .target_summary import TargetSummaryKeeper

#: Partitions per topic id. Values are never empty; an absent topic means none.
Assignment = Mapping[str, frozenset[int]]

EMPTY_ASSIGNMENT: Assignment = {}

#: The member epoch of a static member that left temporarily (epoch -2).
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
#: The member epoch of a member that leaves for good (epoch -1).
LEAVE_GROUP_MEMBER_EPOCH = -1
#: The member epoch of a member joining (epoch 0).
JOIN_GROUP_MEMBER_EPOCH = 0

CONSUMER_GROUP_TYPE = "consumer"
CONNECT_GROUP_TYPE = "connect"


class MemberState(IntEnum):
    """Where a member is in its reconciliation towards the target assignment."""

    #: The member owns exactly what it may own at its epoch.
    STABLE = 0
    #: The member must first acknowledge the revocation of some partitions.
    UNREVOKED_PARTITIONS = 1
    #: The member waits for partitions that other members have not released yet.
    UNRELEASED_PARTITIONS = 2
    #: A state this version does not know (decoded from a newer record).
    UNKNOWN = 127

    @classmethod
    def decode(cls, value: int) -> MemberState:
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


class GroupState(Enum):
    """The group state, derived from the epochs and never stored."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"


def make_assignment(items: Iterable[tuple[str, Iterable[int]]]) -> Assignment:
    """Builds an assignment from (topic id, partitions) pairs, merging repeats."""
    merged: dict[str, set[int]] = {}
    for topic_id, partitions in items:
        merged.setdefault(topic_id, set()).update(partitions)
    return {t: frozenset(p) for t, p in merged.items() if p}


def union(a: Assignment, b: Assignment) -> Assignment:
    if not b:
        return a
    if not a:
        return b
    out = dict(a)
    for topic_id, partitions in b.items():
        current = out.get(topic_id)
        out[topic_id] = partitions if current is None else current | partitions
    return out


def difference(a: Assignment, b: Assignment) -> Assignment:
    if not b:
        return a
    out: dict[str, frozenset[int]] = {}
    for topic_id, partitions in a.items():
        other = b.get(topic_id)
        rest = partitions if other is None else partitions - other
        if rest:
            out[topic_id] = rest
    return out


def intersection(a: Assignment, b: Assignment) -> Assignment:
    out: dict[str, frozenset[int]] = {}
    for topic_id, partitions in a.items():
        other = b.get(topic_id)
        if other is not None:
            common = partitions & other
            if common:
                out[topic_id] = common
    return out


def intersects(a: Assignment, b: Assignment) -> bool:
    for topic_id, partitions in a.items():
        other = b.get(topic_id)
        if other is not None and not partitions.isdisjoint(other):
            return True
    return False


def is_subset(a: Assignment, b: Assignment) -> bool:
    for topic_id, partitions in a.items():
        other = b.get(topic_id)
        if other is None or not partitions <= other:
            return False
    return True


def only_topics(a: Assignment, topic_ids: frozenset[str]) -> Assignment:
    """Keeps the topics in `topic_ids`; returns `a` itself when nothing is dropped."""
    if all(t in topic_ids for t in a):
        return a
    return {t: p for t, p in a.items() if t in topic_ids}


def partition_count(a: Assignment) -> int:
    return sum(len(p) for p in a.values())


def iter_partitions(a: Assignment) -> Iterator[tuple[str, int]]:
    for topic_id in sorted(a):
        for partition in sorted(a[topic_id]):
            yield topic_id, partition


@dataclass(frozen=True, slots=True)
class ClientAssignor:
    """A client-side assignor a member supports (KIP-848's Assignor data model)."""

    name: str
    minimum_version: int
    maximum_version: int
    reason: int = 0
    version: int = 0
    metadata: bytes = b""


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    """A member's identity and subscription: one value, merged from its heartbeats,
    compared, stored by MemberMetadataRecord and replayed whole (its fields are
    listed here only, and read through `Member`'s properties)."""

    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    #: Sorted, without repeats.
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    rebalance_timeout_ms: int = 0
    #: Client-side assignors in the member's order of preference (empty: server-side).
    client_assignors: tuple[ClientAssignor, ...] = ()
    #: Connect workers: the worker URL.
    url: str = ""
    #: Taken out of service by an admin (GroupAdmin.DrainMember): the assignor gives
    #: it nothing, so it gives its partitions up through the usual revocation. Kept
    #: with the metadata (not a heartbeat field) so that it survives heartbeats, a
    #: static member's replacement under the same instance id, and a reload.
    draining: bool = False
    #: The member's weight for the uniform assignor (ConsumerGroupHeartbeatRequest.capacity).
    capacity: int = 1
    #: The copies of each partition it asks the group for (the group takes the largest).
    replicas: int = 1
    #: It needs its topics co-partitioned: checked when it joins or changes its
    #: subscription, reported by DescribeGroups afterwards.
    require_co_partitioning: bool = False


NO_METADATA = MemberMetadata()


@dataclass(frozen=True, slots=True)
class Member:
    """A member: its metadata and its current assignment.

    The two halves are persisted by different records, as in Kafka: the
    metadata when the member's subscription or identity changes, the current
    assignment when reconciliation moves it. A reconciliation step replaces the
    member and shares its metadata value.
    """

    member_id: str
    metadata: MemberMetadata = NO_METADATA
    state: MemberState = MemberState.STABLE
    member_epoch: int = 0
    previous_member_epoch: int = 0
    #: Partitions the member owns (or is being given) at `member_epoch`.
    assigned: Assignment = field(default_factory=dict)
    #: Partitions the member was asked to revoke and has not released yet.
    pending_revocation: Assignment = field(default_factory=dict)

    @property
    def instance_id(self) -> str | None:
        return self.metadata.instance_id

    @property
    def rack_id(self) -> str | None:
        return self.metadata.rack_id

    @property
    def client_id(self) -> str:
        return self.metadata.client_id

    @property
    def client_host(self) -> str:
        return self.metadata.client_host

    @property
    def subscribed_topic_names(self) -> tuple[str, ...]:
        return self.metadata.subscribed_topic_names

    @property
    def subscribed_topic_regex(self) -> str | None:
        return self.metadata.subscribed_topic_regex

    @property
    def server_assignor(self) -> str | None:
        return self.metadata.server_assignor

    @property
    def rebalance_timeout_ms(self) -> int:
        return self.metadata.rebalance_timeout_ms

    @property
    def client_assignors(self) -> tuple[ClientAssignor, ...]:
        return self.metadata.client_assignors

    @property
    def url(self) -> str:
        return self.metadata.url

    @property
    def draining(self) -> bool:
        return self.metadata.draining

    def is_reconciled_to(self, target_epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == target_epoch

    def same_metadata(self, other: Member) -> bool:
        return self.metadata == other.metadata

    def same_subscription(self, other: Member) -> bool:
        """Whether the inputs of the assignment are unchanged (a change bumps the
        group epoch): the subscription, the client-side assignors with their
        versions, reasons and metadata, and the rack, capacity and replicas."""
        m, o = self.metadata, other.metadata
        return (
            m.subscribed_topic_names == o.subscribed_topic_names
            and m.subscribed_topic_regex == o.subscribed_topic_regex
            and m.client_assignors == o.client_assignors
            # What the server-side assignors weigh besides the subscription.
            and m.rack_id == o.rack_id
            and m.capacity == o.capacity
            and m.replicas == o.replicas
        )

    def same_current_assignment(self, other: Member) -> bool:
        return (
            self.state is other.state
            and self.member_epoch == other.member_epoch
            and self.previous_member_epoch == other.previous_member_epoch
            and self.assigned == other.assigned
            and self.pending_revocation == other.pending_revocation
        )


class Group:
    """A consumer group as the records describe it, plus derived indexes.

    Only `replay` mutates a group. The indexes (instance ids, partition epochs,
    subscription counts) are derived from the members and kept in step by
    replay, so nothing is stored twice.
    """

    __slots__ = (
        "_assignor_counts",
        "_client_assignor_members",
        "_instance_index",
        "_member_order",
        "_member_order_sorted",
        "_owned_counts",
        "_partition_epochs",
        "_regex_counts",
        "_stable_epochs",
        "_topic_name_counts",
        "_unreleased",
        "assignment_epoch",
        "assignment_error",
        "assignor_state",
        "computation",
        "connectors",
        "group_epoch",
        "group_id",
        "group_type",
        "last_assignment_ms",
        "members",
        "metadata_hash",
        "offsets",
        "target",
        "target_summary",
    )

    def __init__(self, group_id: str, group_type: str = CONSUMER_GROUP_TYPE) -> None:
        self.group_id = group_id
        self.group_type = group_type
        self.group_epoch = 0
        self.assignment_epoch = 0
        #: When the target was last computed (soft state, not stored): paces batching.
        self.last_assignment_ms: int | None = None
        #: Hash of the metadata of the topics the group subscribes to.
        self.metadata_hash = 0
        self.members: dict[str, Member] = {}
        #: The target assignment, per member id.
        self.target: dict[str, Assignment] = {}
        #: The sizes and rack-local counts of those targets as the last inline
        #: computation returned them (soft state, kept by replay): the next one
        #: need not read every target to count it (target_summary.py).
        self.target_summary = TargetSummaryKeeper()
        #: Client-side assignment: what the last installation left for the next
        #: computation, and the last computation error (both stored).
        self.assignor_state = b""
        self.assignment_error = ""
        #: The client-side computation under way (soft state, never stored: a
        #: restarted coordinator simply chooses again).
        self.computation: Computation | None = None
        #: A Connect group's connectors and task counts (stored; empty otherwise).
        self.connectors: dict[str, int] = {}
        #: Committed offsets by (topic id, partition).
        self.offsets: dict[tuple[str, int], CommittedOffset] = {}
        self._instance_index: dict[str, str] = {}
        #: The member ids in id order, which assignors hand partitions out in:
        #: kept here so that computing a target does not sort 10,000 ids each
        #: time (1.3 ms). A join appends and a later read sorts the few
        #: appended ids in (one linear merge), so loading a big group sorts once.
        self._member_order: list[str] = []
        self._member_order_sorted = True
        #: topic id -> the owner's epoch indexed by partition (-1 when free): 8
        #: bytes a partition, where a dict would take about 40. An array, not a
        #: list: it holds no objects, so the cyclic collector never walks it (a
        #: list of 100,000 epochs added milliseconds to every full collection).
        self._partition_epochs: dict[str, array[int]] = {}
        #: topic id -> how many of its partitions are owned (the array goes at 0).
        self._owned_counts: dict[str, int] = {}
        self._topic_name_counts: dict[str, int] = {}
        self._regex_counts: dict[str, int] = {}
        self._assignor_counts: dict[str, int] = {}
        #: How many members compute targets client-side (so that a big group's
        #: computation does not pass over its members to find out).
        self._client_assignor_members = 0
        #: member epoch -> how many members are STABLE at it: the group's state is read
        #: without passing over its members (the write path reads it after each write).
        self._stable_epochs: dict[int, int] = {}
        #: The members waiting for partitions still owned by others (UNRELEASED_PARTITIONS).
        self._unreleased: set[str] = set()

    def clone(self) -> Group:
        """An independent copy: replaying records onto it leaves this group as it is.

        Members, targets and committed offsets are immutable values and are shared;
        every container a replay changes in place is copied (the partition epochs'
        arrays included). The write path computes a batch of operations on a copy
        and keeps it only once the batch is stored."""
        copy = Group.__new__(Group)
        copy.group_id = self.group_id
        copy.group_type = self.group_type
        copy.group_epoch = self.group_epoch
        copy.assignment_epoch = self.assignment_epoch
        copy.last_assignment_ms = self.last_assignment_ms
        copy.metadata_hash = self.metadata_hash
        copy.members = dict(self.members)
        copy.target = dict(self.target)
        copy.target_summary = self.target_summary.copy()
        copy.assignor_state = self.assignor_state
        copy.assignment_error = self.assignment_error
        copy.computation = self.computation
        copy.connectors = self.connectors  # replaced whole by its record, never changed in place
        copy.offsets = dict(self.offsets)
        copy._instance_index = dict(self._instance_index)
        copy._member_order = list(self._member_order)
        copy._member_order_sorted = self._member_order_sorted
        copy._partition_epochs = {
            topic_id: array("q", epochs) for topic_id, epochs in self._partition_epochs.items()
        }
        copy._owned_counts = dict(self._owned_counts)
        copy._topic_name_counts = dict(self._topic_name_counts)
        copy._regex_counts = dict(self._regex_counts)
        copy._assignor_counts = dict(self._assignor_counts)
        copy._client_assignor_members = self._client_assignor_members
        copy._stable_epochs = dict(self._stable_epochs)
        copy._unreleased = set(self._unreleased)
        return copy

    # -- reads -------------------------------------------------------------

    def state(self) -> GroupState:
        if not self.members:
            return GroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return GroupState.ASSIGNING
        if self._stable_epochs.get(self.assignment_epoch, 0) < len(self.members):
            return GroupState.RECONCILING  # some member is not STABLE at the target epoch
        return GroupState.STABLE

    def stable_count(self, member_epoch: int) -> int:
        """How many members are STABLE at `member_epoch` (an index read, O(1))."""
        return self._stable_epochs.get(member_epoch, 0)

    def unreleased_member_ids(self) -> AbstractSet[str]:
        """The members waiting for partitions that others still own (a view)."""
        return self._unreleased

    def member_ids_in_order(self) -> Sequence[str]:
        """The ids of the members, sorted (a view: valid until the next replay)."""
        return self._sorted_member_order()

    def _sorted_member_order(self) -> list[str]:
        if not self._member_order_sorted:
            self._member_order.sort()
            self._member_order_sorted = True
        return self._member_order

    def member_by_instance_id(self, instance_id: str) -> Member | None:
        member_id = self._instance_index.get(instance_id)
        return None if member_id is None else self.members[member_id]

    def target_of(self, member_id: str) -> Assignment:
        return self.target.get(member_id, EMPTY_ASSIGNMENT)

    def partition_epoch(self, topic_id: str, partition: int) -> int:
        """The epoch of the member owning the partition, or -1 if it is free."""
        epochs = self._partition_epochs.get(topic_id)
        if epochs is None or partition >= len(epochs):
            return -1
        return epochs[partition]

    def subscribed_topic_names(self) -> Mapping[str, int]:
        """Topic names subscribed by name, with the number of subscribers."""
        return self._topic_name_counts

    def subscribed_regexes(self) -> Mapping[str, int]:
        return self._regex_counts

    def server_assignor_counts(self) -> Mapping[str, int]:
        return self._assignor_counts

    def has_client_assignors(self) -> bool:
        """Whether any member supports a client-side assignor."""
        return self._client_assignor_members > 0

    # -- index maintenance (called by replay only) -------------------------

    def _index_member_id(self, member_id: str, sign: int) -> None:
        order = self._member_order
        if sign > 0:
            if order and self._member_order_sorted and member_id < order[-1]:
                self._member_order_sorted = False
            order.append(member_id)
            return
        order = self._sorted_member_order()
        del order[bisect_left(order, member_id)]

    def _index_metadata(self, member: Member, sign: int) -> None:
        if member.instance_id is not None:
            if sign > 0:
                self._instance_index[member.instance_id] = member.member_id
            elif self._instance_index.get(member.instance_id) == member.member_id:
                del self._instance_index[member.instance_id]
        for name in member.subscribed_topic_names:
            _count(self._topic_name_counts, name, sign)
        if member.subscribed_topic_regex is not None:
            _count(self._regex_counts, member.subscribed_topic_regex, sign)
        if member.server_assignor is not None:
            _count(self._assignor_counts, member.server_assignor, sign)
        if member.client_assignors:
            self._client_assignor_members += sign

    def _index_state(self, member: Member, sign: int) -> None:
        if member.state is MemberState.STABLE:
            _count(self._stable_epochs, member.member_epoch, sign)
        elif member.state is MemberState.UNRELEASED_PARTITIONS:
            if sign > 0:
                self._unreleased.add(member.member_id)
            else:
                self._unreleased.discard(member.member_id)

    def _release_partitions(self, member: Member) -> None:
        for owned in (member.assigned, member.pending_revocation):
            for topic_id, partitions in owned.items():
                epochs = self._partition_epochs.get(topic_id)
                if epochs is None:
                    continue
                released = 0
                for partition in partitions:
                    if partition < len(epochs) and epochs[partition] != -1:
                        epochs[partition] = -1
                        released += 1
                left = self._owned_counts[topic_id] - released
                if left:
                    self._owned_counts[topic_id] = left
                else:
                    del self._partition_epochs[topic_id], self._owned_counts[topic_id]

    def _restamp_partitions(self, member: Member) -> None:
        """Moves the partitions `member` already holds to its (new) epoch.

        Every partition a member holds was registered when it was claimed (the
        array grown to fit it), so each one is simply overwritten."""
        epoch = member.member_epoch
        for owned in (member.assigned, member.pending_revocation):
            for topic_id, partitions in owned.items():
                if partitions:
                    epochs = self._partition_epochs[topic_id]
                    for partition in partitions:
                        epochs[partition] = epoch

    def _claim_partitions(self, member: Member) -> None:
        # Check everything first so that a refused claim changes nothing.
        for owned in (member.assigned, member.pending_revocation):
            for topic_id, partitions in owned.items():
                epochs = self._partition_epochs.get(topic_id)
                if epochs is None:
                    continue
                for partition in partitions:
                    if partition < len(epochs) and epochs[partition] != -1:
                        # Single ownership is the protocol's core promise: a
                        # record that breaks it is a bug, never stored state.
                        raise IllegalStateError(
                            f"Partition {topic_id}-{partition} is already owned at epoch "
                            f"{epochs[partition]}; member {member.member_id} cannot claim it."
                        )
        epoch = member.member_epoch
        for owned in (member.assigned, member.pending_revocation):
            for topic_id, partitions in owned.items():
                if not partitions:
                    continue
                epochs = self._partition_epochs.get(topic_id)
                if epochs is None:
                    epochs = self._partition_epochs[topic_id] = array("q")
                    self._owned_counts[topic_id] = 0
                highest = max(partitions)
                if highest >= len(epochs):
                    epochs.extend(array("q", [-1]) * (highest + 1 - len(epochs)))
                for partition in partitions:
                    epochs[partition] = epoch
                self._owned_counts[topic_id] += len(partitions)


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    metadata: str
    #: The committing member's epoch (-1 for an admin commit).
    member_epoch: int
    commit_ms: int


@dataclass(frozen=True, slots=True)
class PreparedSnapshot:
    """What PrepareAssignment gave the chosen member: the installation is checked against it."""

    group_epoch: int
    assignor_name: str
    #: member id -> the resource ids (topic ids) it may be given.
    eligible: Mapping[str, frozenset[str]]
    #: resource id (topic id) -> count of assignable units (partitions).
    resources: Mapping[str, int]
    #: The members that were draining (eligible for nothing): an installation giving
    #: one of them anything is refused, with a message that says why.
    draining: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Computation:
    """A client-side target computation: who computes, until when, for which epoch."""

    member_id: str
    assignor_name: str
    #: After this, another member is chosen (the chosen member's rebalance timeout).
    deadline_ms: int
    #: Members that let a computation time out, tried last.
    timed_out: frozenset[str] = frozenset()
    prepared: PreparedSnapshot | None = None


class IllegalStateError(Exception):
    """A record would break an invariant of the group (a bug, not bad input)."""


#: A counted key: a topic name, a regex, an assignor, a member epoch.
K = TypeVar("K")


def _count(counts: dict[K, int], key: K, sign: int) -> None:
    value = counts.get(key, 0) + sign
    if value > 0:
        counts[key] = value
    else:
        counts.pop(key, None)
