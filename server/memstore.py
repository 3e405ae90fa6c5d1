"""An in-memory store, for tests of the coordinator runtime without a database.

It keeps each group's stored records and rebuilds the group by replaying them on
every load, as the Postgres store rebuilds it from its rows. Outages are injected:
`down` refuses every call, as an unreachable Postgres does, and `commit_then_fail`
makes writes commit and then fail, as a connection lost before the commit's
acknowledgement does (a write in doubt).
"""

from __future__ import annotations

from collections.abc import Sequence

from regroup.reconciler import Group, Record, Topic, replay_all
from regroup.reconciler.records import SOFT_RECORDS, GroupTombstone

from .store import GroupStore, PreparedWrite, StoreConflict, StoreUnavailable


class MemoryStore:
    def __init__(self, replica_id: str = "memory") -> None:
        self.replica_id = replica_id
        self.owner_epoch = 0
        #: Transactions committed (as PostgresStore counts them).
        self.commits = 0
        #: While set, every call fails as with an unreachable database.
        self.down = False
        #: While positive, each write commits, then fails (and counts down).
        self.commit_then_fail = 0
        self._log: dict[str, list[Record]] = {}
        self._topics: dict[str, Topic] = {}
        self._owner_epochs = 0

    def _reach(self) -> None:
        if self.down:
            raise StoreUnavailable("ConnectionRefusedError: the memory store is down")

    def _committed(self) -> None:
        self.commits += 1
        if self.commit_then_fail > 0:
            self.commit_then_fail -= 1
            raise StoreUnavailable("ConnectionResetError: lost after the commit")

    async def ping(self) -> None:
        self._reach()

    async def claim_ownership(self) -> int:
        self._reach()
        self._owner_epochs += 1
        self.owner_epoch = self._owner_epochs
        return self.owner_epoch

    async def append(self, group_id: str, records: Sequence[Record] | PreparedWrite) -> None:
        if isinstance(records, PreparedWrite):
            raise NotImplementedError("MemoryStore stores records, not prepared rows")
        self._reach()
        stored = [r for r in records if not isinstance(r, SOFT_RECORDS)]
        if not stored:
            return
        log = self._log.setdefault(group_id, [])
        for record in stored:
            if isinstance(record, GroupTombstone):
                log.clear()  # what the group was before is gone with its rows
            log.append(record)
        self._committed()

    async def load_groups(self) -> dict[str, Group]:
        self._reach()
        groups = {gid: replay_all(None, gid, log) for gid, log in self._log.items()}
        return {gid: g for gid, g in groups.items() if g is not None}

    async def load_group(self, group_id: str) -> Group | None:
        self._reach()
        return replay_all(None, group_id, self._log.get(group_id, ()))

    async def group_owner(self, group_id: str) -> tuple[str, int] | None:
        self._reach()
        if replay_all(None, group_id, self._log.get(group_id, ())) is None:
            return None
        return (self.replica_id, self.owner_epoch)

    async def load_topics(self) -> list[Topic]:
        self._reach()
        return sorted(self._topics.values(), key=lambda t: t.name)

    async def put_topic(self, topic: Topic) -> None:
        self._reach()
        same_name = next((t for t in self._topics.values() if t.name == topic.name), None)
        if same_name is not None and same_name.topic_id != topic.topic_id:
            raise StoreConflict("topics_name_key", f"Topic name {topic.name!r} is taken")
        self._topics[topic.topic_id] = topic
        self._committed()

    async def delete_topic(self, topic_id: str) -> None:
        self._reach()
        self._topics.pop(topic_id, None)
        self._committed()


def _conforms(store: MemoryStore) -> GroupStore:
    return store  # mypy checks that MemoryStore keeps the runtime's contract
