"""Computes big groups' target assignments in a worker process.

A big group's assignor is pure-Python work of tens of milliseconds. In a
thread it would still hold the GIL and stall the event loop (every other
group's heartbeats) in slices of the switch interval; in a process it costs
the event loop only what crosses the pipe.

What crosses is kept small, and building it never passes over the members: the
worker keeps a copy of each big group's members (id, instance, rack,
subscription) and current targets, and a request carries only the members whose
metadata or target changed since the last one. The coordinator learns which
from the records it replays (`observe`); its own reads are the group's indexes
(`PendingTarget`). The worker resolves subscriptions against the subscribed
topics the request carries and runs the same engine code as an inline
computation, and answers with the engine's records, which name only the
members whose target moved. If the worker's copy is not the one a request
builds on (a restart, a failed call, a reloaded group), it says so and gets the
whole group again.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import multiprocessing
import os
from collections.abc import Collection, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from operator import is_
from typing import NamedTuple

from regroup.reconciler import GroupConfig, Record, Topic
from regroup.reconciler.errors import CoordinatorNotAvailable, UnknownServerError
from regroup.reconciler.model import EMPTY_ASSIGNMENT, Assignment, Group, Member, MemberMetadata
from regroup.reconciler.records import (
    MemberMetadataRecord,
    MemberMetadataTombstone,
    TargetAssignmentMemberRecord,
    TargetAssignmentMemberTombstone,
)
from regroup.reconciler.target_assignment import PendingTarget
from regroup.reconciler.target_summary import TargetSummaryKeeper

#: The worker's niceness: computing a target is batch work, and on a busy machine it
#: should wait for the heartbeats (of this process and its database), not delay them.
WORKER_NICENESS = 10

#: A member as sent: member id, instance id, rack id, subscribed topic names and
#: regex (names tuples are shared, so pickled once per request), current target,
#: whether it is draining (the assignor then leaves it out), its capacity and replicas.
_WireMember = tuple[str, str | None, str | None, tuple[str, ...], str | None, Assignment, bool, int, int]

#: The records that change what a member gives the assignor (its metadata, its
#: presence, its current target); a member's epoch steps do not.
_MEMBER_INPUTS = (
    MemberMetadataRecord,
    MemberMetadataTombstone,
    TargetAssignmentMemberRecord,
    TargetAssignmentMemberTombstone,
)


class _Request(NamedTuple):
    group_id: str
    #: The token of the copy `members` and `removed` apply to; 0 sends the whole group.
    base: int
    #: The token of the copy this request leaves in the worker.
    token: int
    group_epoch: int
    now_ms: int
    assignor: str
    #: The existing topics any member subscribes to, by id.
    topics: dict[str, Topic]
    #: Members new or changed since the copy (all of them when `base` is 0).
    members: tuple[_WireMember, ...]
    #: Members gone since the copy.
    removed: tuple[str, ...]
    #: How many members the group has: the copy must hold as many.
    size: int
    #: Groups whose copies the worker may drop.
    forget: tuple[str, ...]
    #: Names `topics`: equal keys, identical topics (target_summary.py).
    topics_key: int


# -- the worker process ------------------------------------------------------------

_config: GroupConfig | None = None


@dataclass
class _Copy:
    """The worker's copy of a big group."""

    token: int
    members: dict[str, Member]
    #: The current target per member id (members with none left out).
    targets: dict[str, Assignment]
    #: The sizes and local counts of those targets, as far as the last
    #: computation here vouches for them.
    summaries: TargetSummaryKeeper


#: group id -> its copy
_copies: dict[str, _Copy] = {}


def _init_worker(config: GroupConfig) -> None:
    global _config
    _config = config
    with contextlib.suppress(OSError, AttributeError):  # AttributeError: no os.nice (Windows)
        os.nice(WORKER_NICENESS)


