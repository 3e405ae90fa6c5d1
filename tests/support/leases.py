"""Lease settings for tests that drive a manual clock without background lease rounds.

A replica answers for a shard only while its lease is trusted on its monotonic
clock (server/shards.py). A test that moves a manual clock by minutes and runs no
lease keeper in the background would find every shard untrusted; a day-long lease
keeps them trusted however far such a test moves the clock. Tests of the leases
themselves use short ones (tests/unit/server/test_leasekeeper.py).
"""

from __future__ import annotations

from collections.abc import Callable

from regroup.server.leasekeeper import LeaseSettings
from regroup.server.leases import LeaseRequest, shard_of
from regroup.server.store import Fence, GroupStore

#: The longest lease Postgres takes (an int4 of milliseconds) is 24 days: one day is plenty.
MANUAL_LEASE_MS = 86_400_000
MANUAL_LEASES = LeaseSettings(lease_ms=MANUAL_LEASE_MS, renew_ms=MANUAL_LEASE_MS // 4)


async def hold_all(store: GroupStore, *, lease_ms: int = 60_000) -> Callable[[str], Fence]:
    """Makes `store`'s replica take every free shard; returns the fence of a group's write.

    For tests of a store alone, without a lease keeper (the runtime's tests have one).
    """
    count = await store.shard_count(64)
    answer = await store.lease_round(
        LeaseRequest(store.replica_id, "127.0.0.1:1", lease_ms, {}, acquire=tuple(range(count)))
    )

    def fence(group_id: str) -> Fence:
        shard = shard_of(group_id, count)
        return Fence(shard, answer.granted.get(shard, 0))

    return fence
