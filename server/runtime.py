"""The coordinator runtime: serialises operations per group, stores, then replays.

For every operation on a group: take the group's lock, run the pure engine
with the current time and topic image, store the records it returned in one
transaction, replay them into memory, arm its timers, and only then answer.
An operation that produced no record writes nothing. Groups run concurrently.
A big group's target is computed in a worker process (see `assigner.py`)
without holding the group, and installed afterwards if it still applies.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import structlog

from regroup.reconciler import (
    ApiError,
    CancelRebalanceTimeout,
    CancelTimeouts,
    ConsumerGroupHeartbeat,
    ConsumerGroupHeartbeatResponse,
    Context,
    Group,
    GroupConfig,
    MemberState,
    Record,
    Result,
    ScheduleAssignment,
    ScheduleRebalanceTimeout,
    ScheduleSessionTimeout,
    TimerOp,
    Topic,
    TopicsImage,
    consumer_group_heartbeat,
    delete_group,
    on_rebalance_timeout,
    on_session_timeout,
    refresh_metadata,
    replay_all,
)
from regroup.reconciler.client_assignment import install_assignment, prepare_assignment
from regroup.reconciler.connect import connectors_image, put_connectors
from regroup.reconciler.errors import (
    CoordinatorNotAvailable,
    GroupIdNotFound,
    NotCoordinator,
    TopicAlreadyExists,
    UnknownServerError,
    UnknownTopicId,
    UnknownTopicOrPartition,
)
from regroup.reconciler.liveness import EVERYONE_IN_DOUBT, NOTHING_IN_DOUBT, WriteInDoubt, renewed_session
from regroup.reconciler.messages import InstallAssignment, PrepareAssignment, PrepareAssignmentResponse
from regroup.reconciler.model import CONNECT_GROUP_TYPE
from regroup.reconciler.offsets import (
    FetchedOffset,
    OffsetToCommit,
    PartitionOutcome,
    commit_offsets,
    expire_offsets,
    fetch_offsets,
)
from regroup.reconciler.records import (
    ConnectorsRecord,
    CurrentAssignmentRecord,
    GroupMetadataRecord,
    MemberMetadataRecord,
    MemberMetadataTombstone,
    TargetAssignmentEpochRecord,
    TargetAssignmentMemberRecord,
)
from regroup.reconciler.subscription import subscribes_to_any
from regroup.reconciler.target_assignment import PendingTarget, install_computed_target, on_assignment_timer
from regroup.reconciler.topics import create_topic, grow_topic, validate_topic_name
from regroup.reconciler.validation import validate_id

from .assigner import Assigner
from .clock import Clock
from .store import GroupStore, NotOwner, PreparedWrite, StoreConflict, StoreUnavailable, prepare_write
from .storewatch import StoreWatch
from .timers import TimerKey, TimerQueue

T = TypeVar("T")
Operation = Callable[[Group | None, Context], Result[T]]
#: An operation that awaits part of its work elsewhere (the group stays locked meanwhile).
AsyncOperation = Callable[[Group | None, Context], Awaitable[Result[T]]]

#: How long to wait before retrying a timeout whose fencing could not be stored.
TIMER_RETRY_MS = 1_000
#: Timers fire at most this often (a deadline may fire up to this much late).
TIMER_TICK_MS = 10
#: The periodic look for expired offsets (not a group's timer).
OFFSETS_SWEEP = TimerKey("", "", "offsets")
#: An operation computed elsewhere with more records than this prepares its rows in a thread.
PREPARE_INLINE_MAX_RECORDS = 32


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


@dataclass(frozen=True, slots=True)
class _TargetJob:
    """A big group's target to compute in the worker, read from `group` at `pending`."""

    group: Group
    pending: PendingTarget


@dataclass(frozen=True, slots=True)
class TopicOutcome:
    """The result of one topic in a batch admin call."""

    name: str
    topic: Topic | None = None
    error: ApiError | None = None
    topic_id: str = ""


