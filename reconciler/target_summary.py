"""Keeping the summary of a group's current targets between computations.

An assignor that reads every member's current target to count it pays, at
10,000 members, more than the baseline it is benchmarked against (docs/
benchmarks.md section 3). The uniform assignor returns each target's size and
rack-local count with its result (`GroupAssignment.summary`), and a caller that
keeps the targets of one computation can hand those numbers back with them
(`GroupSpec.current_summary`), so that the next computation reads two ints per
member instead of every target.

The keeper is whoever holds the targets between computations: the worker's
copy of a big group (server/assigner.py). It must know exactly which members'
targets changed since the computation it summarised, and over which topics
that computation ran: a summary is given only when no member holds a target
the computation did not return and the topics are the same (`topics_key`).
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Sequence
from itertools import repeat

from .assignors.base import TargetSummary
from .model import Assignment


class TargetSummaryKeeper:
    """The sizes and local counts of the current targets, as the last
    computation returned them, and which members' targets it cannot vouch for."""

    __slots__ = ("_local_counts", "_sizes", "_topics_key", "_unsummarised")

    def __init__(self) -> None:
        self._sizes: dict[str, int] = {}
        #: None: the last computation counted no local partitions (no racks).
        self._local_counts: dict[str, int] | None = None
        #: The topics the last computation ran over (None: nothing summarised).
        self._topics_key: Hashable | None = None
        #: Members whose non-empty target did not come from the last computation.
        self._unsummarised: set[str] = set()

    def changed(self, member_id: str, target: Assignment) -> None:
        """The member's target is now `target`, from elsewhere than the last
        computation (or the member's rack or subscription changed: its counts
        are not vouched for either)."""
        self._sizes.pop(member_id, None)
        if self._local_counts is not None:
            self._local_counts.pop(member_id, None)
        if target:
            self._unsummarised.add(member_id)
        else:
            self._unsummarised.discard(member_id)

    def removed(self, member_id: str) -> None:
        self.changed(member_id, {})

    def computed(
        self,
        member_ids: Sequence[str],
        summary: TargetSummary | None,
        topics_key: Hashable,
        holders: Collection[str],
    ) -> None:
        """A computation over the topics `topics_key` gave each of `member_ids`
        the target `summary` describes (None: it did not say), and the members
        it left out (draining ones) nothing. `holders`: the members that hold a
        target now, read only when there is no summary."""
        if summary is None:
            self._sizes, self._local_counts, self._topics_key = {}, None, None
            self._unsummarised = set(holders)
            return
        self._sizes = dict(zip(member_ids, summary.sizes, strict=True))
        local = summary.local_counts
        self._local_counts = None if local is None else dict(zip(member_ids, local, strict=True))
        self._topics_key = topics_key
        self._unsummarised = set()

    def summary(self, member_ids: Sequence[str], topics_key: Hashable) -> TargetSummary | None:
        """The summary of the members' current targets, aligned with
        `member_ids`, when it can be vouched for: same topics, and every member
        that holds a target holds the one the last computation gave it (a member
        with no entry holds nothing: size 0). Two C passes over the members."""
        if self._topics_key is None or self._topics_key != topics_key or self._unsummarised:
            return None
        sizes = list(map(self._sizes.get, member_ids, repeat(0)))
        local = self._local_counts
        return TargetSummary(sizes, None if local is None else list(map(local.get, member_ids, repeat(0))))
