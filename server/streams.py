"""Member streams: many members' heartbeats over one stream, and nudges pushed to them.

`StreamHub` knows every open stream (`StreamSession`) and which members' heartbeats
came through which. The write path tells it of every stored change of a group
(`written`); it then asks the engine which of that group's stream members a heartbeat
would move now (`reconciler.nudges.nudge_reason`), and queues a nudge for each on its
stream. A nudge is queued once and not again until the member's next heartbeat on
that stream (`heard`), so a burst of writes in a big group nudges each member once.
Nudges are in memory only: they write nothing, and nothing depends on them.

A session holds what its stream's writer sends next: answers (bounded by
`StreamLimits.max_pending` together with the heartbeats still being served; past it
the stream is closed, RESOURCE_EXHAUSTED) and nudges (at most one per member, and at
most `max_members` members per stream). The gRPC handler is in service.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from regroup.reconciler import Group, Record
from regroup.reconciler.nudges import NudgeReason, nudge_reason
from regroup.reconciler.records import CurrentAssignmentRecord
from regroup.v1 import common_pb2, coordinator_pb2

MemberKey = tuple[str, str]  # (group id, member id)
StreamAnswer = coordinator_pb2.StreamHeartbeatResponse

#: The most answers and nudges one server message carries (each is small; a message of
#: this many stays far below the default 4 MiB limit of gRPC messages).
MAX_ITEMS_PER_MESSAGE = 1_000
#: A stream writes at most once per this long while it has fewer than COALESCE_ENOUGH
#: answers to send.
COALESCE_S = 0.002
COALESCE_ENOUGH = 64


@dataclass(frozen=True, slots=True)
class StreamLimits:
    max_batch: int = 1_000
    max_members: int = 10_000
    max_pending: int = 20_000

    def pb(self) -> coordinator_pb2.StreamLimits:
        return coordinator_pb2.StreamLimits(
            max_batch=self.max_batch, max_members=self.max_members, max_pending=self.max_pending
        )


class StreamClosed(Exception):
    """Why a stream ends with a status other than OK."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


class StreamSession:
    """One open MemberStream: what its writer sends next, and whose heartbeats it carries."""

    def __init__(self, limits: StreamLimits) -> None:
        self.limits = limits
        #: Members whose heartbeats came through this stream (pushes go to them).
        self.members: set[MemberKey] = set()
        #: Correlation ids of heartbeats being served (answered later).
        self.in_flight: set[int] = set()
        #: Of those, the ones of members not carried yet (joins, mostly): they count
        #: against max_members until answered.
        self.joining: set[int] = set()
        self._answers: list[StreamAnswer] = []
        #: Nudges to send: member -> (reason, group epoch).
        self._nudges: dict[MemberKey, tuple[int, int]] = {}
        #: Members nudged (queued or sent) and not heard from since.
        self.nudged: set[MemberKey] = set()
        self._wake = asyncio.Event()
        #: Set when the client half-closed its side: the stream ends once all is answered.
        self.input_done = False
        self.failure: StreamClosed | None = None
        #: Heartbeats served in the background (their tasks, kept alive here).
        self.tasks: set[asyncio.Task[None]] = set()
        self.nudges_sent = 0
        self._last_write = 0.0
        self.messages_written = 0
        self.answers_written = 0
        #: Called once when the stream fails (stops its writer, even mid-write).
        self.on_failure: Callable[[], Any] | None = None

    @property
    def pending(self) -> int:
        """Answers owed or waiting to be written."""
        return len(self.in_flight) + len(self._answers)

    def answer(self, answer: StreamAnswer) -> None:
        self._answers.append(answer)
        self._wake.set()

    def nudge(self, key: MemberKey, reason: NudgeReason, group_epoch: int) -> None:
        self.nudged.add(key)
        self._nudges[key] = (int(reason), group_epoch)
        self._wake.set()

    def heard(self, key: MemberKey) -> None:
        """The member heartbeated: it learns the news from the answer."""
        if key in self.nudged:
            self.nudged.discard(key)
            self._nudges.pop(key, None)

    def fail(self, failure: StreamClosed) -> None:
        if self.failure is not None:
            return
        self.failure = failure
        self._wake.set()
        if self.on_failure is not None:
            self.on_failure()

    def end_of_input(self) -> None:
        self.input_done = True
        self._wake.set()

    async def next_message(self) -> coordinator_pb2.MemberStreamResponse | None:
        """The next message to write; None once the stream is over (the input ended
        and everything is answered) or failed."""
        while True:
            if self.failure is not None:
                return None
            if self._answers or self._nudges:
                # A busy stream (it wrote less than COALESCE_S ago) waits for the rest of
                # that time unless it has many answers already: the answers to the
                # messages read meanwhile then go in the same message (a write costs as
                # much as dozens of answers). An idle stream answers at once.
                wait = self._last_write + COALESCE_S - time.monotonic()
                if wait > 0 and len(self._answers) < COALESCE_ENOUGH and self.failure is None:
                    await asyncio.sleep(wait)
                    continue
                return self._take()
            if self.input_done and not self.in_flight:
                return None
            self._wake.clear()
            await self._wake.wait()

    def _take(self) -> coordinator_pb2.MemberStreamResponse:
        self._last_write = time.monotonic()
        self.messages_written += 1
        message = coordinator_pb2.MemberStreamResponse()
        answers = self._answers
        if len(answers) <= MAX_ITEMS_PER_MESSAGE:
            self._answers = []
        else:
            answers, self._answers = answers[:MAX_ITEMS_PER_MESSAGE], answers[MAX_ITEMS_PER_MESSAGE:]
        message.responses.extend(answers)
        self.answers_written += len(answers)
        room = MAX_ITEMS_PER_MESSAGE - len(answers)
        if room > 0 and self._nudges:
            taken = list(self._nudges.items())[:room]
            for key, (reason, epoch) in taken:
                del self._nudges[key]
                message.nudges.add(group_id=key[0], member_id=key[1], reason=reason, group_epoch=epoch)
            self.nudges_sent += len(taken)
        return message


