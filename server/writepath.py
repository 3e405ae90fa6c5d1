"""The write path: serialises operations per group, runs the engine, stores, replays.

For every operation on a group: check that this replica serves the group's
shard now (`shards.ShardTable.fence`: held, loaded, lease trusted), take the
group's lock, run the pure engine with the current time and topic image, store
the records it returned in one transaction fenced by the shard's owner epoch,
replay them into memory, arm its timers, and only then answer. An operation
that produced no record writes nothing. Groups run concurrently. A write that
failed leaves its group stale: reloaded from the store before its next use.
The lease keeper adds and removes whole shards (`take_shards`, `drop_shards`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from regroup.reconciler import (
    ApiError,
    CancelRebalanceTimeout,
    CancelTimeouts,
    Context,
    Group,
    GroupConfig,
    GroupState,
    MemberState,
    Record,
    Result,
    ScheduleAssignment,
    ScheduleRebalanceTimeout,
    ScheduleSessionTimeout,
    TimerOp,
    TopicsImage,
    replay_all,
)
from regroup.reconciler.connect import connectors_image
from regroup.reconciler.errors import CoordinatorLoadInProgress, CoordinatorNotAvailable, NotCoordinator
from regroup.reconciler.history import NO_CIRCUMSTANCES, Circumstances, GroupEvent, TopicChange, derive_events
from regroup.reconciler.liveness import EVERYONE_IN_DOUBT, NOTHING_IN_DOUBT, WriteInDoubt
from regroup.reconciler.model import CONNECT_GROUP_TYPE
from regroup.reconciler.records import GroupMetadataRecord, TargetAssignmentEpochRecord
from regroup.reconciler.subscription import subscribes_to_any

from .assigner import Assigner
from .clock import Clock
from .events import log_records
from .history import with_sequences
from .shards import ShardTable
from .store import Fence, GroupStore, NotOwner, PreparedWrite, StoreConflict, StoreUnavailable, prepare_write
from .storewatch import StoreWatch
from .telemetry import Metrics
from .timers import TimerKey, TimerQueue
from .writebatch import BATCH_MAX_MEMBERS, DeferredLog, Queued

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer

T = TypeVar("T")

#: The states of a group whose rebalance is in progress.
_REBALANCING = frozenset({GroupState.ASSIGNING, GroupState.RECONCILING})
Operation = Callable[[Group | None, Context], Result[T]]
#: An operation that awaits part of its work elsewhere (the group stays locked meanwhile).
AsyncOperation = Callable[[Group | None, Context], Awaitable[Result[T]]]

#: What a group operation refuses with while this replica does not serve the group's
#: shard (or cannot store); background work logs it and tries again later.
NOT_SERVED = (CoordinatorNotAvailable, CoordinatorLoadInProgress, NotCoordinator)

#: What every request the store failed is answered (COORDINATOR_NOT_AVAILABLE), whatever
#: the failure: the driver's own text (a refused socket, a reset connection) is logged,
#: never sent (README.md, "When Postgres is away").
STORE_UNREACHABLE = "The store (Postgres) is unreachable; retry after a backoff."


def store_unreachable() -> CoordinatorNotAvailable:
    """The refusal of a request the store failed (log the failure itself where it is caught)."""
    return CoordinatorNotAvailable(STORE_UNREACHABLE)


#: An operation computed elsewhere with more records than this prepares its rows in a thread.
PREPARE_INLINE_MAX_RECORDS = 32

#: The operations that are a member's heartbeat (metrics count them unchanged or written).
HEARTBEAT_CAUSES = frozenset({"heartbeat", "leave"})
#: Up to this many members, whether a group became Stable is read after each of its writes;
#: a bigger group is read at most once per STABLE_CHECK_MS (the state passes over members).
STABLE_CHECK_EVERY_WRITE_MAX = 200
STABLE_CHECK_MS = 50


class _KeyedLocks:
    """One asyncio.Lock per group id, dropped when nobody holds or waits for it.

    `take` and `give_back` bracket the use of a lock (plain calls rather than
    an async context manager: this runs on every heartbeat).
    """

    def __init__(self) -> None:
        self._locks: dict[str, list[Any]] = {}

    def take(self, key: str) -> asyncio.Lock:
        entry = self._locks.get(key)
        if entry is None:
            entry = self._locks[key] = [asyncio.Lock(), 0]
        entry[1] += 1
        lock: asyncio.Lock = entry[0]
        return lock

    def idle(self, key: str) -> bool:
        """True when nobody holds or waits for the key's lock."""
        return key not in self._locks

    def give_back(self, key: str) -> None:
        entry = self._locks[key]
        entry[1] -= 1
        if entry[1] == 0:
            del self._locks[key]


