"""Shard leases (server/leases.py) with injected clocks: a stable shard hash, a fair
spread, takeover only after expiry by the database's clock, a paused owner that stops
trusting its lease before anyone can take it, and release on stop.

The simulation keeps real time as the database's clock and gives every replica a
monotonic clock of its own (another origin, a rate off by up to the allowed drift),
request and response delays, pauses (SIGSTOP), lost connections to the database,
crashes and graceful stops."""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from regroup.server.leases import (
    MAX_CLOCK_DRIFT,
    Lease,
    fair_share,
    min_margin_ms,
    plan,
    shard_of,
    valid_until,
)
from tests.support.depth import examples

LEASE_MS = 1_000
RENEW_MS = 300
MARGIN_MS = min_margin_ms(LEASE_MS)
SHARDS = 16


def test_shard_of_is_stable_and_spreads() -> None:
    # Fixed values: the hash is part of the stored data's meaning and never changes.
    assert [shard_of(g, 64) for g in ("orders", "payments", "", "grüße")] == [13, 25, 52, 25]
    digest = hashlib.blake2b("grüße".encode(), digest_size=8).digest()
    assert shard_of("grüße", 1_000) == int.from_bytes(digest, "big") % 1_000
    counts = [0] * 64
    for i in range(64_000):
        counts[shard_of(f"group-{i}", 64)] += 1
    assert min(counts) > 800 and max(counts) < 1_200
    with pytest.raises(ValueError):
        shard_of("g", 0)


def test_plan_takes_a_fair_share_and_releases_the_excess() -> None:
    assert fair_share(64, 3) == 22 and fair_share(64, 0) == 64
    first = plan("a", 8, {}, ["a", "b"], db_now_ms=0)
    assert len(first.acquire) == 4 and first.release == ()
    held = {s: Lease(s, "a", 1, 5_000) for s in range(8)}
    # A third replica appears: a keeps ceil(8 / 3) = 3 and releases the highest others.
    assert plan("a", 8, held, ["a", "b", "c"], db_now_ms=0).release == (3, 4, 5, 6, 7)


def test_a_dead_owners_shards_are_free_only_once_expired_by_the_database_clock() -> None:
    leases = {0: Lease(0, "dead", 3, expires_at_ms=1_000)}
    assert 0 not in plan("b", 1, leases, ["b"], db_now_ms=999).acquire
    assert plan("b", 1, leases, ["b"], db_now_ms=1_000).acquire == (0,)


def test_a_lease_is_trusted_from_the_renewals_sending() -> None:
    assert valid_until(renew_sent_ms=10_000, lease_ms=LEASE_MS, margin_ms=MARGIN_MS) == 10_989


# -- the simulation ------------------------------------------------------------


@dataclass
class Replica:
    name: str
    origin: int
    rate: float
    #: shard -> (owner epoch, trusted until on this replica's clock)
    trusted: dict[int, tuple[int, int]] = field(default_factory=dict)
    paused_until: int = -1
    #: Until then its requests do not reach the database (a lost connection): it runs on.
    cut_until: int = -1
    dead: bool = False

    def clock(self, real: int) -> int:
        return self.origin + int(real * self.rate)

    def running(self, real: int) -> bool:
        return not self.dead and real >= self.paused_until

    def claims(self, real: int) -> set[int]:
        now = self.clock(real)
        return {s for s, (_, until) in self.trusted.items() if now < until}


