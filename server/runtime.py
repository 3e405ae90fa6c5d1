"""The coordinator runtime: the operations the service offers, over its parts.

- `writepath.GroupWriter`: the groups in memory and the one way they change (lock,
  engine, store, replay, timers), with the stale-group reload after a failed write.
- `scheduler.Scheduler`: the timers and the offloaded target computations.
- `topicadmin.TopicAdmin`: topics; connectors are a Connect group's records (below).
- `refresh.GroupRefresher`: the groups' metadata refreshes after a topic change,
  each tried again until it is stored.
- `leasekeeper.LeaseKeeper`: the shards this replica serves (`shards.ShardTable`),
  renewed every period; it loads the groups of the shards it acquires and drops
  those of the shards it loses or releases.
- `events.log_records`: one structured event per stored change.

`Coordinator` composes them and is what the gRPC servicers call: group operations
here, reads through methods (`group`, `group_ids`, `image_for`).
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import KeysView, Sequence

import structlog

from regroup.reconciler import (
    ApiError,
    ConsumerGroupHeartbeat,
    ConsumerGroupHeartbeatResponse,
    Context,
    Group,
    GroupConfig,
    Result,
    TopicsImage,
    consumer_group_heartbeat,
    delete_group,
)
from regroup.reconciler.client_assignment import install_assignment, prepare_assignment
from regroup.reconciler.connect import put_connectors
from regroup.reconciler.drain import DrainOutcome, drain_member
from regroup.reconciler.errors import CoordinatorNotAvailable, GroupIdNotFound, InvalidAssignment
from regroup.reconciler.history import Circumstances, EventType, GroupEvent
from regroup.reconciler.liveness import renewed_session
from regroup.reconciler.messages import InstallAssignment, PrepareAssignment, PrepareAssignmentResponse
from regroup.reconciler.model import CONNECT_GROUP_TYPE
from regroup.reconciler.offsets import (
    FetchedOffset,
    OffsetToCommit,
    PartitionOutcome,
    ResetOffsets,
    ResetPlan,
    commit_offsets,
    expire_offsets,
    fetch_offsets,
    reset_offsets,
)

from .assigner import Assigner
from .clock import Clock
from .history import EventQuery, HistoryHub
from .leasekeeper import LeaseKeeper, LeaseSettings
from .refresh import GroupRefresher
from .scheduler import Scheduler
from .shards import LeaseNotTrusted, ShardTable
from .sql import LEASES_CHANNEL, TOPICS_CHANNEL
from .store import GroupStore, StoreUnavailable
from .storewatch import StoreWatch
from .telemetry import Gauges
from .timers import TimerKey, TimerQueue
from .topicadmin import TopicAdmin, TopicOutcome
from .writepath import NOT_SERVED, GroupWriter, store_unreachable


class Coordinator:
    def __init__(
        self,
        store: GroupStore,
        config: GroupConfig,
        clock: Clock,
        *,
        run_timers: bool = True,
        leases: LeaseSettings | None = None,
    ) -> None:
        self.log = structlog.get_logger("regroup")
        self.assigner = Assigner(config)
        self.writer = GroupWriter(store, config, clock, TimerQueue(), self.assigner, self.log)
        self.refresher = GroupRefresher(self.writer)
        self.scheduler = Scheduler(self.writer, self.assigner, self.sweep, self.refresher.refresh_group)
        self.topics = TopicAdmin(self.writer, self.refresher.refresh)
        self.keeper = LeaseKeeper(
            store,
            self.writer.shards,
            clock,
            leases or LeaseSettings(),
            on_acquired=self._take_shards,
            on_lost=self._drop_shards,
            on_topics=self.topics.reload,
            log=self.log,
            on_round=self._keep_listening,
        )
        self.writer.fence_failed = self.writer.shards.owner_unknown = self.keeper.wake.set
        #: The WatchGroup streams open on this replica, told of every event stored.
        self.history = HistoryHub()
        self.writer.on_events = self.history.published
        #: Events older than this are deleted by the periodic sweep (0: kept).
        self.history_max_age_ms = 7 * 24 * 3600 * 1000
        self._run_timers = run_timers
        self._stopped = False

    # -- the parts' state, read-only to callers ------------------------------------

    def gauges(self) -> Gauges:
        """What the metrics' gauges read, at each collection (not on any request)."""

        def groups() -> Counter[tuple[str, str]]:
            return Counter((g.group_type, g.state().value) for g in list(self.writer.groups.values()))

        def members() -> int:
            return sum(len(g.members) for g in list(self.writer.groups.values()))

        def revocations_pending() -> int:
            return sum(
                len(partitions)
                for g in list(self.writer.groups.values())
                for m in list(g.members.values())
                for partitions in m.pending_revocation.values()
            )

        keeper = self.keeper

        def lease_rounds() -> dict[str, int]:
            return {"ok": keeper.rounds - keeper.failed_rounds, "failed": keeper.failed_rounds}

        def shard_moves() -> dict[str, int]:
            return {
                "acquired": keeper.shards_acquired,
                "released": keeper.shards_released,
                "lost": keeper.shards_lost,
            }

        return Gauges(
            groups,
            members,
            revocations_pending,
            lambda: len(self.writer.shards.held),
            lease_rounds,
            shard_moves,
            lambda: not self.store_down,
            lambda: self.writer.longest_rebalance_ms() / 1000,
        )

    @property
    def store(self) -> GroupStore:
        return self.writer.store

    @property
    def config(self) -> GroupConfig:
        return self.writer.config

    @property
    def clock(self) -> Clock:
        return self.writer.clock

    @property
    def timers(self) -> TimerQueue:
        return self.writer.timers

    @property
    def groups(self) -> dict[str, Group]:
        return self.writer.groups

    @property
    def shards(self) -> ShardTable:
        return self.writer.shards

    @property
    def image(self) -> TopicsImage:
        """The topics."""
        return self.writer.image

    @property
    def watch(self) -> StoreWatch | None:
        return self.writer.watch

    @watch.setter
    def watch(self, watch: StoreWatch | None) -> None:
        self.writer.watch = watch

    @property
    def store_down(self) -> bool:
        return self.writer.store_down

    def store_available(self) -> None:
        """The store answers again after it was seen away: what waited for it goes now."""
        self.refresher.retry_now()

    def group(self, group_id: str) -> Group | None:
        return self.writer.groups.get(group_id)

    def group_ids(self) -> KeysView[str]:
        return self.writer.groups.keys()

    def served_group(self, group_id: str) -> Group | None:
        """The group as this replica may answer for it now, read from memory; None when it
        has no such group. Every read that answers with a group's state is fenced as a write
        is (`ShardTable.fence`): a replica paused past its lease wakes with groups that
        another replica may have changed, and must forward or refuse rather than tell them."""
        self.shards.fence(group_id, self.clock.monotonic_ms())
        return self.writer.groups.get(group_id)

    def served_group_ids(self) -> list[str]:
        """The ids of the groups this replica may list now (their shards held, loaded and
        trusted); LeaseNotTrusted when its view of the shards is out of date."""
        now_ms = self.clock.monotonic_ms()
        shards = self.shards
        shards.check_view(now_ms)
        return [g for g in self.writer.groups if shards.serves(g, now_ms)]

    def peers(self) -> dict[str, str]:
        """The other live replicas and their addresses, as the last lease round saw them."""
        view = self.keeper.view
        if view is None:
            return {}
        return {r: a for r, a in view.live.items() if r != self.store.replica_id and a}

    def image_for(self, group_id: str, group_type: str | None = None) -> TopicsImage:
        """The resources a group's members share: topics, or a Connect group's connectors."""
        return self.writer.image_for(group_id, group_type)

    # -- lifecycle ---------------------------------------------------------------

    async def start(self) -> None:
        """Loads the topics, takes this replica's share of the shards (loading their
        groups and arming their timers), then serves."""
        self._stopped = False
        # Listening first: a topic changed elsewhere after the load below is noticed.
        await self.store.listen(self._on_notice)
        await self.writer.load_topics()
        await self.keeper.start(run=self._run_timers)
        groups = self.writer.groups
        self.log.info(
            "coordinator_loaded",
            groups=len(groups),
            members=sum(len(g.members) for g in groups.values()),
            topics=len(self.image.by_id),
            shards=len(self.shards.held),
            shard_count=self.shards.count,
            replica_id=self.store.replica_id,
        )
        self.scheduler.start(self._run_timers)

    async def release_shards(self) -> None:
        """Hands every shard over at once (a graceful stop): other replicas take them
        in their next lease round instead of waiting for the leases to expire."""
        await self.keeper.stop(release=True)

    async def stop(self) -> None:
        self._stopped = True
        self.history.close_all("The coordinator is stopping.")
        await self.keeper.stop(release=True)
        await self.scheduler.stop()
        await self.assigner.close()

    # -- notices from other replicas -----------------------------------------------

    def _on_notice(self, channel: str, sender: str) -> None:
        """Another replica released shards or changed topics: the next lease round runs
        at once instead of at its period. It takes the free shards, and its topics
        version tells it to reload the topics (which it also does, later, if a notice
        was lost)."""
        if (
            not self._stopped
            and sender != self.store.replica_id
            and channel in (LEASES_CHANNEL, TOPICS_CHANNEL)
        ):
            self.keeper.wake.set()

    async def _keep_listening(self) -> None:
        """Before each lease round: listening again after a lost connection."""
        try:
            await self.store.listen(self._on_notice)
        except StoreUnavailable as e:
            self.log.warning("listen_failed", error=str(e))

    async def _take_shards(self, shards: Sequence[int]) -> None:
        loaded = await self.writer.take_shards(shards)
        self.log.info("shards_loaded", shards=list(shards), groups=len(loaded))
        # Topics may have changed after a group's last write (a crash between the
        # two, or a change made while no replica held its shard): the refresh bumps
        # the groups whose metadata moved.
        await self.refresher.refresh([g for g in loaded if (group := self.groups.get(g)) and group.members])

    async def _drop_shards(self, shards: Sequence[int]) -> None:
        dropped = self.writer.drop_shards(shards)
        self.refresher.forget(dropped)
        self.history.moved(
            dropped, "This replica no longer serves the group (its shard was released); find its coordinator."
        )
        if dropped:
            self.log.info("shards_dropped", shards=list(shards), groups=len(dropped))

    # -- timers --------------------------------------------------------------------

    async def expire_due(self) -> list[TimerKey]:
        """Fences the members whose timers are due now; returns the fenced ones."""
        return await self.scheduler.expire_due()

    # -- topics --------------------------------------------------------------------

    async def create_topics(self, specs: Sequence[tuple[str, int, tuple[str, ...]]]) -> list[TopicOutcome]:
        return await self.topics.create_topics(specs)

    async def create_partitions(
        self, specs: Sequence[tuple[str, str, int, tuple[str, ...]]]
    ) -> list[TopicOutcome]:
        """Grows topics named by (name, topic id, new count, new racks)."""
        return await self.topics.create_partitions(specs)

    async def delete_topics(self, names: Sequence[str], topic_ids: Sequence[str]) -> list[TopicOutcome]:
        return await self.topics.delete_topics(names, topic_ids)

    # -- operations ----------------------------------------------------------------

    async def consumer_group_heartbeat(self, req: ConsumerGroupHeartbeat) -> ConsumerGroupHeartbeatResponse:
        new_member_id = str(uuid.uuid4()) if not req.member_id and req.member_epoch == 0 else ""
        cause = "leave" if req.member_epoch < 0 else "heartbeat"

        def op(group: Group | None, ctx: Context) -> Result[ConsumerGroupHeartbeatResponse]:
            return consumer_group_heartbeat(group, req, ctx)

        try:
            return await self.writer.run(
                req.group_id, op, cause=cause, new_member_id=new_member_id, group_type=req.group_type
            )
        except CoordinatorNotAvailable as e:
            raise self._renewing_session(req, e) from e

    def answer_heartbeat_now(self, req: ConsumerGroupHeartbeat) -> ConsumerGroupHeartbeatResponse | None:
        """The answer to a heartbeat that changes nothing, given without awaiting; None
        for any other heartbeat (nothing was done: `consumer_group_heartbeat` serves it)."""
        if req.member_epoch <= 0:
            return None  # joins and leaves write

        def op(group: Group | None, ctx: Context) -> Result[ConsumerGroupHeartbeatResponse]:
            return consumer_group_heartbeat(group, req, ctx)

        result = self.writer.answer_now(req.group_id, op, cause="heartbeat", group_type=req.group_type)
        return None if result is None else result.response

    def _renewing_session(
        self, req: ConsumerGroupHeartbeat, refusal: CoordinatorNotAvailable
    ) -> CoordinatorNotAvailable:
        """The store could not serve a heartbeat: renew the member's session all
        the same when that is safe (see `liveness`), and say so in the refusal.
        Not when the shard's lease is in doubt: another replica may take it over."""
        if isinstance(refusal, LeaseNotTrusted):
            return refusal
        in_doubt = self.writer.in_doubt(req.group_id)
        group = self.groups.get(req.group_id)
        ctx = self.writer.context(req.group_id, group, req.group_type, "")
        timer = renewed_session(group, req.member_id, req.member_epoch, in_doubt, ctx)
        if timer is None:
            return refusal
        self.writer.apply_timers(req.group_id, (timer,), ctx.now_ms)
        return refusal.renewing(req.member_epoch, self.config.session_timeout_ms)

    async def prepare_assignment(self, req: PrepareAssignment) -> PrepareAssignmentResponse:
        def op(group: Group | None, ctx: Context) -> Result[PrepareAssignmentResponse]:
            return prepare_assignment(group, req, ctx)

        return await self.writer.run(req.group_id, op, cause="prepare_assignment")

    async def install_assignment(self, req: InstallAssignment) -> None:
        def op(group: Group | None, ctx: Context) -> Result[None]:
            return install_assignment(group, req, ctx)

        try:
            await self.writer.run(
                req.group_id,
                op,
                cause="install_assignment",
                circumstances=Circumstances(member_id=req.member_id),
            )
        except InvalidAssignment as e:
            # Nothing changed, but the group's history says who sent what and why it was refused.
            group = self.groups.get(req.group_id)
            refused = GroupEvent(
                type=EventType.ASSIGNMENT_REFUSED,
                timestamp_ms=self.clock.wall_ms(),
                group_epoch=0 if group is None else group.group_epoch,
                reason="invalid_assignment",
                member_id=req.member_id,
                member_epoch=req.member_epoch,
                message=str(e)[:1000],
            )
            try:
                await self.writer.note_events(req.group_id, [refused])
            except (ApiError, StoreUnavailable) as note_error:
                self.log.warning("history_not_stored", group_id=req.group_id, error=str(note_error))
            raise

    # -- history -------------------------------------------------------------------

    async def list_group_events(self, group_id: str, query: EventQuery) -> tuple[list[GroupEvent], bool]:
        """A group's events from the store (any replica answers; a deleted group's too)."""
        if self.writer.store_down:
            raise store_unreachable()
        try:
            return await self.store.list_events(group_id, query)
        except StoreUnavailable as e:
            self.log.warning("history_read_failed", group_id=group_id, error=str(e))
            raise store_unreachable() from e

    async def sweep(self) -> int:
        """The periodic sweep: expired offsets (answered: how many), then history older
        than its retention (deleted along the age index)."""
        expired = await self.expire_offsets()
        if self.history_max_age_ms > 0:
            try:
                dropped = await self.store.expire_events(self.clock.wall_ms() - self.history_max_age_ms)
            except StoreUnavailable as e:
                self.log.warning("history_expiry_failed", error=str(e))
            else:
                if dropped:
                    self.log.info("history_expired", events=dropped)
        return expired

    async def commit_offsets(
        self, group_id: str, member_id: str, member_epoch: int, offsets: Sequence[OffsetToCommit]
    ) -> list[PartitionOutcome]:
        def op(group: Group | None, ctx: Context) -> Result[list[PartitionOutcome]]:
            return commit_offsets(group, group_id, member_id, member_epoch, offsets, ctx)

        try:
            outcomes = await self.writer.run(group_id, op, cause="offset_commit")
        except ApiError as e:  # the whole commit refused: each partition of it, for that reason
            self.writer.metrics.offsets_outcome({e.code.name.lower(): len(offsets)})
            raise
        self.writer.metrics.offsets_outcome(Counter(o.error.name.lower() for o in outcomes))
        return outcomes

    async def fetch_offsets(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        wanted: Sequence[tuple[str, Sequence[int]]] | None,
    ) -> list[FetchedOffset]:
        def op(group: Group | None, ctx: Context) -> Result[list[FetchedOffset]]:
            return Result(fetch_offsets(group, group_id, member_id, member_epoch, wanted))

        return await self.writer.run(group_id, op, cause="offset_fetch")

    async def reset_offsets(self, req: ResetOffsets) -> ResetPlan:
        """Resets an empty group's committed offsets (or only plans it, with `dry_run`):
        every change in one write; the plan says `applied` only once it is stored."""

        def op(group: Group | None, ctx: Context) -> Result[ResetPlan]:
            return reset_offsets(group, req, ctx)

        # The history derives its event from this exact cause, and names the way it was reset.
        return await self.writer.run(
            req.group_id, op, cause="reset_offsets", circumstances=Circumstances(reset_mode=req.mode)
        )

    async def expire_offsets(self) -> int:
        """Removes expired offsets of empty groups; returns how many."""

        def op(group: Group | None, ctx: Context) -> Result[int]:
            if group is None:
                return Result(0)
            return expire_offsets(group, self.config.offsets_retention_ms, ctx)

        expired = 0
        for group_id in [g.group_id for g in self.groups.values() if g.offsets and not g.members]:
            try:
                expired += await self.writer.run(group_id, op, cause="offsets_expired")
            except NOT_SERVED as e:
                self.log.warning("offset_expiration_failed", group_id=group_id, error=str(e))
        if expired:
            self.log.info("offsets_expired", offsets=expired)
        return expired

    async def put_connectors(self, group_id: str, connectors: Sequence[tuple[str, int]]) -> int:
        """Sets a Connect group's connectors (creating the group if needed); returns
        the group epoch afterwards."""

        def op(group: Group | None, ctx: Context) -> Result[int]:
            return put_connectors(group, connectors, ctx)

        return await self.writer.run(group_id, op, cause="connectors_changed", group_type=CONNECT_GROUP_TYPE)

    async def drain_member(
        self, group_id: str, member_id: str, instance_id: str, undrain: bool
    ) -> DrainOutcome:
        """Takes a member out of service (or back in with `undrain`); the member is named
        by member id or instance id ("" when not given)."""

        def op(group: Group | None, ctx: Context) -> Result[DrainOutcome]:
            return drain_member(group, group_id, member_id, instance_id, undrain, ctx)

        # The history derives its events from these exact causes.
        return await self.writer.run(group_id, op, cause="undrain" if undrain else "drain")

    async def delete_group(self, group_id: str) -> None:
        def op(group: Group | None, ctx: Context) -> Result[None]:
            if group is None:
                raise GroupIdNotFound(f"Group {group_id} not found.")
            return delete_group(group)

        await self.writer.run(group_id, op, cause="delete")