class StreamHub:
    """The open streams, and which stream carries each member's heartbeats."""

    def __init__(self, limits: StreamLimits | None = None) -> None:
        self.limits = limits or StreamLimits()
        self.sessions: set[StreamSession] = set()
        #: group id -> member id -> the stream its heartbeats came through last.
        self._members: dict[str, dict[str, StreamSession]] = {}

    def open(self) -> StreamSession:
        session = StreamSession(self.limits)
        self.sessions.add(session)
        return session

    def close(self, session: StreamSession) -> None:
        self.sessions.discard(session)
        for group_id, member_id in session.members:
            self._drop(group_id, member_id, session)
        session.members.clear()
        for task in session.tasks:
            task.cancel()

    def close_all(self, failure: StreamClosed) -> None:
        """The server stops: every stream ends with `failure` (its members go unary)."""
        for session in list(self.sessions):
            session.fail(failure)

    def may_carry(self, session: StreamSession, key: MemberKey) -> bool:
        """False when one more member would pass the stream's limit (counting the
        members whose first heartbeat on it is being served)."""
        if key in session.members:
            return True
        return len(session.members) + len(session.joining) < self.limits.max_members

    def register(self, session: StreamSession, key: MemberKey) -> None:
        """The member's heartbeats come through `session` (the last stream it used wins)."""
        if key in session.members:
            return
        group_id, member_id = key
        by_member = self._members.setdefault(group_id, {})
        previous = by_member.get(member_id)
        if previous is not None and previous is not session:
            previous.members.discard(key)
        by_member[member_id] = session
        session.members.add(key)

    def catch_up(
        self, session: StreamSession, key: MemberKey, group: Group | None, told_to_compute: bool
    ) -> None:
        """`session` has carried the member since the answer just queued (its first
        heartbeat through it): nudge it if a change stored after the state that answer
        gives concerns it. Such a change found it on no stream: heartbeats queued behind
        a write are served as one batch and answered once it is stored, so a member of
        the batch whose partitions a later one released, or whose target a later join
        moved, would otherwise wait for its next interval. `group` is the group this
        replica serves (None: not served here, nothing is known of its changes)."""
        if group is None or key not in session.members or key in session.nudged:
            return
        reason = nudge_reason(group, key[1])
        if reason is None or (reason is NudgeReason.COMPUTE_ASSIGNMENT and told_to_compute):
            return
        session.nudge(key, reason, group.group_epoch)
        if reason is NudgeReason.MEMBER_REMOVED:
            self.unregister(session, key)

    def unregister(self, session: StreamSession, key: MemberKey) -> None:
        if key in session.members:
            session.members.discard(key)
            self._drop(key[0], key[1], session)

    def _drop(self, group_id: str, member_id: str, session: StreamSession) -> None:
        by_member = self._members.get(group_id)
        if by_member is not None and by_member.get(member_id) is session:
            del by_member[member_id]
            if not by_member:
                del self._members[group_id]

    def members_of(self, group_id: str) -> int:
        return len(self._members.get(group_id, ()))

    def written(self, group_id: str, group: Group | None, records: Sequence[Record]) -> None:
        """A change of the group was stored (and replayed): nudge its stream members
        that a heartbeat would move now. A write of current assignments only (members
        moving towards their targets) can only have released partitions: only the
        members waiting for some are looked at then."""
        by_member = self._members.get(group_id)
        if not by_member:
            return
        epoch = 0 if group is None else group.group_epoch
        candidates: Iterable[str] = by_member
        if group is not None and all(type(r) is CurrentAssignmentRecord for r in records):
            # Members moving towards their targets: only those waiting may move now.
            waiting = group.unreleased_member_ids()
            candidates = (
                [m for m in waiting if m in by_member]
                if len(waiting) < len(by_member)
                else [m for m in by_member if m in waiting]
            )
        gone: list[tuple[str, StreamSession]] = []
        for member_id in candidates:
            session = by_member[member_id]
            key = (group_id, member_id)
            if key in session.nudged:
                # Not nudged twice; but once out of the group it is no longer carried
                # (else it would hold its place under max_members until the stream ends).
                if group is None or member_id not in group.members:
                    gone.append((member_id, session))
                continue
            reason = nudge_reason(group, member_id)
            if reason is None:
                continue
            session.nudge(key, reason, epoch)
            if reason in (NudgeReason.GROUP_DELETED, NudgeReason.MEMBER_REMOVED):
                gone.append((member_id, session))
        for member_id, session in gone:
            self.unregister(session, (group_id, member_id))