class Cluster:
    """Real time is the database's clock."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.now = 0
        self.rows: dict[int, Lease] = {}
        self.epochs = 0
        self.replicas: dict[str, Replica] = {}
        self.registered: dict[str, int] = {}  # replica -> registration expiry (database clock)
        self.checks = 0

    def add(self, name: str) -> None:
        drift = self.rng.uniform(-MAX_CLOCK_DRIFT, MAX_CLOCK_DRIFT) * 0.9
        self.replicas[name] = Replica(name, self.rng.randrange(10**9), 1 + drift)

    def live(self) -> list[str]:
        return [r for r, until in self.registered.items() if until > self.now]

    def round(self, replica: Replica) -> None:
        """One renewal period of `replica`: one statement that renews what it holds,
        releases and acquires what its plan says; the answer comes back later."""
        sent = replica.clock(self.now)
        self.now += self.rng.randrange(0, 40)  # to the database
        if self.now < replica.cut_until:
            self.check()  # lost on the way: it keeps what it trusted, until that runs out
            return
        self.registered[replica.name] = self.now + LEASE_MS
        decision = plan(replica.name, SHARDS, self.rows, self.live(), self.now)
        granted: dict[int, int] = {}
        for shard, lease in list(self.rows.items()):
            if lease.owner == replica.name and not lease.expired(self.now) and shard not in decision.release:
                self.rows[shard] = Lease(shard, lease.owner, lease.owner_epoch, self.now + LEASE_MS)
                granted[shard] = lease.owner_epoch
        for shard in decision.release:
            del self.rows[shard]
        for shard in decision.acquire:
            current = self.rows.get(shard)
            if current is None or current.expired(self.now):
                self.epochs += 1
                assert current is None or current.owner_epoch < self.epochs  # fencing tokens only grow
                self.rows[shard] = Lease(shard, replica.name, self.epochs, self.now + LEASE_MS)
                granted[shard] = self.epochs
        self.now += self.rng.randrange(0, 40)  # the answer back
        self.check()
        if replica.running(self.now):
            # Released and lost shards are no longer trusted; granted ones from the sending.
            replica.trusted = {s: (e, valid_until(sent, LEASE_MS, MARGIN_MS)) for s, e in granted.items()}
        self.check()

    def stop_gracefully(self, replica: Replica) -> None:
        replica.trusted.clear()  # stops answering first, then releases
        for shard, lease in list(self.rows.items()):
            if lease.owner == replica.name:
                del self.rows[shard]
        self.registered.pop(replica.name, None)
        replica.dead = True

    def check(self) -> None:
        """No shard is trusted by two running replicas at any instant."""
        seen: dict[int, str] = {}
        for replica in self.replicas.values():
            if not replica.running(self.now):
                continue
            for shard in replica.claims(self.now):
                assert shard not in seen, (
                    f"shard {shard} trusted by {seen[shard]} and {replica.name} at {self.now}"
                )
                seen[shard] = replica.name
        self.checks += 1

    def settle(self, periods: int) -> None:
        for _ in range(periods):
            for replica in list(self.replicas.values()):
                if replica.running(self.now):
                    self.round(replica)
            self.now += RENEW_MS


FAULTS = st.lists(
    st.tuples(
        st.sampled_from(["pause", "cut", "crash", "stop", "add", "quiet"]),
        st.integers(0, 9),
        st.integers(1, 4_000),
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=examples(200), deadline=None)
@given(faults=FAULTS, seed=st.integers(0, 2**32))
def test_no_shard_is_ever_trusted_by_two_replicas_and_the_spread_is_fair(
    faults: list[tuple[str, int, int]], seed: int
) -> None:
    cluster = Cluster(random.Random(seed))
    for name in ("r0", "r1", "r2"):
        cluster.add(name)
    cluster.settle(4)
    added = 3
    for kind, index, ms in faults:
        alive = [r for r in cluster.replicas.values() if not r.dead]
        replica = alive[index % len(alive)] if alive else None
        if kind == "cut" and replica is not None:
            replica.cut_until = cluster.now + ms
        elif kind == "pause" and replica is not None:
            replica.paused_until = cluster.now + ms  # SIGSTOP: its clock runs on meanwhile
        elif kind == "crash" and replica is not None and len(alive) > 1:
            replica.dead = True  # SIGKILL: its leases stay until they expire
        elif kind == "stop" and replica is not None and len(alive) > 1:
            cluster.stop_gracefully(replica)
        elif kind == "add":
            cluster.add(f"r{added}")
            added += 1
        cluster.settle(ms // RENEW_MS + 1)

    # Quiet now: within a few lease periods every shard has an owner and the spread is fair.
    for replica in cluster.replicas.values():
        replica.paused_until = replica.cut_until = -1
    cluster.settle(4 * LEASE_MS // RENEW_MS + 4)
    alive = [r for r in cluster.replicas.values() if not r.dead]
    held = {r.name: r.claims(cluster.now) for r in alive}
    assert set().union(*held.values()) == set(range(SHARDS))
    share = fair_share(SHARDS, len(alive))
    assert all(len(shards) <= share for shards in held.values()), held
    assert cluster.checks > 0


def test_a_paused_owner_stops_trusting_its_lease_before_it_can_be_taken() -> None:
    cluster = Cluster(random.Random(1))
    cluster.add("a")
    cluster.add("b")
    cluster.settle(4)
    a = cluster.replicas["a"]
    owned = a.claims(cluster.now)
    assert owned
    a.paused_until = cluster.now + 5 * LEASE_MS
    while cluster.now < a.paused_until:
        cluster.settle(1)  # b takes a's shards once they expire by the database clock
    assert owned <= cluster.replicas["b"].claims(cluster.now)
    # a resumes: before its next renewal it already trusts none of them.
    assert a.claims(cluster.now) == set()


def test_a_graceful_stop_hands_the_shards_over_at_once() -> None:
    cluster = Cluster(random.Random(2))
    cluster.add("a")
    cluster.add("b")
    cluster.settle(4)
    owned = cluster.replicas["a"].claims(cluster.now)
    cluster.stop_gracefully(cluster.replicas["a"])
    cluster.settle(1)  # one renewal period, not a lease period
    assert owned <= cluster.replicas["b"].claims(cluster.now)