class Coordinator:
    def __init__(
        self, store: GroupStore, config: GroupConfig, clock: Clock, *, run_timers: bool = True
    ) -> None:
        self.store = store
        self.config = config
        self.clock = clock
        self.groups: dict[str, Group] = {}
        self.image = TopicsImage()
        #: Connect groups' resource images (the consumer groups' topics' analogue), each
        #: with the connectors dict it was built from: replaying new connectors replaces it.
        self._connect_images: dict[str, tuple[dict[str, int], TopicsImage]] = {}
        self.timers = TimerQueue()
        self._run_timers = run_timers
        self._locks = _KeyedLocks()
        #: Groups whose last write failed: memory may not match the store until the
        #: group is reloaded. The value says what the failed write may have removed.
        self._stale: dict[str, WriteInDoubt] = {}
        #: Groups whose target the worker is computing (without their lock held).
        self._computing: set[str] = set()
        #: What is known of the store's reachability (the app sets it; none: assumed up).
        #: While it says the store is down, requests that need the store are refused at
        #: once instead of waiting on a connection; a failed request makes it check at once.
        self.watch: StoreWatch | None = None
        self._topic_lock = asyncio.Lock()
        self._timer_task: asyncio.Task[None] | None = None
        self._stopping = False
        self.assigner = Assigner(config)
        self.log = structlog.get_logger("regroup")

    # -- lifecycle ---------------------------------------------------------------

    async def start(self) -> None:
        """Loads every group and topic, re-arms timers, then serves."""
        self._stopping = False
        owner_epoch = await self.store.claim_ownership()
        self.image = TopicsImage(await self.store.load_topics(), version=1)
        self._connect_images.clear()
        self.groups = await self.store.load_groups()
        now = self.clock.monotonic_ms()
        for group in self.groups.values():
            self._arm_loaded_timers(group, now)
        self.log.info(
            "coordinator_loaded",
            groups=len(self.groups),
            members=sum(len(g.members) for g in self.groups.values()),
            topics=len(self.image.by_id),
            owner_epoch=owner_epoch,
            replica_id=self.store.replica_id,
        )
        # Topics may have changed after a group's last write (a crash between
        # the two): the refresh bumps the groups whose metadata moved.
        await self.refresh_groups()
        self.timers.schedule(OFFSETS_SWEEP, now + self.config.offsets_retention_check_ms)
        if self._run_timers:
            self._timer_task = asyncio.create_task(self._timer_loop(), name="regroup-timers")

    async def stop(self) -> None:
        # The flag ends the timer loop even if a cancellation were lost on the way.
        self._stopping = True
        self.timers.wake.set()
        if self._timer_task is not None:
            self._timer_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._timer_task
            self._timer_task = None
        await self.assigner.close()

    def _arm_loaded_timers(self, group: Group, now: int) -> None:
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

    # -- the write path ----------------------------------------------------------

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
    ) -> T:
        """Runs `op` on the group under its lock; stores and replays its records.

        An `AsyncOperation` may await: the lock keeps the group unchanged
        meanwhile, and a large write it returns (a big group's computed target)
        is prepared in a thread.
        """
        group: Group | None = None
        outcome: Result[T] | Awaitable[Result[T]] | None = None
        op_now_ms = 0
        if self._locks.idle(group_id) and group_id not in self._stale:
            # Nothing is in flight for the group, so memory is current and, until
            # this awaits, nothing else can run on it: compute before taking the
            # lock. Most heartbeats change nothing and are answered right here;
            # an operation that writes or awaits takes the lock (free, so
            # without yielding) before its first await.
            group = self.groups.get(group_id)
            ctx = self._context(group_id, group, group_type, new_member_id)
            outcome, op_now_ms = op(group, ctx), ctx.now_ms
            if isinstance(outcome, Result) and not outcome.records:
                self._apply_timers(group_id, outcome.timers, op_now_ms)
                return outcome.response
        lock = self._locks.take(group_id)
        try:
            async with lock:
                if outcome is None:
                    return await self._run_locked(group_id, op, cause, new_member_id, group_type)
                return await self._finish(group_id, group, outcome, cause, op_now_ms)
        finally:
            self._locks.give_back(group_id)

    def _context(
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
    ) -> T:
        """Runs `op` with the group's lock held."""
        group = await self._current_group(group_id)
        ctx = self._context(group_id, group, group_type, new_member_id)
        return await self._finish(group_id, group, op(group, ctx), cause, ctx.now_ms)

    async def _finish(
        self,
        group_id: str,
        group: Group | None,
        outcome: Result[T] | Awaitable[Result[T]],
        cause: str,
        op_now_ms: int,
    ) -> T:
        """With the group's lock held: awaits `op`'s result if it is computed
        elsewhere, stores its records, replays them onto the group and applies
        its timers (`op_now_ms`: the operation's time, which they are relative to)."""
        write: PreparedWrite | None = None
        if isinstance(outcome, Result):
            result = outcome
        else:
            result = await outcome
            if len(result.records) > PREPARE_INLINE_MAX_RECORDS:
                write = await asyncio.to_thread(prepare_write, group_id, result.records)
        if result.records:
            await self._store(group_id, result.records, write)
            self._log_records(group, group_id, result.records, cause)
            try:
                replayed = replay_all(group, group_id, result.records)
            except Exception:
                # Stored but not applicable: a bug. Reload from the store next time.
                self._mark_stale(group_id, WriteInDoubt.of(result.records))
                raise
            if replayed is None:
                self.groups.pop(group_id, None)
                self._connect_images.pop(group_id, None)
                self.assigner.forget((group_id,))
            else:
                self.groups[group_id] = replayed
                self.assigner.observe(group_id, replayed, result.records)
        self._apply_timers(group_id, result.timers, op_now_ms)
        return result.response

    async def _store(self, group_id: str, records: Sequence[Record], write: PreparedWrite | None) -> None:
        """Stores `records` (as `write` when it was prepared already)."""
        # A plain try rather than a context manager: this runs for every write, and an
        # async one costs a generator and two more awaits each time.
        self._refuse_if_store_down(group_id)
        try:
            await self.store.append(group_id, write or records)
        except (StoreUnavailable, NotOwner) as e:
            raise self._write_failed(group_id, e, WriteInDoubt.of(records)) from e
        except StoreConflict as e:
            raise self._write_conflicted(group_id, e) from e

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
            return NotCoordinator(str(e))
        self.log.warning("group_write_failed", group_id=group_id, error=str(e))
        self._store_failed()
        return CoordinatorNotAvailable(str(e))

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
            raise CoordinatorNotAvailable("The store (Postgres) is unreachable; retry after a backoff.")

    def _mark_stale(self, group_id: str, in_doubt: WriteInDoubt) -> None:
        self._stale[group_id] = self._stale.get(group_id, NOTHING_IN_DOUBT).plus(in_doubt)

    async def _current_group(self, group_id: str) -> Group | None:
        if group_id not in self._stale:
            return self.groups.get(group_id)
        self._refuse_if_store_down(group_id)
        try:
            group = await self.store.load_group(group_id)
            owner = await self.store.group_owner(group_id)
        except StoreUnavailable as e:
            self._store_failed()
            raise CoordinatorNotAvailable(str(e)) from e
        if owner is not None and owner != (self.store.replica_id, self.store.owner_epoch):
            raise NotCoordinator(f"Group {group_id} is owned by {owner[0]} at owner epoch {owner[1]}.")
        del self._stale[group_id]
        self.assigner.forget((group_id,))  # the worker's copy was read from the old object
        if group is None:
            self.groups.pop(group_id, None)
        else:
            self.groups[group_id] = group
            self._arm_loaded_timers(group, self.clock.monotonic_ms())
        self.log.info("group_reloaded", group_id=group_id, exists=group is not None)
        return group

    def _apply_timers(self, group_id: str, ops: Sequence[TimerOp], op_now_ms: int) -> None:
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

    # -- operations ----------------------------------------------------------------

    async def consumer_group_heartbeat(self, req: ConsumerGroupHeartbeat) -> ConsumerGroupHeartbeatResponse:
        new_member_id = str(uuid.uuid4()) if not req.member_id and req.member_epoch == 0 else ""
        cause = "leave" if req.member_epoch < 0 else "heartbeat"

        def op(group: Group | None, ctx: Context) -> Result[ConsumerGroupHeartbeatResponse]:
            return consumer_group_heartbeat(group, req, ctx)

        try:
            return await self.run(
                req.group_id, op, cause=cause, new_member_id=new_member_id, group_type=req.group_type
            )
        except CoordinatorNotAvailable as e:
            raise self._renewing_session(req, e) from e

    def _renewing_session(
        self, req: ConsumerGroupHeartbeat, refusal: CoordinatorNotAvailable
    ) -> CoordinatorNotAvailable:
        """The store could not serve a heartbeat: renew the member's session all
        the same when that is safe (see `liveness`), and say so in the refusal."""
        in_doubt = self._stale.get(req.group_id, NOTHING_IN_DOUBT)
        group = self.groups.get(req.group_id)
        ctx = self._context(req.group_id, group, req.group_type, "")
        timer = renewed_session(group, req.member_id, req.member_epoch, in_doubt, ctx)
        if timer is None:
            return refusal
        self._apply_timers(req.group_id, (timer,), ctx.now_ms)
        return refusal.renewing(req.member_epoch, self.config.session_timeout_ms)

    async def prepare_assignment(self, req: PrepareAssignment) -> PrepareAssignmentResponse:
        def op(group: Group | None, ctx: Context) -> Result[PrepareAssignmentResponse]:
            return prepare_assignment(group, req, ctx)

        return await self.run(req.group_id, op, cause="prepare_assignment")

    async def install_assignment(self, req: InstallAssignment) -> None:
        def op(group: Group | None, ctx: Context) -> Result[None]:
            return install_assignment(group, req, ctx)

        await self.run(req.group_id, op, cause="install_assignment")

    async def commit_offsets(
        self, group_id: str, member_id: str, member_epoch: int, offsets: Sequence[OffsetToCommit]
    ) -> list[PartitionOutcome]:
        def op(group: Group | None, ctx: Context) -> Result[list[PartitionOutcome]]:
            return commit_offsets(group, group_id, member_id, member_epoch, offsets, ctx)

        return await self.run(group_id, op, cause="offset_commit")

    async def fetch_offsets(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        wanted: Sequence[tuple[str, Sequence[int]]] | None,
    ) -> list[FetchedOffset]:
        def op(group: Group | None, ctx: Context) -> Result[list[FetchedOffset]]:
            return Result(fetch_offsets(group, group_id, member_id, member_epoch, wanted))

        return await self.run(group_id, op, cause="offset_fetch")

    async def expire_offsets(self) -> int:
        """Removes expired offsets of empty groups; returns how many."""

        def op(group: Group | None, ctx: Context) -> Result[int]:
            if group is None:
                return Result(0)
            return expire_offsets(group, self.config.offsets_retention_ms, ctx)

        expired = 0
        for group_id in [g.group_id for g in self.groups.values() if g.offsets and not g.members]:
            try:
                expired += await self.run(group_id, op, cause="offsets_expired")
            except (CoordinatorNotAvailable, NotCoordinator) as e:
                self.log.warning("offset_expiration_failed", group_id=group_id, error=str(e))
        if expired:
            self.log.info("offsets_expired", offsets=expired)
        return expired

    async def put_connectors(self, group_id: str, connectors: Sequence[tuple[str, int]]) -> int:
        """Sets a Connect group's connectors (creating the group if needed); returns
        the group epoch afterwards."""

        def op(group: Group | None, ctx: Context) -> Result[int]:
            return put_connectors(group, connectors, ctx)

        return await self.run(group_id, op, cause="connectors_changed", group_type=CONNECT_GROUP_TYPE)

    async def delete_group(self, group_id: str) -> None:
        def op(group: Group | None, ctx: Context) -> Result[None]:
            if group is None:
                raise GroupIdNotFound(f"Group {group_id} not found.")
            return delete_group(group)

        await self.run(group_id, op, cause="delete")

    async def refresh_groups(self, topic_names: Collection[str] | None = None) -> None:
        """Bumps the epoch of every group whose subscribed topics changed.

        With `topic_names`, only groups that subscribe to one of them (by name
        or regex) are looked at: a topic change then costs nothing to the
        thousands of groups it does not concern.
        """

        def op(group: Group | None, ctx: Context) -> Result[bool]:
            return Result(False) if group is None else refresh_metadata(group, ctx)

        groups = [g for g in self.groups.values() if g.members]
        if topic_names is not None:
            # Connect groups share connectors, not topics.
            groups = [
                g for g in groups if g.group_type != CONNECT_GROUP_TYPE and subscribes_to_any(g, topic_names)
            ]
        for group_id in [g.group_id for g in groups]:
            try:
                await self.run(group_id, op, cause="metadata_refresh")
            except (CoordinatorNotAvailable, NotCoordinator) as e:
                self.log.warning("metadata_refresh_failed", group_id=group_id, error=str(e))

    # -- timers ----------------------------------------------------------------------

    async def _timer_loop(self) -> None:
        last_run = self.clock.monotonic_ms()
        while not self._stopping:
            self.timers.wake.clear()
            deadline = self.timers.next_deadline()
            if deadline is not None:
                # Timers fire in ticks: thousands of members whose sessions were armed
                # within a few seconds must not wake the loop thousands of times.
                deadline = max(deadline, last_run + TIMER_TICK_MS)
            await self.clock.sleep_until(deadline, self.timers.wake)
            if self._stopping:
                return
            last_run = self.clock.monotonic_ms()
            try:
                await self.expire_due()
            except Exception:
                self.log.exception("timer_loop_failed")

    async def expire_due(self) -> list[TimerKey]:
        """Fences the members whose timers are due now; returns the fenced ones."""
        by_group: dict[str, list[tuple[TimerKey, int]]] = defaultdict(list)
        for key, payload in self.timers.pop_due(self.clock.monotonic_ms()):
            if key == OFFSETS_SWEEP:
                await self.expire_offsets()
                self.timers.schedule(
                    OFFSETS_SWEEP, self.clock.monotonic_ms() + self.config.offsets_retention_check_ms
                )
                continue
            by_group[key.group_id].append((key, payload))
        outcomes = await asyncio.gather(*(self._expire_group(items) for items in by_group.values()))
        return [key for fenced in outcomes for key in fenced]

    async def _expire_group(self, items: list[tuple[TimerKey, int]]) -> list[TimerKey]:
        fenced = []
        for key, payload in items:
            if await self._expire(key, payload):
                fenced.append(key)
        return fenced

    async def _expire(self, key: TimerKey, payload: int) -> bool:
        def op(group: Group | None, ctx: Context) -> Result[bool]:
            # A heartbeat may have re-armed the timer after it fired.
            if group is None or self.timers.deadline(key) is not None:
                return Result(False)
            if key.kind == "session":
                return on_session_timeout(group, key.member_id, ctx)
            return on_rebalance_timeout(group, key.member_id, payload, ctx)

        cause = "assignment" if key.kind == "assignment" else f"{key.kind}_timeout"
        try:
            if key.kind == "assignment":
                return await self._compute_target(key)
            return await self.run(key.group_id, op, cause=cause)
        except (CoordinatorNotAvailable, NotCoordinator) as e:
            self.log.warning(
                "timeout_not_applied",
                group_id=key.group_id,
                member_id=key.member_id,
                kind=key.kind,
                error=str(e),
            )
            if self.timers.deadline(key) is None:
                self.timers.schedule(key, self.clock.monotonic_ms() + TIMER_RETRY_MS, payload)
            return False

    async def _compute_target(self, key: TimerKey) -> bool:
        """The assignment timer. A small group's target is computed and stored at once
        (as a heartbeat would). A big group's is computed by the worker process without
        holding the group, which keeps answering its members meanwhile (Kafka's offloaded
        assignment, KIP-1263), and is installed afterwards if it still applies: held
        for the computation, the group made its own members wait up to its length
        (tens of milliseconds at 100,000 partitions), then step in a burst."""
        group_id = key.group_id
        job = await self.run(group_id, self._prepare_target_op(key), cause="assignment")
        if not isinstance(job, _TargetJob):
            return job
        self._computing.add(group_id)
        try:
            records = await self.assigner.compute(group_id, job.group, job.pending)
        finally:
            self._computing.discard(group_id)

        async def install(group: Group | None, ctx: Context) -> Result[bool]:
            # Asynchronous only so that a large install's write is prepared in a thread.
            return install_computed_target(group, records, ctx)

        return await self.run(group_id, install, cause="assignment")

    def _prepare_target_op(self, key: TimerKey) -> Operation[bool | _TargetJob]:
        def op(group: Group | None, ctx: Context) -> Result[bool | _TargetJob]:
            if group is None or self.timers.deadline(key) is not None:
                return Result(False)  # gone, or a later timer was armed after this one fired
            result = on_assignment_timer(group, ctx, computing=key.group_id in self._computing)
            if isinstance(result.response, PendingTarget):
                # Read from the group's indexes: a big group's members are not passed over here.
                return Result(_TargetJob(group, result.response))
            return Result(result.response, result.records, result.timers)

        return op

    # -- topics ------------------------------------------------------------------------

    async def create_topics(self, specs: Sequence[tuple[str, int, tuple[str, ...]]]) -> list[TopicOutcome]:
        outcomes = []
        async with self._topic_lock:
            for name, count, racks in specs:
                try:
                    topic = create_topic(self.image, name, count, racks, str(uuid.uuid4()))
                    await self._put_topic(topic)
                    outcomes.append(TopicOutcome(name, topic))
                except ApiError as e:
                    outcomes.append(TopicOutcome(name, error=e))
        await self._after_topic_change(outcomes)
        return outcomes

    async def create_partitions(
        self, specs: Sequence[tuple[str, str, int, tuple[str, ...]]]
    ) -> list[TopicOutcome]:
        """Grows topics named by (name, topic id, new count, new racks)."""
        outcomes = []
        async with self._topic_lock:
            for name, topic_id, count, racks in specs:
                try:
                    topic = self._find_topic(name, topic_id)
                    grown = grow_topic(topic, count, racks)
                    await self._put_topic(grown)
                    outcomes.append(TopicOutcome(grown.name, grown))
                except ApiError as e:
                    outcomes.append(TopicOutcome(name, error=e, topic_id=topic_id))
        await self._after_topic_change(outcomes)
        return outcomes

    async def delete_topics(self, names: Sequence[str], topic_ids: Sequence[str]) -> list[TopicOutcome]:
        outcomes = []
        async with self._topic_lock:
            for name, topic_id in [(n, "") for n in names] + [("", t) for t in topic_ids]:
                try:
                    topic = self._find_topic(name, topic_id)
                    try:
                        await self.store.delete_topic(topic.topic_id)
                    except StoreUnavailable as e:
                        raise _store_error(e) from e
                    except StoreConflict as e:
                        raise UnknownServerError(f"The store refused to delete the topic: {e}") from e
                    self.image = self.image.without_topic(topic.topic_id)
                    self.log.info("topic_deleted", topic=topic.name, topic_id=topic.topic_id)
                    outcomes.append(TopicOutcome(topic.name, topic))
                except ApiError as e:
                    outcomes.append(TopicOutcome(name, error=e, topic_id=topic_id))
        await self._after_topic_change(outcomes)
        return outcomes

    def _find_topic(self, name: str, topic_id: str) -> Topic:
        if topic_id:
            validate_id("topic_id", topic_id)
            topic = self.image.by_id.get(topic_id)
            if topic is None:
                raise UnknownTopicId(f"Topic id {topic_id} does not exist.")
            return topic
        validate_topic_name(name)
        topic = self.image.by_name.get(name)
        if topic is None:
            raise UnknownTopicOrPartition(f"Topic '{name}' does not exist.")
        return topic

    async def _put_topic(self, topic: Topic) -> None:
        try:
            await self.store.put_topic(topic)
        except StoreConflict as e:
            raise await self._topic_conflict(topic, e) from e
        except StoreUnavailable as e:
            raise _store_error(e) from e
        created = topic.topic_id not in self.image.by_id
        self.image = self.image.with_topic(topic)
        self.log.info(
            "topic_created" if created else "topic_partitions_created",
            topic=topic.name,
            topic_id=topic.topic_id,
            partitions=topic.num_partitions,
        )

    async def _topic_conflict(self, topic: Topic, e: StoreConflict) -> ApiError:
        """Another writer stored a topic this process did not know (the same name):
        learn the registry again, and what that changes for the groups, then answer
        the real reason instead of a retriable one that would be retried forever."""
        self.log.warning("topic_write_conflict", topic=topic.name, constraint=e.constraint, error=str(e))
        try:
            topics = await self.store.load_topics()
        except (StoreUnavailable, StoreConflict) as load_error:
            return CoordinatorNotAvailable(f"The store is unavailable: {load_error}")
        old = self.image
        self.image = TopicsImage(topics, version=old.version + 1)
        changed = {t.name for t in topics if old.by_name.get(t.name) != t}
        changed.update(name for name in old.by_name if name not in self.image.by_name)
        if changed:
            await self.refresh_groups(changed)
        if e.constraint == "topics_name_key":
            return TopicAlreadyExists(f"Topic '{topic.name}' already exists.")
        return UnknownServerError(f"The store refused topic '{topic.name}': {e}")

    async def _after_topic_change(self, outcomes: Sequence[TopicOutcome]) -> None:
        changed = [o.topic.name for o in outcomes if o.error is None and o.topic is not None]
        if changed:
            await self.refresh_groups(changed)

    # -- logging -------------------------------------------------------------------------

    def _log_records(self, group: Group | None, group_id: str, records: Sequence[Record], cause: str) -> None:
        """One event per state change, named after it (the engine itself never logs)."""
        log = self.log.bind(group_id=group_id)
        # Members that joined in these records; the group's own are looked up in it, not
        # copied: a big group's every reconciliation step passes through here.
        joined: set[str] = set()
        members = {} if group is None else group.members
        epoch = 0 if group is None else group.group_epoch
        targets_changed = 0
        for record in records:
            match record:
                case MemberMetadataRecord():
                    if record.member_id in members or record.member_id in joined:
                        continue
                    joined.add(record.member_id)
                    log.info(
                        "member_joined",
                        member_id=record.member_id,
                        instance_id=record.instance_id,
                        topics=list(record.subscribed_topic_names),
                        regex=record.subscribed_topic_regex,
                    )
                case MemberMetadataTombstone():
                    event = "member_left" if cause == "leave" else "member_fenced"
                    log.info(event, member_id=record.member_id, reason=cause)
                case GroupMetadataRecord() if record.group_epoch != epoch:
                    log.info("group_epoch_bumped", epoch=record.group_epoch, previous=epoch, reason=cause)
                    epoch = record.group_epoch
                case TargetAssignmentMemberRecord():
                    targets_changed += 1
                case ConnectorsRecord():
                    log.info("connectors_changed", connectors=len(record.connectors))
                case TargetAssignmentEpochRecord():
                    log.info(
                        "target_assignment_computed",
                        assignment_epoch=record.assignment_epoch,
                        members_changed=targets_changed,
                    )
                case CurrentAssignmentRecord():
                    log.debug(
                        "member_reconciled",
                        member_id=record.member_id,
                        state=record.state.name,
                        member_epoch=record.member_epoch,
                    )
                case _:
                    pass


def _store_error(e: StoreUnavailable) -> ApiError:
    return CoordinatorNotAvailable(f"The store is unavailable: {e}")