#: Serves one heartbeat item of a stream: answers it on the session at once, or starts
#: serving it in a task that answers later (its correlation id in `session.in_flight`).
ServeItem = Callable[[StreamSession, coordinator_pb2.StreamHeartbeat], None]


def refusal(correlation_id: int, code: int, message: str) -> StreamAnswer:
    """An item the stream refuses itself: nothing was done for it."""
    return StreamAnswer(correlation_id=correlation_id, error_code=code, error_message=message)  # type: ignore[arg-type]


async def run_stream(
    hub: StreamHub,
    requests: AsyncIterator[coordinator_pb2.MemberStreamRequest],
    context: Any,
    serve: ServeItem,
) -> None:
    """One MemberStream: reads batches and serves their items (`serve`), while a writer
    sends the answers and nudges as they are ready; ends when the client half-closed
    and everything is answered, or with the status of a failure."""
    session = hub.open()
    writer = asyncio.create_task(_write(session, context))
    reader = asyncio.create_task(_read(session, context, serve))

    def reader_done(task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            session.fail(
                StreamClosed(grpc.StatusCode.INTERNAL, f"Reading the stream failed: {task.exception()!r}")
            )

    reader.add_done_callback(reader_done)
    # A failure ends the writer even while it waits for the client to read.
    session.on_failure = writer.cancel
    try:
        await asyncio.wait({writer})
    finally:
        reader.cancel()
        writer.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await reader
        hub.close(session)
    if not writer.cancelled() and writer.exception() is not None:
        raise writer.exception()  # type: ignore[misc]
    if session.failure is not None:
        await context.abort(session.failure.code, session.failure.details)


async def _write(session: StreamSession, context: Any) -> None:
    await context.write(coordinator_pb2.MemberStreamResponse(limits=session.limits.pb()))
    while True:
        message = await session.next_message()
        if message is None:
            return
        await context.write(message)


async def _read(session: StreamSession, context: Any, serve: ServeItem) -> None:
    limits = session.limits
    # context.read() rather than the request iterator: one generator less per message.
    while True:
        message = await context.read()
        if message is grpc.aio.EOF:
            break
        items = message.heartbeats
        if len(items) > limits.max_batch:
            why = (
                f"A message may carry at most {limits.max_batch} heartbeats "
                f"(REGROUP_STREAM_MAX_BATCH); this one carried {len(items)}."
            )
            for item in items:
                session.answer(refusal(item.correlation_id, common_pb2.STREAM_LIMIT_REACHED, why))
        else:
            for item in items:
                serve(session, item)
        if session.pending > limits.max_pending:
            session.fail(
                StreamClosed(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"{session.pending} answers wait for the client to read them, more than "
                    f"{limits.max_pending} (REGROUP_STREAM_MAX_PENDING): the stream is closed; "
                    "send the heartbeats not answered again with the unary RPCs.",
                )
            )
            return
    session.end_of_input()
