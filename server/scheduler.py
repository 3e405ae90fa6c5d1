"""The scheduler: fires the in-memory timers (sessions, rebalance timeouts, the
assignment timer, refreshes to try again, the offsets sweep) and offloads big
groups' target computations.

A big group's target is computed in a worker process (see `assigner.py`)
without holding the group, and installed afterwards if it still applies. When
a target is computed, and where, is the engine's rule (`on_assignment_timer`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from regroup.reconciler import Context, Group, Result, on_rebalance_timeout, on_session_timeout
from regroup.reconciler.history import Circumstances
from regroup.reconciler.target_assignment import PendingTarget, install_computed_target, on_assignment_timer

from .assigner import Assigner
from .timers import TimerKey
from .writepath import NOT_SERVED, GroupWriter, Operation

#: How long to wait before retrying a timeout whose fencing could not be stored.
TIMER_RETRY_MS = 1_000
#: Timers fire at most this often (a deadline may fire up to this much late).
TIMER_TICK_MS = 10
#: The periodic look for expired offsets (not a group's timer).
OFFSETS_SWEEP = TimerKey("", "", "offsets")


@dataclass(frozen=True, slots=True)
class _TargetJob:
    """A big group's target to compute in the worker, read from `group` at `pending`."""

    group: Group
    pending: PendingTarget


class Scheduler:
    def __init__(
        self,
        writer: GroupWriter,
        assigner: Assigner,
        expire_offsets: Callable[[], Awaitable[int]],
        refresh_group: Callable[[str], Awaitable[bool]],
    ) -> None:
        self.writer = writer
        self.assigner = assigner
        self._expire_offsets = expire_offsets
        #: Tries a group's failed refresh again (it arms the timer again if it fails).
        self._refresh_group = refresh_group
        #: Groups whose target the worker is computing (without their lock held).
        self._computing: set[str] = set()
        self._timer_task: asyncio.Task[None] | None = None
        self._stopping = False
        self.log: Any = writer.log

    def start(self, run_timers: bool) -> None:
        """Arms the offsets sweep and, with `run_timers`, starts the timer loop."""
        self._stopping = False
        writer = self.writer
        writer.timers.schedule(
            OFFSETS_SWEEP, writer.clock.monotonic_ms() + writer.config.offsets_retention_check_ms
        )
        if run_timers:
            self._timer_task = asyncio.create_task(self._timer_loop(), name="regroup-timers")

    async def stop(self) -> None:
        # The flag ends the timer loop even if a cancellation were lost on the way.
        self._stopping = True
        self.writer.timers.wake.set()
        if self._timer_task is not None:
            self._timer_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._timer_task
            self._timer_task = None

    async def _timer_loop(self) -> None:
        last_run = self.writer.clock.monotonic_ms()
        while not self._stopping:
            self.writer.timers.wake.clear()
            deadline = self.writer.timers.next_deadline()
            if deadline is not None:
                # Timers fire in ticks: thousands of members whose sessions were armed
                # within a few seconds must not wake the loop thousands of times.
                deadline = max(deadline, last_run + TIMER_TICK_MS)
            await self.writer.clock.sleep_until(deadline, self.writer.timers.wake)
            if self._stopping:
                return
            last_run = self.writer.clock.monotonic_ms()
            try:
                await self.expire_due()
            except Exception:
                self.log.exception("timer_loop_failed")

    async def expire_due(self) -> list[TimerKey]:
        """Fences the members whose timers are due now; returns the fenced ones."""
        by_group: dict[str, list[tuple[TimerKey, int]]] = defaultdict(list)
        for key, payload in self.writer.timers.pop_due(self.writer.clock.monotonic_ms()):
            if key == OFFSETS_SWEEP:
                await self._expire_offsets()
                self.writer.timers.schedule(
                    OFFSETS_SWEEP,
                    self.writer.clock.monotonic_ms() + self.writer.config.offsets_retention_check_ms,
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
        if key.kind == "refresh":
            await self._refresh_group(key.group_id)
            return False  # nobody was fenced

        def op(group: Group | None, ctx: Context) -> Result[bool]:
            # A heartbeat may have re-armed the timer after it fired.
            if group is None or self.writer.timers.deadline(key) is not None:
                return Result(False)
            if key.kind == "session":
                return on_session_timeout(group, key.member_id, ctx)
            return on_rebalance_timeout(group, key.member_id, payload, ctx)

        cause = "assignment" if key.kind == "assignment" else f"{key.kind}_timeout"
        try:
            if key.kind == "assignment":
                return await self._compute_target(key)
            fired = await self.writer.run(key.group_id, op, cause=cause)
            if fired:
                self.writer.metrics.timed_out(key.kind)
            return fired
        except NOT_SERVED as e:
            self.log.warning(
                "timeout_not_applied",
                group_id=key.group_id,
                member_id=key.member_id,
                kind=key.kind,
                error=str(e),
            )
            if self.writer.timers.deadline(key) is None:
                self.writer.timers.schedule(key, self.writer.clock.monotonic_ms() + TIMER_RETRY_MS, payload)
            return False

    async def _compute_target(self, key: TimerKey) -> bool:
        """The assignment timer. A small group's target is computed and stored at once
        (as a heartbeat would). A big group's is computed by the worker process without
        holding the group, which keeps answering its members meanwhile (Kafka's offloaded
        assignment, KIP-1263), and is installed afterwards if it still applies: held
        for the computation, the group made its own members wait up to its length
        (tens of milliseconds at 100,000 partitions), then step in a burst."""
        group_id = key.group_id
        job = await self.writer.run(group_id, self._prepare_target_op(key), cause="assignment")
        if not isinstance(job, _TargetJob):
            return job
        self._computing.add(group_id)
        started = time.perf_counter()
        tracer = self.writer.tracer
        span = (
            None
            if tracer is None
            else tracer.start_span(
                "regroup.assignment.compute",
                attributes={"regroup.group_id": group_id, "regroup.assignment.mode": "offloaded"},
            )
        )
        try:
            records = await self.assigner.compute(group_id, job.group, job.pending)
        finally:
            self._computing.discard(group_id)
            if span is not None:
                span.end()
        seconds = time.perf_counter() - started
        self.writer.metrics.computed("offloaded", seconds)

        async def install(group: Group | None, ctx: Context) -> Result[bool]:
            # Asynchronous only so that a large install's write is prepared in a thread.
            return install_computed_target(group, records, ctx)

        return await self.writer.run(
            group_id,
            install,
            cause="assignment",
            computed_elsewhere=True,
            circumstances=Circumstances(compute_ms=round(seconds * 1000)),
        )

    def _prepare_target_op(self, key: TimerKey) -> Operation[bool | _TargetJob]:
        def op(group: Group | None, ctx: Context) -> Result[bool | _TargetJob]:
            if group is None or self.writer.timers.deadline(key) is not None:
                return Result(False)  # gone, or a later timer was armed after this one fired
            result = on_assignment_timer(group, ctx, computing=key.group_id in self._computing)
            if isinstance(result.response, PendingTarget):
                # Read from the group's indexes: a big group's members are not passed over here.
                return Result(_TargetJob(group, result.response))
            return Result(result.response, result.records, result.timers)

        return op
