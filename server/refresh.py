"""Metadata refreshes: every topic change reaches every group it concerns.

A topic created, grown or deleted (through this replica, or through another one:
`TopicAdmin.reload`) changes the metadata of the groups subscribed to it; their
refresh bumps their epoch (`refresh_metadata`), and their next target gives the
members the new partitions. A refresh is a write of the group's, and fails as any
write does: the store away (or still believed away just after it came back), the
shard's lease in doubt, the shard moving. A failed refresh is not dropped: the
group's refresh timer tries it again every REFRESH_RETRY_MS, against the topics as
they are then, until one is stored or the group leaves this replica (whoever
loads it next refreshes it on load); when the store answers again after it was
seen away, every refresh waiting so is tried at once (`retry_now`). A refresh of a group whose stored metadata
already takes the topics in bumps nothing, so retrying is free, and so is the
refresh after a join that took the change in first.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from regroup.reconciler import Context, Group, Result, refresh_metadata
from regroup.reconciler.history import TopicChange

from .timers import TimerKey
from .writepath import NOT_SERVED, GroupWriter

#: How long after a failed refresh the group's refresh timer tries again.
REFRESH_RETRY_MS = 1_000


class GroupRefresher:
    def __init__(self, writer: GroupWriter) -> None:
        self.writer = writer
        self.log: Any = writer.log
        #: The groups whose refresh timer may be armed (see `retry_now`).
        self._waiting: set[str] = set()

    async def refresh(self, group_ids: Iterable[str]) -> None:
        """Refreshes the groups one after the other (each failure is retried on its own)."""
        for group_id in group_ids:
            await self.refresh_group(group_id)

    async def refresh_group(self, group_id: str) -> bool:
        """Refreshes the group's metadata against the topics; True when that bumped its
        epoch. When it fails, the group's refresh timer tries again while this replica
        serves the group."""
        writer = self.writer
        seen: list[tuple[TopicChange, ...]] = []

        def op(group: Group | None, ctx: Context) -> Result[bool]:
            # The changes the group's history lacks as the refresh reads the topics: once
            # it is stored, its bump told them, or the group's metadata had them already.
            seen.append(writer.topic_news(group_id))
            return Result(False) if group is None else refresh_metadata(group, ctx)

        try:
            bumped = await writer.run(group_id, op, cause="metadata_refresh")
        except NOT_SERVED as e:
            retry = group_id in writer.groups  # else it left: its next owner refreshes it
            if retry:
                key = TimerKey(group_id, "", "refresh")
                if writer.timers.deadline(key) is None:
                    writer.timers.schedule(key, writer.clock.monotonic_ms() + REFRESH_RETRY_MS)
                self._waiting.add(group_id)
            self.log.warning(
                "metadata_refresh_failed",
                group_id=group_id,
                error=str(e),
                retry_in_ms=REFRESH_RETRY_MS if retry else None,
            )
            return False
        self._waiting.discard(group_id)
        if seen:
            writer.topic_news_told(group_id, seen[-1])
        return bumped

    def forget(self, group_ids: Iterable[str]) -> None:
        """The groups left this replica (their timers went with them)."""
        self._waiting.difference_update(group_ids)

    def retry_now(self) -> None:
        """Brings every waiting refresh's timer to now (the store answers again)."""
        timers, now = self.writer.timers, self.writer.clock.monotonic_ms()
        for group_id in list(self._waiting):
            key = TimerKey(group_id, "", "refresh")
            if timers.deadline(key) is None:
                self._waiting.discard(group_id)  # its group left, with its timers
            else:
                timers.schedule(key, now)