def _compute(request: _Request) -> list[Record] | None:
    """The records of the group's new target; None when the copy it builds on is not here."""
    assert _config is not None
    for group_id in request.forget:
        _copies.pop(group_id, None)
    # Taken out until the computation succeeds: a failure leaves no copy to build on.
    held = _copies.pop(request.group_id, None)
    if request.base:
        if held is None or held.token != request.base:
            return None
        copy = held
    else:
        copy = _Copy(0, {}, {}, TargetSummaryKeeper())
    members, targets, summaries = copy.members, copy.targets, copy.summaries
    for member_id in request.removed:
        members.pop(member_id, None)
        targets.pop(member_id, None)
        summaries.removed(member_id)
    for (
        member_id,
        instance_id,
        rack_id,
        names,
        regex,
        target,
        draining,
        capacity,
        replicas,
    ) in request.members:
        members[member_id] = Member(
            member_id,
            MemberMetadata(
                instance_id=instance_id,
                rack_id=rack_id,
                subscribed_topic_names=names,
                subscribed_topic_regex=regex,
                draining=draining,
                capacity=capacity,
                replicas=replicas,
            ),
        )
        if target:
            targets[member_id] = target
        else:
            targets.pop(member_id, None)
        summaries.changed(member_id, target)
    if len(members) != request.size:
        return None
    pending = PendingTarget(request.group_epoch, request.now_ms, request.assignor, request.topics)
    computation = pending.with_members(members, targets, sorted(members))
    # Topics come unpickled anew each time: the coordinator's key names them.
    records, computed = computation.compute_told(_config, summaries, request.topics_key)
    # The copy takes the new targets now: the coordinator installs them as they
    # are (and then does not send them back), or sends the members again.
    for record in records:
        if isinstance(record, TargetAssignmentMemberRecord):
            if record.partitions:
                targets[record.member_id] = record.partitions
            else:
                targets.pop(record.member_id, None)
    summaries.computed(computed)
    copy.token = request.token
    _copies[request.group_id] = copy
    return records


def _ping() -> None:
    """Nothing: submitted once to start the worker ahead of its first computation."""


# -- the coordinator's side ------------------------------------------------------------


@dataclass
class _Sent:
    """What the worker's copy of a group was read from, and what changed since."""

    token: int
    #: The group object it was read from: a reloaded group is a new object, sent whole.
    group: Group
    #: Ids of the members whose metadata, presence or target changed since.
    changed: set[str] = field(default_factory=set)
    #: The targets the worker computed and took into its copy, by member id,
    #: until they are seen installed as they are (then the copy holds them
    #: already and they are not sent back); any not seen are sent again.
    own: dict[str, Assignment] = field(default_factory=dict)


