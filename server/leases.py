"""Shards and their leases: which replica serves which groups (issue 20, first part).

Pure: no I/O, every time an argument. The store will run the statements; this module
decides what to ask for and for how long a lease may be trusted.

- Every group belongs to one of a fixed number of shards: `shard_of(group_id, shards)`,
  a stable hash (BLAKE2b of the UTF-8 id, 8 bytes big-endian, modulo the shard count),
  the same in every process and language.
- Each shard has a lease in Postgres: owner replica, owner epoch (a fencing token from a
  sequence), expiry. Expiry is read and written on **the database's clock only**
  (`now()` in the statement that acquires or renews), so one clock decides when a
  lease ran out.
- A replica trusts its lease on **its own monotonic clock**, from the moment it *sent*
  the renewal that the database answered: the database set the expiry to its `now()`
  plus the lease length, and that `now()` came after the sending. Minus a margin for
  the clocks' rates (`valid_until`). A replica paused for longer than that (SIGSTOP, a
  long GC, a lost database) finds its lease untrusted when it resumes, before it could
  answer anything, while a new owner waits for the database clock to pass the expiry.
- `plan` spreads the shards: a replica holds at most its fair share (the shard count
  over the live replicas, rounded up), releases what it holds beyond it, and acquires
  free shards (never leased, released, or expired by the database clock) up to it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

#: The clocks' rates may differ by this fraction (NTP keeps real ones within 500 ppm).
MAX_CLOCK_DRIFT = 0.001


def shard_of(group_id: str, shards: int) -> int:
    """The shard a group belongs to; stable across processes, versions and languages."""
    if shards < 1:
        raise ValueError(f"the shard count must be at least 1, got {shards}")
    digest = hashlib.blake2b(group_id.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shards


@dataclass(frozen=True, slots=True)
class Lease:
    """A shard's lease as the database holds it (`expires_at_ms`: the database's clock)."""

    shard: int
    owner: str
    owner_epoch: int
    expires_at_ms: int

    def expired(self, db_now_ms: int) -> bool:
        return self.expires_at_ms <= db_now_ms


@dataclass(frozen=True, slots=True)
class LeasePlan:
    """What a replica asks for in one renewal period, besides renewing what it keeps."""

    acquire: tuple[int, ...]
    release: tuple[int, ...]


def fair_share(shards: int, replicas: int) -> int:
    """The most shards a replica holds while `replicas` are alive (rounded up)."""
    return -(-shards // max(1, replicas))


def plan(
    me: str, shards: int, leases: Mapping[int, Lease], live: Collection[str], db_now_ms: int
) -> LeasePlan:
    """The shards `me` should acquire and release now.

    `leases`: the lease rows (shards never leased are absent); `live`: the replicas
    that registered recently (`me` counts in any case); `db_now_ms`: the database's
    clock when the rows were read. A shard whose owner died stays taken until its
    lease expires by the database's clock: liveness never overrides a lease.
    """
    target = fair_share(shards, len(set(live) | {me}))
    mine = sorted(s for s, lease in leases.items() if lease.owner == me and not lease.expired(db_now_ms))
    if len(mine) > target:
        # The highest-numbered ones: a plain rule, the same on every replica.
        return LeasePlan((), tuple(mine[target:]))
    free = [s for s in range(shards) if s not in leases or leases[s].expired(db_now_ms)]
    wanted = target - len(mine)
    if wanted <= 0 or not free:
        return LeasePlan((), ())
    # Start at a place of our own in the free list, so that replicas acquiring at the
    # same time mostly ask for different shards (the statement settles any overlap).
    start = shard_of(me, len(free))
    ordered = free[start:] + free[:start]
    return LeasePlan(tuple(sorted(ordered[:wanted])), ())


def valid_until(renew_sent_ms: int, lease_ms: int, margin_ms: int) -> int:
    """Until when (this replica's monotonic clock) a lease renewed by a request sent at
    `renew_sent_ms` may be trusted: the database set its expiry after that instant."""
    return renew_sent_ms + lease_ms - margin_ms


def min_margin_ms(lease_ms: int) -> int:
    """The least safety margin for `lease_ms`: the clocks' rates may differ by
    `MAX_CLOCK_DRIFT` over a whole lease, and a timer may fire a tick late."""
    return int(lease_ms * MAX_CLOCK_DRIFT) + 10


@dataclass(frozen=True, slots=True)
class LeaseRequest:
    """One renewal period of a replica: what it renews, releases and acquires."""

    replica_id: str
    #: Where other replicas and clients reach it.
    address: str
    lease_ms: int
    #: shard -> the owner epoch it is held at.
    renew: Mapping[int, int]
    release: Sequence[int] = ()
    acquire: Sequence[int] = ()


@dataclass(frozen=True, slots=True)
class LeaseRound:
    """What one renewal period's statement answered (see migrations/0005_shard_leases.sql
    and 0006_topics_version.sql)."""

    #: The database's clock when the round ran.
    db_now_ms: int
    #: The shards this replica holds after the round, by owner epoch (renewed or acquired).
    granted: Mapping[int, int]
    #: Every lease, by shard.
    leases: Mapping[int, Lease]
    #: The live replicas and their advertised addresses.
    live: Mapping[str, str]
    #: Moves whenever the topics change (migrations/0006_topics_version.sql): a replica
    #: reloads its topics when it differs from the one it last loaded at.
    topics_version: int = 0


def lease_round_from_json(value: Mapping[str, object]) -> LeaseRound:
    """The round as `regroup_lease_round` returns it (a JSON object)."""
    granted = value["granted"]
    leases = value["leases"]
    live = value["live"]
    assert isinstance(granted, dict) and isinstance(leases, list) and isinstance(live, list)
    db_now = value["now_ms"]
    assert isinstance(db_now, int)
    topics_version = value.get("topics_version") or 0
    assert isinstance(topics_version, int)
    return LeaseRound(
        db_now_ms=db_now,
        granted={int(shard): int(epoch) for shard, epoch in granted.items()},
        leases={int(s): Lease(int(s), str(o), int(e), int(x)) for s, o, e, x in leases},
        live={str(r): str(a) for r, a in live},
        topics_version=topics_version,
    )
