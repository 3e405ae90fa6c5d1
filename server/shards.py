"""The shards this replica serves, as its lease keeper last learned them (no I/O).

Every operation on a group asks `fence(group_id, now)` first: it returns the
group's shard and the owner epoch to fence the write with, or refuses:

- the shard is another replica's: `NotCoordinator` with that replica's address;
- nobody holds it (released, or its owner died and its lease has not expired):
  `CoordinatorNotAvailable`, retry after a backoff;
- this replica acquired it and is still loading its groups: `CoordinatorLoadInProgress`;
- this replica holds it but its lease is not trusted now (the renewal is late:
  a pause, a slow or lost database): `LeaseNotTrusted`. Even a heartbeat that
  changes nothing is refused then, because another replica may be about to
  take the shard over (docs/ha.md states the rule and its margin).

Trust is read on this replica's monotonic clock (see `leases.valid_until`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from regroup.reconciler.errors import CoordinatorLoadInProgress, CoordinatorNotAvailable, NotCoordinator

from .leases import shard_of
from .store import Fence

#: Group ids whose shard is remembered (a hash per heartbeat is cheap, a dict hit cheaper).
_SHARD_CACHE_MAX = 100_000


class LeaseNotTrusted(CoordinatorNotAvailable):
    """This replica holds the group's shard but cannot trust its lease right now."""


@dataclass(slots=True)
class HeldShard:
    """A shard this replica holds: at which owner epoch, until when it may answer
    for it (monotonic ms), and whether its groups are in memory yet."""

    owner_epoch: int
    trusted_until_ms: int
    loaded: bool = False


class ShardTable:
    def __init__(self, replica_id: str, count: int = 1) -> None:
        self.replica_id = replica_id
        #: The shard count (fixed for the database's lifetime; set from the store at start).
        self.count = count
        self.held: dict[int, HeldShard] = {}
        #: shard -> (owner replica id, its advertised address), from the last lease round.
        self.owners: dict[int, tuple[str, str]] = {}
        self._shard_of: dict[str, int] = {}
        #: Called when a request finds no owner for its shard: the lease keeper looks
        #: again soon (its view may predate another replica's acquisition).
        self.owner_unknown: Callable[[], None] = lambda: None
        #: Until when (monotonic ms) the last successful lease round's view of the shards,
        #: their owners and the live replicas may be answered from: as a held lease's
        #: trust, from when that round was sent (0: no round yet).
        self.view_trusted_until_ms = 0

    def shard(self, group_id: str) -> int:
        shard = self._shard_of.get(group_id)
        if shard is None:
            if len(self._shard_of) >= _SHARD_CACHE_MAX:
                self._shard_of.clear()
            shard = self._shard_of[group_id] = shard_of(group_id, self.count)
        return shard

    def set_count(self, count: int) -> None:
        if count != self.count:
            self.count = count
            self._shard_of.clear()

    def fence(self, group_id: str, now_ms: int) -> Fence:
        """The fence for a write on the group; raises when this replica may not serve it."""
        shard = self.shard(group_id)
        held = self.held.get(shard)
        if held is None:
            raise self.not_mine(group_id, shard)
        if not held.loaded:
            raise CoordinatorLoadInProgress(
                f"This replica is loading the groups of shard {shard} (group {group_id}); retry."
            )
        if now_ms >= held.trusted_until_ms:
            raise LeaseNotTrusted(
                f"The lease of shard {shard} (group {group_id}) could not be renewed in time; retry."
            )
        return Fence(shard, held.owner_epoch)

    def check_view(self, now_ms: int) -> None:
        """Raises LeaseNotTrusted unless the last lease round's view may be answered from
        now: reads that span groups (ListGroups, FindCoordinator) follow the same rule as
        a group's operations, since a replica paused past its lease wakes up with a view
        of groups, members and owners that other replicas may have changed since."""
        if now_ms >= self.view_trusted_until_ms:
            raise LeaseNotTrusted(
                "This replica could not renew its leases in time: what it knows of the groups "
                "and their coordinators may be out of date; retry."
            )

    def not_mine(self, group_id: str, shard: int) -> NotCoordinator | CoordinatorNotAvailable:
        owner = self.owners.get(shard)
        if owner is None or owner[0] == self.replica_id:
            self.owner_unknown()
            return CoordinatorNotAvailable(
                f"No replica holds shard {shard} (group {group_id}) right now; retry after a backoff."
            )
        replica, address = owner
        error = NotCoordinator(f"Group {group_id} (shard {shard}) is coordinated by replica {replica}.")
        error.coordinator_address = address
        return error

    def serves(self, group_id: str, now_ms: int) -> bool:
        """True when an operation on the group would be served here now."""
        held = self.held.get(self.shard(group_id))
        return held is not None and held.loaded and now_ms < held.trusted_until_ms

    def holds(self, fence: Fence) -> bool:
        """True while the shard is still held at the fence's owner epoch."""
        held = self.held.get(fence.shard)
        return held is not None and held.owner_epoch == fence.owner_epoch

    def owner_of(self, group_id: str) -> tuple[int, str, str] | None:
        """(shard, owner replica id, its address) of the group's shard, if anyone holds it."""
        shard = self.shard(group_id)
        owner = self.owners.get(shard)
        return None if owner is None else (shard, *owner)

    def in_shards(self, group_ids: Iterable[str], shards: Mapping[int, object] | set[int]) -> list[str]:
        return [g for g in group_ids if self.shard(g) in shards]
