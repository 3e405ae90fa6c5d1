"""The lease keeper: one lease round per renewal period, and what follows from it.

Each round is one statement (`GroupStore.lease_round`): renew the shards this
replica holds, release the ones `leases.plan` says it holds beyond its fair
share, acquire free ones up to it. Then:

- shards granted for the first time (or at a new owner epoch) are loaded: their
  groups are read from the store and their members get a full session from now
  (`on_acquired`), and only then served;
- shards held before but not granted now were lost (the lease expired by the
  database's clock while this replica could not renew): their groups leave
  memory with their timers (`on_lost`), before anything else runs on them;
- every granted shard is trusted until `leases.valid_until` the moment the round
  was *sent*, on this replica's monotonic clock;
- when the round's topics version differs from the one last loaded at, the topics
  are loaded again (`on_topics`: another replica changed them), before any shard
  is loaded, so that a group taken over is refreshed against the topics as they are.

A shard to release leaves memory before the statement that releases it is sent,
so this replica has stopped answering for it before anyone can take it.
`stop()` releases every shard and deregisters, so that a graceful stop hands its
shards over at once. The keeper has no timer of its own: `run()` sleeps on the
injected clock, and tests call `round()` directly (tests/unit/server/test_leasekeeper.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .clock import Clock
from .leases import LeasePlan, LeaseRequest, LeaseRound, min_margin_ms, plan, valid_until
from .shards import HeldShard, ShardTable
from .store import GroupStore, StoreUnavailable

#: After a round that still wants to acquire or release, the next one follows this soon
#: (at most `QUICK_ROUNDS` times in a row, then the renewal period again).
QUICK_ROUND_MS = 50
QUICK_ROUNDS = 4
#: Rounds `start()` runs before serving (the first one only reads the leases).
START_ROUNDS = 4
#: A round meant for another replica's lease expiry runs this long after it (by this
#: replica's clock), so that the database's clock has passed it too.
EXPIRY_SLACK_MS = 5


@dataclass(frozen=True, slots=True)
class LeaseSettings:
    """REGROUP_SHARDS, REGROUP_LEASE_MS, REGROUP_LEASE_RENEW_MS, REGROUP_ADVERTISED_ADDRESS."""

    #: Proposed at the database's first use; the stored count wins afterwards.
    shards: int = 64
    lease_ms: int = 10_000
    renew_ms: int = 3_000
    #: host:port where other replicas and clients reach this one.
    address: str = ""
    #: No other process can serve under this replica id while this one runs
    #: (server/identity.py): leases left under it by an earlier process are taken over at
    #: once, at new owner epochs, rather than waited for like another replica's.
    sole: bool = False

    @property
    def margin_ms(self) -> int:
        return min_margin_ms(self.lease_ms)


NO_PLAN = LeasePlan((), ())

ShardsChanged = Callable[[Sequence[int]], Awaitable[None]]
TopicsChanged = Callable[[], Awaitable[None]]


class LeaseKeeper:
    def __init__(
        self,
        store: GroupStore,
        table: ShardTable,
        clock: Clock,
        settings: LeaseSettings,
        *,
        on_acquired: ShardsChanged,
        on_lost: ShardsChanged,
        on_topics: TopicsChanged | None = None,
        log: Any,
        on_round: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.store = store
        self.table = table
        self.clock = clock
        self.settings = settings
        self._on_acquired = on_acquired
        self._on_lost = on_lost
        #: Runs before each round (the runtime checks that it still listens for notices).
        self._on_round = on_round
        self._on_topics = on_topics
        self.log = log
        #: The last round's answer (None before the first), and when it came (monotonic ms).
        self.view: LeaseRound | None = None
        #: The topics version `on_topics` last loaded at (None: not yet, so the first
        #: round loads them again, as they may have changed since the start loaded them).
        self.topics_version: int | None = None
        self._view_at_ms = 0
        #: Lease rounds sent, and those that failed (for tests and benchmarks).
        self.rounds = 0
        self.failed_rounds = 0
        #: Shards this replica acquired, released (its plan) and lost (taken while it could
        #: not renew), since it started: for the metrics.
        self.shards_acquired = 0
        self.shards_released = 0
        self.shards_lost = 0
        #: Set to run a round at once (another replica released shards).
        self.wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._lock = asyncio.Lock()

    @property
    def replica_id(self) -> str:
        return self.store.replica_id

    async def start(self, *, run: bool = True) -> None:
        """Learns the shard count, takes this replica's share, then (with `run`)
        keeps renewing in the background."""
        self.table.set_count(await self.store.shard_count(self.settings.shards))
        for _ in range(START_ROUNDS):
            if not await self.round():
                break
        if run:
            self._stopping = False
            self._task = asyncio.create_task(self._run(), name="regroup-leases")

    def next_plan(self) -> LeasePlan:
        """What the next round should acquire and release, from the last round's view."""
        view = self.view
        if view is None:
            return NO_PLAN
        me, held = self.replica_id, self.table.held
        # Leases under this replica's id that it does not hold, left by an earlier process.
        earlier = sorted(
            s
            for s, lease in view.leases.items()
            if lease.owner == me and s not in held and not lease.expired(view.db_now_ms)
        )
        if not earlier or not self.settings.sole:
            # Someone else's until they expire: that process may still be running.
            leases = {
                s: replace(lease, owner=f"{me} (earlier)") if s in earlier else lease
                for s, lease in view.leases.items()
            }
            return plan(me, self.table.count, leases, view.live, view.db_now_ms)
        # That process is dead (the id is this process's alone): its leases count as this
        # replica's share, and are released and acquired again in one round, which gives
        # them new owner epochs.
        todo = plan(me, self.table.count, view.leases, view.live, view.db_now_ms)
        adopted = tuple(s for s in earlier if s not in todo.release)
        return LeasePlan(tuple(sorted({*todo.acquire, *adopted})), tuple(sorted({*todo.release, *earlier})))

    async def round(self) -> bool:
        """One lease round; True when the next plan still acquires or releases."""
        async with self._lock:
            return await self._round()

    async def _round(self) -> bool:
        if self._on_round is not None:
            await self._on_round()
        todo = self.next_plan()
        held = self.table.held
        released = [s for s in todo.release if s in held]  # not an earlier process's, adopted
        if released:
            # Out of memory before the release is sent: nothing is answered for them after.
            await self._drop(released)
        request = LeaseRequest(
            replica_id=self.replica_id,
            address=self.settings.address,
            lease_ms=self.settings.lease_ms,
            renew={s: h.owner_epoch for s, h in held.items()},
            release=todo.release,
            acquire=todo.acquire,
        )
        sent_ms = self.clock.monotonic_ms()
        self.rounds += 1
        try:
            answer = await self.store.lease_round(request)
        except StoreUnavailable as e:
            # Trust runs out on its own (`ShardTable.fence`); the next round may renew.
            self.failed_rounds += 1
            self.log.warning("lease_round_failed", error=str(e), held=len(held))
            return False
        self.view = answer
        self._view_at_ms = self.clock.monotonic_ms()
        until = valid_until(sent_ms, self.settings.lease_ms, self.settings.margin_ms)
        lost = [s for s in held if s not in answer.granted or answer.granted[s] != held[s].owner_epoch]
        if lost:
            self.log.warning("shards_lost", shards=lost)
            self.shards_lost += len(lost)
            await self._drop(lost)
        acquired = []
        for shard, epoch in answer.granted.items():
            entry = held.get(shard)
            if entry is None:
                held[shard] = HeldShard(epoch, until)
                acquired.append(shard)
            else:
                entry.trusted_until_ms = until
        self.table.view_trusted_until_ms = until
        self.table.owners = {
            s: (lease.owner, answer.live.get(lease.owner, ""))
            for s, lease in answer.leases.items()
            if not lease.expired(answer.db_now_ms)
        }
        if self._on_topics is not None and answer.topics_version != self.topics_version:
            try:
                await self._on_topics()
            except StoreUnavailable as e:
                self.log.warning("topics_load_failed", error=str(e))  # the next round tries again
            else:
                self.topics_version = answer.topics_version
        self.shards_acquired += len(acquired)
        self.shards_released += len(released)
        if released or acquired:
            self.log.info(
                "shards_changed",
                acquired=acquired,
                released=released,
                held=len(held),
                live=len(answer.live),
            )
        # With the shards whose loading failed before (retried every round).
        to_load = acquired + [s for s, h in held.items() if not h.loaded and s not in acquired]
        if to_load:
            try:
                await self._on_acquired(to_load)
            except StoreUnavailable as e:
                self.log.warning("shard_load_failed", shards=to_load, error=str(e))
        following = self.next_plan()
        return bool(following.acquire or following.release)

    def next_round_ms(self, last_ms: int) -> int:
        """When the round after one sent at `last_ms` is due (monotonic ms): a renewal
        period later, or as soon as a lease this replica does not hold expires, if that
        is sooner.

        A live owner renews its leases long before they expire (a renewal period is at most
        half a lease), so the second happens only when their owner stopped renewing: it
        died, or lost the database. Its shards are then taken over at the lease's expiry
        rather than up to a renewal period after it (found by bench/replicas.py).
        """
        due = last_ms + self.settings.renew_ms
        view, held = self.view, self.table.held
        if view is None:
            return due
        expiries = [
            lease.expires_at_ms
            for shard, lease in view.leases.items()
            if shard not in held and not lease.expired(view.db_now_ms)
        ]
        if not expiries:
            return due
        # The database read its clock before the answer came: the expiry, mapped onto this
        # replica's clock from the answer's arrival, falls after the real one, never before.
        expiry = self._view_at_ms + min(expiries) - view.db_now_ms + EXPIRY_SLACK_MS
        return max(last_ms + QUICK_ROUND_MS, min(due, expiry))

    async def _drop(self, shards: Sequence[int]) -> None:
        for shard in shards:
            self.table.held.pop(shard, None)
        await self._on_lost(shards)

    async def _run(self) -> None:
        quick = 0
        while not self._stopping:
            last = self.clock.monotonic_ms()
            # Cleared before the round, not after: a wake that comes while the round runs
            # (a release noticed as it was sent) must still cause another round.
            self.wake.clear()
            try:
                again = await self.round()
            except Exception:
                self.log.exception("lease_round_crashed")
                again = False
            quick = quick + 1 if again and quick < QUICK_ROUNDS else 0
            due = last + QUICK_ROUND_MS if quick else self.next_round_ms(last)
            await self.clock.sleep_until(due, self.wake)
            if self.wake.is_set() and not self._stopping:
                # Woken early (a refused write, an unknown owner, a release elsewhere):
                # still no more than one round per QUICK_ROUND_MS, however many ask.
                await self.clock.sleep_until(last + QUICK_ROUND_MS, asyncio.Event())

    async def stop(self, *, release: bool = True) -> None:
        """Stops renewing; with `release`, hands every shard over at once and deregisters."""
        self._stopping = True
        self.wake.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if not release:
            return
        async with self._lock:
            held = sorted(self.table.held)
            await self._drop(held)
            try:
                await self.store.lease_round(
                    LeaseRequest(self.replica_id, self.settings.address, 0, {}, release=held)
                )
            except StoreUnavailable as e:
                self.log.warning("lease_release_failed", error=str(e), shards=len(held))
                return
            self.log.info("shards_released", shards=len(held))