class Assigner:
    """Runs big groups' target computations in one worker process, started when first needed."""

    def __init__(self, config: GroupConfig) -> None:
        self._config = config
        self._pool: ProcessPoolExecutor | None = None
        #: group id -> the copy the worker holds
        self._sent: dict[str, _Sent] = {}
        self._forget: set[str] = set()
        self._tokens = itertools.count(1)
        #: group id -> the topics last sent, and their key
        self._topics: dict[str, tuple[dict[str, Topic], int]] = {}

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            # Not fork: this process runs gRPC and event-loop threads.
            context = multiprocessing.get_context("spawn")
            self._pool = ProcessPoolExecutor(
                1, mp_context=context, initializer=_init_worker, initargs=(self._config,)
            )
        return self._pool

    async def start(self) -> None:
        """Starts the worker now rather than on the first computation."""
        await asyncio.get_running_loop().run_in_executor(self._executor(), _ping)

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        self._sent.clear()
        if pool is not None:
            await asyncio.to_thread(pool.shutdown, wait=True, cancel_futures=True)

    def forget(self, group_ids: Collection[str]) -> None:
        """The groups are gone (or must be sent whole next time)."""
        for group_id in group_ids:
            self._topics.pop(group_id, None)
            if self._sent.pop(group_id, None) is not None:
                self._forget.add(group_id)

    def replaced(self, group_id: str, before: Group | None, after: Group) -> None:
        """The write path replaced the group's object by `after`, a copy of `before`
        with records replayed (`observe` is told of those): the worker's copy still
        matches `before` as far as it knew it."""
        sent = self._sent.get(group_id)
        if sent is not None and before is not None and sent.group is before:
            sent.group = after

    def observe(self, group_id: str, group: Group, records: Sequence[Record]) -> None:
        """`records` were just replayed onto `group`: notes the members they change.

        The runtime calls this for every write it replays (only a group the worker
        holds a copy of costs more than a lookup), so the next request carries
        exactly the members that changed."""
        sent = self._sent.get(group_id)
        if sent is None:
            return
        if sent.group is not group:
            self.forget((group_id,))
            return
        changed, own = sent.changed, sent.own
        for record in records:
            if isinstance(record, _MEMBER_INPUTS):
                if (
                    own
                    and type(record) is TargetAssignmentMemberRecord
                    and own.get(record.member_id) is record.partitions
                ):
                    # The worker's own result, installed as computed: its copy has it.
                    del own[record.member_id]
                    continue
                changed.add(record.member_id)
        if len(changed) > len(group.members):
            # Sending the whole group costs no more, and a group that stops asking (its
            # members took over assigning) must not collect the ids of every leaver.
            self.forget((group_id,))

    async def compute(self, group_id: str, group: Group, pending: PendingTarget) -> list[Record]:
        """The records of `group`'s new target, read from the group as it is now. The
        group may change while the worker computes: what changes from here on is noted
        (`observe`) against the copy this request leaves, and sent next time."""
        loop = asyncio.get_running_loop()
        broken = 0
        while True:
            request = self._request(group_id, group, pending)
            self._sent[group_id] = _Sent(request.token, group)
            self._forget.difference_update(request.forget)
            pool = self._executor()
            try:
                records = await loop.run_in_executor(pool, _compute, request)
            except BrokenProcessPool as e:
                # The worker died (killed, out of memory): start another, which has no copies.
                if self._pool is pool:
                    self._pool = None
                    self._sent.clear()
                    self._forget.clear()
                broken += 1
                if broken > 1:
                    raise CoordinatorNotAvailable(f"The assignment worker failed: {e}") from e
                continue
            except BaseException:
                self._sent.pop(group_id, None)
                raise
            if records is None:
                self._sent.pop(group_id, None)
                if not request.base:
                    # The whole group cannot fail to apply: a bug, not to be retried forever.
                    raise UnknownServerError(f"The assignment worker refused group {group_id} sent whole.")
                continue
            sent = self._sent.get(group_id)
            if sent is not None and sent.token == request.token:
                sent.own = {
                    r.member_id: r.partitions for r in records if isinstance(r, TargetAssignmentMemberRecord)
                }
            return records

    def _request(self, group_id: str, group: Group, pending: PendingTarget) -> _Request:
        sent = self._sent.get(group_id)
        if sent is not None and sent.group is not group:
            sent = None
        members = group.members
        targets = group.target
        if sent is None:
            ids: Collection[str] = members
            removed: tuple[str, ...] = ()
        else:
            # The worker's own targets not seen installed as computed: the copy
            # took them, so it gets what the group holds instead.
            changed = sent.changed | sent.own.keys()
            ids = [m for m in changed if m in members]
            removed = tuple(m for m in changed if m not in members)
        wire = tuple(_wire(members[member_id], targets.get(member_id, EMPTY_ASSIGNMENT)) for member_id in ids)
        return _Request(
            group_id=group_id,
            base=sent.token if sent is not None else 0,
            token=next(self._tokens),
            group_epoch=pending.group_epoch,
            now_ms=pending.now_ms,
            assignor=pending.assignor,
            topics=dict(pending.topics),
            members=wire,
            removed=removed,
            size=len(members),
            forget=tuple(self._forget),
            topics_key=self._topics_key(group_id, pending.topics),
        )

    def _topics_key(self, group_id: str, topics: Mapping[str, Topic]) -> int:
        """A key for the group's subscribed topics: the same as last time while
        they are the same Topic objects (immutable; a change makes a new one),
        else a new one. The worker trusts its summary of the targets only over
        the topics it was counted on."""
        last = self._topics.get(group_id)
        if (
            last is not None
            and last[0].keys() == topics.keys()
            and all(map(is_, map(last[0].__getitem__, topics), topics.values()))
        ):
            return last[1]
        key = next(self._tokens)
        self._topics[group_id] = (dict(topics), key)
        return key


def _wire(member: Member, target: Assignment) -> _WireMember:
    return (
        member.member_id,
        member.instance_id,
        member.rack_id,
        member.subscribed_topic_names,
        member.subscribed_topic_regex,
        target,
        member.draining,
        member.metadata.capacity,
        member.metadata.replicas,
    )
