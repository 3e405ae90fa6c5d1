"""Keeping the summary of a group's current targets between computations.

An assignor that reads every member's current target to count it pays, at
10,000 members, more than the baseline it is benchmarked against (docs/
benchmarks.md section 3). The uniform assignor returns each target's size and
rack-local count with its result (`GroupAssignment.summary`), and a caller that
keeps the targets of one computation can hand those numbers back with them
(`GroupSpec.current_summary`), so that the next computation reads two ints per
member instead of every target.

The keeper is whoever holds the targets between computations: the group itself
for targets computed inline (`Group.target_summary`, kept by replay), and the
worker's copy of a big group (server/assigner.py). It must know exactly which
members' targets changed since the computation it summarised, and over which
topics that computation ran: a summary is given only when no member holds a
target the computation did not return and the topics are the same
(`topics_key`).

This module imports nothing of the engine at run time: the group's model holds
a keeper.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .model import Assignment, MemberMetadata


@dataclass(frozen=True, slots=True)
class TargetSummary:
    """Each member's target in two numbers, aligned with a list of members: what
    an assignor knows of the targets it returns without reading them again,
    and what it is given back with them (`GroupSpec.current_summary`) so that
    the next computation need not read every member's target to count it (at
    10,000 members that read costs more than the baseline it is benchmarked
    against, docs/benchmarks.md section 3)."""

    #: Per member, how many partitions its target holds.
    sizes: Sequence[int]
    #: Per member, how many of them are in the member's own rack (a partition
    #: rack equal to the member's rack id); None when racks were not in play.
    local_counts: Sequence[int] | None = None


@dataclass(frozen=True, slots=True)
class ComputedSummary:
    """What one computation says of the targets it returned: the summary,
    aligned with `member_ids` (the members it assigned, in its order), over the
    topics `topics_key` names. Carried to the keeper by the computation's epoch
    record, in memory only."""

    member_ids: Sequence[str]
    summary: TargetSummary
    topics_key: Hashable


class TargetSummaryKeeper:
    """The sizes and local counts of the current targets, as the last
    computation returned them, and which members' targets it cannot vouch for.

    The last computation's lists are kept as they came, never changed (a copy
    of the keeper shares them), and changes since are two small sets: the
    common read, a computation over the same members with nothing changed,
    hands those lists back as they are."""

    __slots__ = ("_computed", "_emptied", "_unsummarised")

    def __init__(self) -> None:
        #: The last computation's summary (None: nothing to vouch for).
        self._computed: ComputedSummary | None = None
        #: Members whose target was emptied since (they hold nothing: size 0).
        self._emptied: set[str] = set()
        #: Members whose non-empty target did not come from the last computation.
        self._unsummarised: set[str] = set()

    def copy(self) -> TargetSummaryKeeper:
        """An independent keeper that vouches for the same (the computation's
        lists are shared: nobody changes them)."""
        copy = TargetSummaryKeeper()
        copy._computed = self._computed
        copy._emptied = set(self._emptied)
        copy._unsummarised = set(self._unsummarised)
        return copy

    def __eq__(self, other: object) -> bool:
        """Keepers that vouch for the same (a clone equals its original)."""
        if not isinstance(other, TargetSummaryKeeper):
            return NotImplemented
        return (self._computed, self._emptied, self._unsummarised) == (
            other._computed,
            other._emptied,
            other._unsummarised,
        )

    __hash__ = None  # type: ignore[assignment]  # changes in place

    def __repr__(self) -> str:
        computed = self._computed
        members = None if computed is None else len(computed.member_ids)
        return (
            f"TargetSummaryKeeper(members={members}, emptied={sorted(self._emptied)}, "
            f"unsummarised={sorted(self._unsummarised)})"
        )

    def changed(self, member_id: str, target: Assignment) -> None:
        """The member's target is now `target`, from elsewhere than the last
        computation (or the member's rack or subscription changed: its counts
        are not vouched for either)."""
        if self._computed is None:
            return
        if target:
            self._unsummarised.add(member_id)
        else:
            self._unsummarised.discard(member_id)
            self._emptied.add(member_id)

    def removed(self, member_id: str) -> None:
        self.changed(member_id, {})

    def joined(self, member_id: str) -> None:
        """A member new since the computation (it holds nothing): told so that
        the summary over the members with it is spliced, not rebuilt."""
        self.changed(member_id, {})

    def computed(self, computed: ComputedSummary | None) -> None:
        """A computation gave each of `computed.member_ids` the target its
        summary describes, and the members it left out (draining ones) nothing;
        None: it did not say."""
        self._computed = computed
        self._emptied.clear()
        self._unsummarised.clear()

    def summary(self, member_ids: Sequence[str], topics_key: Hashable) -> TargetSummary | None:
        """The summary of the members' current targets, aligned with
        `member_ids`, when it can be vouched for: same topics, and every member
        that holds a target holds the one the last computation gave it (a member
        with no entry holds nothing: size 0). Over the same members with nothing
        emptied, the computation's own lists; else two C passes over them."""
        computed = self._computed
        if computed is None or self._unsummarised or computed.topics_key != topics_key:
            return None
        summary = computed.summary
        if not self._emptied and member_ids == computed.member_ids:
            return summary
        spliced = self._spliced(member_ids)
        if spliced is not None:
            return spliced
        sizes = dict(zip(computed.member_ids, summary.sizes, strict=True))
        local = summary.local_counts
        local_of = None if local is None else dict(zip(computed.member_ids, local, strict=True))
        for member_id in self._emptied:
            sizes.pop(member_id, None)
            if local_of is not None:
                local_of.pop(member_id, None)
        return TargetSummary(
            list(map(sizes.get, member_ids, repeat(0))),
            None if local_of is None else list(map(local_of.get, member_ids, repeat(0))),
        )

    def _spliced(self, member_ids: Sequence[str]) -> TargetSummary | None:
        """The summary over `member_ids` when they are the computation's members
        with only members the keeper was told of (joined, left, emptied) in or
        out, both in id order: the computation's lists with those few entries
        cut out and put back at 0. A binary search each and list copies, where
        two dicts of 10,000 members took 1.8 ms. None when that does not give
        exactly `member_ids` (another order, members it was not told of)."""
        computed = self._computed
        assert computed is not None
        told = self._emptied
        if len(told) > _MAX_SPLICED:
            return None
        ids = list(computed.member_ids)
        columns = [list(computed.summary.sizes)]
        local = computed.summary.local_counts
        if local is not None:
            columns.append(list(local))
        cut = sorted((i for i in map(_position, repeat(ids), told) if i is not None), reverse=True)
        for i in cut:
            del ids[i]
            for column in columns:
                del column[i]
        for member_id in sorted(told):
            at = _position(member_ids, member_id)
            if at is not None:
                ids.insert(at, member_id)
                for column in columns:
                    column.insert(at, 0)
        if ids != member_ids:
            return None
        return TargetSummary(columns[0], columns[1] if local is not None else None)


#: Told-of members beyond which the dicts are cheaper than splicing.
_MAX_SPLICED = 64


def _position(ids: Sequence[str], member_id: str) -> int | None:
    """Where `member_id` is in `ids` (in id order), found by binary search."""
    i = bisect_left(ids, member_id)
    return i if i < len(ids) and ids[i] == member_id else None


def counts_differently(old: MemberMetadata, new: MemberMetadata) -> bool:
    """Whether a member's target counts differently under its new metadata: its
    rack decides which partitions are local, its subscription which it may
    keep (the keeper is told: `TargetSummaryKeeper.changed`)."""
    return (
        old.rack_id != new.rack_id
        or old.subscribed_topic_names != new.subscribed_topic_names
        or old.subscribed_topic_regex != new.subscribed_topic_regex
    )