class GroupWriter:
    """The groups in memory and the one way they change (`run`)."""

    def __init__(
        self,
        store: GroupStore,
        config: GroupConfig,
        clock: Clock,
        timers: TimerQueue,
        assigner: Assigner,
        log: Any,
    ) -> None:
        self.store = store
        self.config = config
        self.clock = clock
        self.timers = timers
        self.assigner = assigner
        self.log = log
        self.groups: dict[str, Group] = {}
        #: The topics (the admin changes it; see topicadmin.py).
        self.image = TopicsImage()
        #: Connect groups' resource images (the consumer groups' topics' analogue), each
        #: with the connectors dict it was built from: replaying new connectors replaces it.
        self._connect_images: dict[str, tuple[dict[str, int], TopicsImage]] = {}
        self._locks = _KeyedLocks()
        #: Groups whose last write failed: memory may not match the store until the
        #: group is reloaded. The value says what the failed write may have removed.
        self._stale: dict[str, WriteInDoubt] = {}
        #: What is known of the store's reachability (the app sets it; none: assumed up).
        #: While it says the store is down, requests that need the store are refused at
        #: once instead of waiting on a connection; a failed request makes it check at once.
        self.watch: StoreWatch | None = None
        #: The shards this replica serves (the lease keeper keeps it).
        self.shards = ShardTable(store.replica_id)
        #: Called when the store refused a write's fence: the lease keeper looks at once.
        self.fence_failed: Callable[[], None] = lambda: None
        #: Where the write path records (no-ops until the app gives it a provider's).
        self.metrics = Metrics()
        #: The tracer of the RPCs' spans and their children (None: traces are off).
        self.tracer: Tracer | None = None
        #: Groups whose epoch was bumped and that have not been Stable since: when (wall ms).
        self._unsettled: dict[str, int] = {}
        #: Big groups whose Stable check waits (at most one check per STABLE_CHECK_MS each).
        self._stable_checks: dict[str, asyncio.TimerHandle] = {}
        #: Heartbeats waiting for their group's lock, served together (writebatch.py).
        self._queued: dict[str, list[Queued[Any]]] = {}
        self._batches: set[asyncio.Task[None]] = set()
        #: Told of every change stored and replayed (the group after it, None once deleted):
        #: member streams nudge the members it concerns (server/streams.py).
        self.on_written: Callable[[str, Group | None, Sequence[Record]], None] | None = None
        #: Each group keeps its newest this many events (0: no history is kept); the oldest
        #: beyond are dropped in one of the group's writes per tenth of that many events.
        self.history_max_events = 10_000
        self._events_since_trim: dict[str, int] = {}
        #: Told of every write's events, with their sequences (WatchGroup streams).
        self.on_events: Callable[[str, list[GroupEvent]], None] | None = None
        #: What happened to the topics a group subscribes to that its history does not
        #: tell yet (`install_topics`): told by the first write of the group's whose
        #: metadata takes it in, whatever its cause (the group's refresh, or a join or
        #: a leave that came first), as events of that write.
        self._topic_news: dict[str, tuple[TopicChange, ...]] = {}

    async def load_topics(self) -> None:
        """Loads every topic from the store."""
        self.image = TopicsImage(await self.store.load_topics(), version=self.image.version + 1)
        self._connect_images.clear()

    def install_topics(
        self, image: TopicsImage, changed: Collection[str], changes: Mapping[str, TopicChange]
    ) -> list[str]:
        """Makes `image` the topics, where the topics named `changed` changed (`changes`:
        what happened to those created, grown or deleted). Answers the groups this
        concerns, whose metadata needs a refresh: those with members subscribed to a
        changed topic, by name or regex (Connect groups share connectors, not topics).

        What happened is kept for each of them (`_topic_news`) in the same step as the
        image changes: no write of theirs can take the new image in without telling it.
        """
        self.image = image
        concerned = [
            g
            for g in self.groups.values()
            if g.members and g.group_type != CONNECT_GROUP_TYPE and subscribes_to_any(g, changed)
        ]
        if self.history_max_events > 0:
            for group in concerned:
                mine = tuple(c for name, c in changes.items() if subscribes_to_any(group, (name,)))
                if mine:
                    known = self._topic_news.get(group.group_id, ())
                    self._topic_news[group.group_id] = known + tuple(c for c in mine if c not in known)
        return [g.group_id for g in concerned]

    def topic_news(self, group_id: str) -> tuple[TopicChange, ...]:
        """The group's topic changes its history does not tell yet."""
        return self._topic_news.get(group_id, ())

    def topic_news_told(self, group_id: str, told: Collection[TopicChange]) -> None:
        """Forgets the group's topic changes in `told`: stored as its events, or taken in
        by its metadata already (others that came meanwhile stay)."""
        if not told:
            return
        left = tuple(c for c in self._topic_news.get(group_id, ()) if c not in told)
        if left:
            self._topic_news[group_id] = left
        else:
            self._topic_news.pop(group_id, None)

    def _news_in(
        self,
        group_id: str,
        before: Group | None,
        records: Sequence[Record],
        told: Collection[TopicChange] = (),
    ) -> tuple[TopicChange, ...]:
        """The group's topic news that `records` tell: all of them (less `told`) when the
        records move its metadata, which the engine computes from the current image
        (a drain's bump keeps the metadata: the refresh after it tells them)."""
        news = self._topic_news.get(group_id)
        if not news or before is None:
            return ()
        moved = any(
            type(r) is GroupMetadataRecord and r.metadata_hash != before.metadata_hash for r in records
        )
        return tuple(c for c in news if c not in told) if moved else ()

    async def take_shards(self, shards: Collection[int]) -> list[str]:
        """Loads the groups of shards this replica just acquired and arms their timers
        from now (a full session for every member, as Kafka does when a coordinator
        moves); returns their ids. Raises StoreUnavailable (the keeper retries)."""
        group_ids = self.shards.in_shards(await self.store.group_ids(), set(shards))
        loaded = await self.store.load_groups(group_ids)
        now = self.clock.monotonic_ms()
        for group_id in group_ids:
            self._forget(group_id)
        for group_id, group in loaded.items():
            self.groups[group_id] = group
            self.arm_loaded_timers(group, now)
        for shard in shards:
            held = self.shards.held.get(shard)
            if held is not None:
                held.loaded = True
        return list(loaded)

    def drop_shards(self, shards: Collection[int]) -> list[str]:
        """Forgets the groups of shards this replica no longer serves, with their
        timers: only a shard's owner fires them. Returns their ids."""
        wanted = set(shards)
        dropped = [g for g in self.groups if self.shards.shard(g) in wanted]
        dropped += [g for g in self._stale if g not in self.groups and self.shards.shard(g) in wanted]
        for group_id in dropped:
            self._forget(group_id)
        self.timers.cancel_where(lambda key: key.group_id != "" and self.shards.shard(key.group_id) in wanted)
        return dropped

    def _forget(self, group_id: str) -> None:
        self.groups.pop(group_id, None)
        self._stale.pop(group_id, None)
        self._topic_news.pop(group_id, None)
        self._connect_images.pop(group_id, None)
        self.assigner.forget((group_id,))
        self._unsettled.pop(group_id, None)
        self._events_since_trim.pop(group_id, None)
        check = self._stable_checks.pop(group_id, None)
        if check is not None:
            check.cancel()

    def in_doubt(self, group_id: str) -> WriteInDoubt:
        """What the group's failed writes may have changed (nothing when it is current)."""
        return self._stale.get(group_id, NOTHING_IN_DOUBT)

    def arm_loaded_timers(self, group: Group, now: int) -> None:
        """As Kafka does on load: a full session for everyone, and a full
        rebalance timeout for members that still owe a revocation.

        Also when a group is reloaded after a failed write: its members may have
        heartbeated all along without the coordinator being able to store (and
        their timers may be overdue, retried while the store was away). A member
        must never lose its session because the coordinator could not store.
        Both deadlines only move later: none can be beyond a full one from now.
        """
        for member in group.members.values():
            self.timers.schedule(
                TimerKey(group.group_id, member.member_id, "session"), now + self.config.session_timeout_ms
            )
            if member.state is MemberState.UNREVOKED_PARTITIONS:
                self.timers.schedule(
                    TimerKey(group.group_id, member.member_id, "rebalance"),
                    now + member.rebalance_timeout_ms,
                    member.member_epoch,
                )

    def image_for(self, group_id: str, group_type: str | None = None) -> TopicsImage:
        """The resources a group's members share: topics, or a Connect group's connectors."""
        group = self.groups.get(group_id)
        if group is not None:
            group_type = group.group_type
        if group_type != CONNECT_GROUP_TYPE:
            return self.image
        connectors = {} if group is None else group.connectors
        cached = self._connect_images.get(group_id)
        if cached is None or cached[0] is not connectors:
            cached = (connectors, connectors_image(connectors))
            if group is not None:
                self._connect_images[group_id] = cached
        return cached[1]

    async def run(
        self,
        group_id: str,
        op: Operation[T] | AsyncOperation[T],
        *,
        cause: str,
        new_member_id: str = "",
        group_type: str | None = None,
        computed_elsewhere: bool = False,
        circumstances: Circumstances = NO_CIRCUMSTANCES,
    ) -> T:
        """Runs `op` on the group under its lock; stores and replays its records, and the
        events they make (`circumstances`: what the records do not tell of them).

        An `AsyncOperation` may await: the lock keeps the group unchanged
        meanwhile, and a large write it returns (a big group's computed target)
        is prepared in a thread.
        """
        fence = self.shards.fence(group_id, self.clock.monotonic_ms())
        group: Group | None = None
        outcome: Result[T] | Awaitable[Result[T]] | None = None
        op_now_ms = 0
        compute_ms = 0
        if self._locks.idle(group_id) and group_id not in self._stale:
            # Nothing is in flight for the group, so memory is current and, until
            # this awaits, nothing else can run on it: compute before taking the
            # lock. Most heartbeats change nothing and are answered right here;
            # an operation that writes or awaits takes the lock (free, so
            # without yielding) before its first await.
            group = self.groups.get(group_id)
            ctx = self.context(group_id, group, group_type, new_member_id)
            started = time.perf_counter()
            outcome, op_now_ms = op(group, ctx), ctx.now_ms
            if isinstance(outcome, Result) and not outcome.records:
                return self._answered_unchanged(group_id, outcome, cause, op_now_ms).response
            if isinstance(outcome, Result) and not computed_elsewhere:
                compute_ms = self._note_inline_computation(outcome.records, started)
        if outcome is None and cause in HEARTBEAT_CAUSES and not computed_elsewhere:
            return await self._queue(group_id, op, cause, new_member_id, group_type)  # type: ignore[arg-type]
        lock = self._locks.take(group_id)
        try:
            async with lock:
                if outcome is None:
                    return await self._run_locked(
                        group_id, op, cause, new_member_id, group_type, computed_elsewhere, circumstances
                    )
                return await self._finish(
                    group_id, group, outcome, cause, op_now_ms, fence, circumstances, compute_ms
                )
        finally:
            self._locks.give_back(group_id)

    # -- heartbeats served in batches (see writebatch.py) ----------------------------

    async def _queue(
        self, group_id: str, op: Operation[T], cause: str, new_member_id: str, group_type: str | None
    ) -> T:
        """Waits for the group's lock with the other heartbeats queued for it, and is
        served with them (by a task of their own: a caller that goes away does not
        take the others' turn with it)."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        entry = Queued(op, cause, new_member_id, group_type, future)
        queue = self._queued.get(group_id)
        if queue is not None:
            queue.append(entry)
        else:
            self._queued[group_id] = [entry]
            # Taken now, so that the fast path sees the group busy from this moment.
            lock = self._locks.take(group_id)
            task = asyncio.get_running_loop().create_task(self._serve_queue(group_id, lock))
            self._batches.add(task)
            task.add_done_callback(self._batches.discard)
        return await future

    async def _serve_queue(self, group_id: str, lock: asyncio.Lock) -> None:
        try:
            async with lock:
                queue = self._queued.pop(group_id)  # heartbeats arriving from now on queue anew
                try:
                    await self._serve_batch(group_id, queue)
                except BaseException as e:
                    for entry in queue:
                        entry.fail(e)
                    if not isinstance(e, Exception):
                        raise
        finally:
            self._locks.give_back(group_id)

    async def _serve_batch(self, group_id: str, queue: list[Queued[Any]]) -> None:
        """With the group's lock held: the queued heartbeats, as one write when worth it."""
        fence = self.shards.fence(group_id, self.clock.monotonic_ms())
        group = await self._current_group(group_id)
        if len(queue) == 1 or (group is not None and len(group.members) > BATCH_MAX_MEMBERS):
            for entry in queue:
                try:
                    entry.resolve(
                        await self._run_locked(
                            group_id, entry.op, entry.cause, entry.new_member_id, entry.group_type
                        )
                    )
                except Exception as e:  # noqa: BLE001 - its caller's, as `run` would raise it
                    entry.fail(e)
            return
        work = None if group is None else group.clone()
        log = DeferredLog()
        served: list[tuple[Queued[Any], Result[Any], int]] = []
        records: list[Record] = []
        events: list[GroupEvent] = []
        bumps: list[str] = []
        news: tuple[TopicChange, ...] = ()
        for entry in queue:
            ctx = self.context(group_id, work, entry.group_type, entry.new_member_id)
            started = time.perf_counter()
            try:
                result = entry.op(work, ctx)
            except ApiError as e:
                entry.fail(e)  # refused: nothing done, the others go on
                continue
            if result.records:
                compute_ms = self._note_inline_computation(result.records, started)
                told = self._news_in(group_id, work, result.records, news)
                news += told
                events += self._events(
                    group_id,
                    work,
                    result.records,
                    entry.cause,
                    ctx.now_ms,
                    compute_ms,
                    Circumstances(topic_changes=told) if told else NO_CIRCUMSTANCES,
                )
                bump = log_records(log, work, group_id, result.records, entry.cause)
                if bump is not None:
                    bumps.append(bump)
                work = replay_all(work, group_id, result.records)
                records.extend(result.records)
            served.append((entry, result, ctx.now_ms))
        if records:
            events = await self._store(group_id, records, None, fence, events)
            self.topic_news_told(group_id, news)
        for _, result, _ in served:
            self.metrics.heartbeat(written=bool(result.records))
        if records and self.shards.holds(fence):
            log.emit(self.log)
            for bump in bumps:
                self.metrics.epoch_bumped(bump)
            self._keep(group_id, group, work, records, bumped=bool(bumps))
            self._published(group_id, events)
        for entry, result, now_ms in served:
            self.apply_timers(group_id, result.timers, now_ms)
            entry.resolve(result.response)

    def _keep(
        self,
        group_id: str,
        before: Group | None,
        after: Group | None,
        records: Sequence[Record],
        *,
        bumped: bool,
    ) -> None:
        """`after` (the group with the stored `records` replayed: `before` itself, or a
        batch's copy of it; None once deleted) becomes the group, and whoever follows
        its changes is told."""
        if after is None:
            self._forget(group_id)
        else:
            self.groups[group_id] = after
            if after is not before:
                self.assigner.replaced(group_id, before, after)
            self.assigner.observe(group_id, after, records)
            if bumped:
                self._unsettled.setdefault(group_id, self.clock.wall_ms())
            if group_id in self._unsettled:
                self._check_stable(group_id)
        if self.on_written is not None:
            self.on_written(group_id, after, records)

    def answer_now(
        self, group_id: str, op: Operation[T], *, cause: str, group_type: str | None = None
    ) -> Result[T] | None:
        """`run`'s answer when it comes without awaiting: the group is idle and current,
        this replica serves it, and `op` succeeds without records (a heartbeat that
        changes nothing), as the operation's result. None otherwise, with nothing done:
        the caller then runs the operation through `run` (member streams answer most
        heartbeats of a batch here, and only the others in tasks of their own)."""
        if not self._locks.idle(group_id) or group_id in self._stale:
            return None
        try:
            self.shards.fence(group_id, self.clock.monotonic_ms())
            group = self.groups.get(group_id)
            ctx = self.context(group_id, group, group_type, "")
            outcome = op(group, ctx)
        except ApiError:
            return None  # answered by `run`, which refuses alike
        if not isinstance(outcome, Result) or outcome.records:
            return None
        return self._answered_unchanged(group_id, outcome, cause, ctx.now_ms)

    def _answered_unchanged(self, group_id: str, outcome: Result[T], cause: str, op_now_ms: int) -> Result[T]:
        """An operation that stored nothing, answered on the spot: only its timers apply."""
        self.apply_timers(group_id, outcome.timers, op_now_ms)
        if cause in HEARTBEAT_CAUSES:
            self.metrics.heartbeat(written=False)
        return outcome

    def _note_inline_computation(self, records: Sequence[Record], started: float) -> int:
        """A target computed within the operation (not by the worker process): the
        operation's time is the figure, the computation being nearly all of it. With
        traces on, a span of that time (started then, ended now) under the RPC's.
        Answers that time in ms (0 when the records hold no target)."""
        if not (records and any(type(r) is TargetAssignmentEpochRecord for r in records)):
            return 0
        seconds = time.perf_counter() - started
        self.metrics.computed("inline", seconds)
        if self.tracer is not None:
            end = time.time_ns()
            span = self.tracer.start_span(
                "regroup.assignment.compute",
                start_time=end - int(seconds * 1e9),
                attributes={"regroup.assignment.mode": "inline", "regroup.records": len(records)},
            )
            span.end(end_time=end)
        return round(seconds * 1000)

    def context(
        self, group_id: str, group: Group | None, group_type: str | None, new_member_id: str
    ) -> Context:
        image = self.image_for(group_id, group.group_type if group is not None else group_type)
        return Context(
            now_ms=self.clock.wall_ms(), config=self.config, image=image, new_member_id=new_member_id
        )

    async def _run_locked(
        self,
        group_id: str,
        op: Operation[T] | AsyncOperation[T],
        cause: str,
        new_member_id: str,
        group_type: str | None = None,
        computed_elsewhere: bool = False,
        circumstances: Circumstances = NO_CIRCUMSTANCES,
    ) -> T:
        """Runs `op` with the group's lock held."""
        # Again: the shard may have moved while this waited for the lock.
        fence = self.shards.fence(group_id, self.clock.monotonic_ms())
        group = await self._current_group(group_id)
        ctx = self.context(group_id, group, group_type, new_member_id)
        started = time.perf_counter()
        outcome = op(group, ctx)
        compute_ms = 0
        if isinstance(outcome, Result):
            if not outcome.records and cause in HEARTBEAT_CAUSES:
                self.metrics.heartbeat(written=False)
            elif not computed_elsewhere:
                compute_ms = self._note_inline_computation(outcome.records, started)
        return await self._finish(
            group_id, group, outcome, cause, ctx.now_ms, fence, circumstances, compute_ms
        )

    async def _finish(
        self,
        group_id: str,
        group: Group | None,
        outcome: Result[T] | Awaitable[Result[T]],
        cause: str,
        op_now_ms: int,
        fence: Fence,
        circumstances: Circumstances = NO_CIRCUMSTANCES,
        compute_ms: int = 0,
    ) -> T:
        """With the group's lock held: awaits `op`'s result if it is computed
        elsewhere, stores its records, replays them onto the group and applies
        its timers (`op_now_ms`: the operation's time, which they are relative to).
        If the shard left this replica meanwhile, the stored answer is given but
        the group stays out of memory (its new owner loads what was stored)."""
        write: PreparedWrite | None = None
        events: list[GroupEvent] | None = None
        result = outcome if isinstance(outcome, Result) else await outcome
        news = self._news_in(group_id, group, result.records)
        if news:
            circumstances = replace(circumstances, topic_changes=circumstances.topic_changes + news)
        if not isinstance(outcome, Result) and len(result.records) > PREPARE_INLINE_MAX_RECORDS:
            # Its events too: a big target's walk over every member's partitions would
            # stall the loop as its rows would (the group stays locked, so unchanged).
            def prepare() -> tuple[PreparedWrite, list[GroupEvent]]:
                derived = self._events(
                    group_id, group, result.records, cause, op_now_ms, compute_ms, circumstances
                )
                return prepare_write(group_id, result.records), derived

            write, events = await asyncio.to_thread(prepare)
        if result.records:
            if events is None:
                events = self._events(
                    group_id, group, result.records, cause, op_now_ms, compute_ms, circumstances
                )
            events = await self._store(group_id, result.records, write, fence, events)
            self.topic_news_told(group_id, news)
            if cause in HEARTBEAT_CAUSES:
                self.metrics.heartbeat(written=True)
            if not self.shards.holds(fence):
                return result.response
            bump = log_records(self.log, group, group_id, result.records, cause)
            if bump is not None:
                self.metrics.epoch_bumped(bump)
            try:
                replayed = replay_all(group, group_id, result.records)
            except Exception:
                # Stored but not applicable: a bug. Reload from the store next time.
                self._mark_stale(group_id, WriteInDoubt.of(result.records))
                raise
            self._keep(group_id, group, replayed, result.records, bumped=bump is not None)
            self._published(group_id, events)
        self.apply_timers(group_id, result.timers, op_now_ms)
        return result.response

    # -- history (server/history.py) ---------------------------------------------

    def _events(
        self,
        group_id: str,
        group: Group | None,
        records: Sequence[Record],
        cause: str,
        now_ms: int,
        compute_ms: int,
        circumstances: Circumstances = NO_CIRCUMSTANCES,
    ) -> list[GroupEvent]:
        """The events of an operation's records (none when history is off)."""
        if self.history_max_events <= 0:
            return []
        unsettled = self._unsettled.get(group_id)
        if compute_ms or unsettled is not None:
            circumstances = replace(
                circumstances,
                compute_ms=circumstances.compute_ms or compute_ms,
                unsettled_since_ms=unsettled,
            )
        return derive_events(group, group_id, records, cause, now_ms, self.config, circumstances)

    def _published(self, group_id: str, events: list[GroupEvent]) -> None:
        if events and self.on_events is not None:
            self.on_events(group_id, events)

    async def note_events(self, group_id: str, events: Sequence[GroupEvent]) -> None:
        """Stores events that go with no record (a refused InstallAssignment), in a write
        of their own under the group's lock, and publishes them."""
        if self.history_max_events <= 0 or not events:
            return
        fence = self.shards.fence(group_id, self.clock.monotonic_ms())
        lock = self._locks.take(group_id)
        try:
            async with lock:
                stored = await self._store(group_id, (), None, fence, list(events))
                self._published(group_id, stored)
        finally:
            self._locks.give_back(group_id)

    def _keep_events(self, group_id: str, count: int) -> int:
        """How many events the group keeps, when this write should drop the older ones
        (once per tenth of the limit: each trim walks the group's index), else 0."""
        since = self._events_since_trim.get(group_id, 0) + count
        if since < max(1, self.history_max_events // 10):
            self._events_since_trim[group_id] = since
            return 0
        self._events_since_trim[group_id] = 0
        return self.history_max_events

    def _check_stable(self, group_id: str) -> None:
        """Records the time since the group's epoch bump once it is Stable. Reading the
        state passes over the members, so a big group is checked at most once per
        STABLE_CHECK_MS (a pending check covers the writes in between)."""
        group = self.groups.get(group_id)
        if group is None or group_id not in self._unsettled:
            return
        if len(group.members) > STABLE_CHECK_EVERY_WRITE_MAX:
            if group_id in self._stable_checks:
                return
            loop = asyncio.get_running_loop()
            self._stable_checks[group_id] = loop.call_later(
                STABLE_CHECK_MS / 1000, self._delayed_stable_check, group_id
            )
            return
        self._stable_now(group_id, group)

    def _delayed_stable_check(self, group_id: str) -> None:
        self._stable_checks.pop(group_id, None)
        group = self.groups.get(group_id)
        if group is not None and group_id in self._unsettled and not self._stable_now(group_id, group):
            self._check_stable(group_id)

    def longest_rebalance_ms(self) -> int:
        """How long the longest rebalance in progress has lasted (for the metrics): since the
        earliest epoch bump of an Assigning or Reconciling group that has not been Stable
        since; 0 when there is none. An Empty group has nothing to reconcile."""
        now = self.clock.wall_ms()
        oldest = now
        for group_id, since in list(self._unsettled.items()):
            group = self.groups.get(group_id)
            if since < oldest and group is not None and group.state() in _REBALANCING:
                oldest = since
        return max(0, now - oldest)

    def _stable_now(self, group_id: str, group: Group) -> bool:
        if group.state() is not GroupState.STABLE:
            return False
        bumped_ms = self._unsettled.pop(group_id)
        self.metrics.stable(max(0, self.clock.wall_ms() - bumped_ms) / 1000)
        return True

    async def _store(
        self,
        group_id: str,
        records: Sequence[Record],
        write: PreparedWrite | None,
        fence: Fence,
        events: list[GroupEvent],
    ) -> list[GroupEvent]:
        """Stores `records` (as `write` when it was prepared already) and `events`, fenced by
        `fence`; answers the events with their sequences."""
        # A plain try rather than a context manager: this runs for every write, and an
        # async one costs a generator and two more awaits each time.
        self._refuse_if_store_down(group_id)
        if self.tracer is not None:
            with self.tracer.start_as_current_span(
                "regroup.store.append",
                attributes={"regroup.group_id": group_id, "regroup.records": len(records)},
            ):
                return await self._append(group_id, records, write, fence, events)
        return await self._append(group_id, records, write, fence, events)

    async def _append(
        self,
        group_id: str,
        records: Sequence[Record],
        write: PreparedWrite | None,
        fence: Fence,
        events: list[GroupEvent],
    ) -> list[GroupEvent]:
        started = time.perf_counter()
        try:
            if events:
                keep = self._keep_events(group_id, len(events))
                sequences = await self.store.append(group_id, write or records, fence, events, keep)
                events = with_sequences(events, sequences)
            else:
                await self.store.append(group_id, write or records, fence)
        except (StoreUnavailable, NotOwner) as e:
            self.metrics.stored(time.perf_counter() - started, ok=False)
            raise self._write_failed(group_id, e, WriteInDoubt.of(records)) from e
        except StoreConflict as e:
            self.metrics.stored(time.perf_counter() - started, ok=False)
            raise self._write_conflicted(group_id, e) from e
        self.metrics.stored(time.perf_counter() - started, ok=True)
        return events

    def _write_conflicted(self, group_id: str, e: StoreConflict) -> ApiError:
        """Postgres refused a group's write for a constraint: the store holds what this
        process did not write (another writer), so memory cannot vouch for any member
        (no session is renewed from it). The group is reloaded before its next use, and
        the retry the answer asks for runs against what the store holds."""
        self._mark_stale(group_id, EVERYONE_IN_DOUBT)
        self.log.warning("group_write_conflict", group_id=group_id, constraint=e.constraint, error=str(e))
        return CoordinatorNotAvailable(
            f"The write conflicted with the store ({e}); the group is reloaded before its next use."
        )

    def _write_failed(
        self, group_id: str, e: StoreUnavailable | NotOwner, in_doubt: WriteInDoubt = NOTHING_IN_DOUBT
    ) -> ApiError:
        """The protocol error for a failed write; memory may no longer match the store."""
        # The commit may or may not have happened: reload before the next use.
        self._mark_stale(group_id, in_doubt)
        if isinstance(e, NotOwner):
            self.log.warning("group_ownership_lost", group_id=group_id, error=str(e))
            self.fence_failed()
            return NotCoordinator(str(e))
        self.log.warning("group_write_failed", group_id=group_id, error=str(e))
        self._store_failed()
        return store_unreachable()

    @property
    def store_down(self) -> bool:
        return self.watch is not None and not self.watch.available

    def _store_failed(self) -> None:
        if self.watch is not None:
            self.watch.report_failure()

    def _refuse_if_store_down(self, group_id: str) -> None:
        """Refuses a group's write while the store is known to be away. Nothing is
        tried, so nothing is in doubt; the group is still reloaded once the store is
        back, which gives its members a full session (as after any failed write)."""
        if self.store_down:
            self._mark_stale(group_id, NOTHING_IN_DOUBT)
            raise store_unreachable()

    def _mark_stale(self, group_id: str, in_doubt: WriteInDoubt) -> None:
        self._stale[group_id] = self._stale.get(group_id, NOTHING_IN_DOUBT).plus(in_doubt)

    async def _current_group(self, group_id: str) -> Group | None:
        if group_id not in self._stale:
            return self.groups.get(group_id)
        self._refuse_if_store_down(group_id)
        try:
            group = await self.store.load_group(group_id)
        except StoreUnavailable as e:
            self.log.warning("group_load_failed", group_id=group_id, error=str(e))
            self._store_failed()
            raise store_unreachable() from e
        del self._stale[group_id]
        self.assigner.forget((group_id,))  # the worker's copy was read from the old object
        if group is None:
            self.groups.pop(group_id, None)
        else:
            self.groups[group_id] = group
            self.arm_loaded_timers(group, self.clock.monotonic_ms())
        self.log.info("group_reloaded", group_id=group_id, exists=group is not None)
        return group

    def apply_timers(self, group_id: str, ops: Sequence[TimerOp], op_now_ms: int) -> None:
        """Arms the engine's timers. Their deadlines are in the operation's wall-clock
        time (`op_now_ms`); they are armed as far ahead on the monotonic clock, so a
        step of the wall clock neither fires nor delays them (see `clock`)."""
        if not ops:
            return
        shift = self.clock.monotonic_ms() - op_now_ms
        for op in ops:
            match op:
                case ScheduleSessionTimeout():
                    self.timers.schedule(TimerKey(group_id, op.member_id, "session"), op.deadline_ms + shift)
                case ScheduleRebalanceTimeout():
                    self.timers.schedule(
                        TimerKey(group_id, op.member_id, "rebalance"), op.deadline_ms + shift, op.member_epoch
                    )
                case CancelRebalanceTimeout():
                    self.timers.cancel(TimerKey(group_id, op.member_id, "rebalance"))
                case CancelTimeouts():
                    self.timers.cancel_member(group_id, op.member_id)
                case ScheduleAssignment():
                    key = TimerKey(group_id, "", "assignment")
                    if self.timers.deadline(key) is None:
                        self.timers.schedule(key, op.deadline_ms + shift)
