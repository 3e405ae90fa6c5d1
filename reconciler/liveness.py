"""A member's session while the coordinator cannot store (regroup's rule; Kafka has none).

A member must never lose its session because the coordinator could not store.
While the store is unreachable a heartbeat cannot be served: its outcome could
not be stored, and memory may lag a write that failed in doubt. It still proves
the member alive, so the shell re-arms the member's session and says so in its
COORDINATOR_NOT_AVAILABLE answer, and the member keeps what it owns instead of
giving it up when its session would have run out.

The one member this must not be said to is one that a write in doubt removed:
if that write committed, its partitions are free in the store, and a member
told that its session lives would keep working on them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .context import Context, ScheduleSessionTimeout
from .model import Group
from .records import GroupTombstone, MemberMetadataTombstone, Record


@dataclass(frozen=True, slots=True)
class WriteInDoubt:
    """A write that failed without telling whether it committed: the members it
    removes may be gone from the store; every member, when it deletes the group
    (or when the store is known to hold what memory does not)."""

    removed: frozenset[str] = frozenset()
    removes_everyone: bool = False

    @classmethod
    def of(cls, records: Iterable[Record]) -> WriteInDoubt:
        removed: set[str] = set()
        removes_everyone = False
        for record in records:
            if isinstance(record, MemberMetadataTombstone):
                removed.add(record.member_id)
            elif isinstance(record, GroupTombstone):
                removes_everyone = True
        return cls(frozenset(removed), removes_everyone)

    def may_have_removed(self, member_id: str) -> bool:
        return self.removes_everyone or member_id in self.removed

    def plus(self, other: WriteInDoubt) -> WriteInDoubt:
        """Both writes in doubt (a group that failed again before it could be reloaded)."""
        return WriteInDoubt(self.removed | other.removed, self.removes_everyone or other.removes_everyone)


#: Nothing in doubt: a write that removes nobody, or no write at all.
NOTHING_IN_DOUBT = WriteInDoubt()
#: Memory and the store are known to differ in ways memory cannot tell.
EVERYONE_IN_DOUBT = WriteInDoubt(removes_everyone=True)


def renewed_session(
    group: Group | None, member_id: str, member_epoch: int, in_doubt: WriteInDoubt, ctx: Context
) -> ScheduleSessionTimeout | None:
    """The session a heartbeat renews although the coordinator could not serve it, or None.

    Only a member of the group (as memory has it) that sends its current or its
    previous epoch (the one it still holds when the answer that moved it on was
    lost) and that the write in doubt cannot have removed. Renewing never gives
    anything away: ownership still moves only through acknowledged revocations.
    """
    if group is None or member_epoch <= 0 or in_doubt.may_have_removed(member_id):
        return None
    member = group.members.get(member_id)
    if member is None or member_epoch not in (member.member_epoch, member.previous_member_epoch):
        return None
    return ScheduleSessionTimeout(member_id, ctx.now_ms + ctx.config.session_timeout_ms)
