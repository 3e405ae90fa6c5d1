"""LeaderElection: one member of a group leads at a time, with a fencing token.

A leader group (docs/leader-election.md) is a consumer group whose members name the
server assignor `leader` and subscribe to no topics. Leadership is partition 0 of a
reserved topic that the coordinator hands to one member, revoking it before it gives
it to another, so this is a GroupMember whose listener turns that partition's
arrival and departure into `on_elected(token)` and `on_revoked()`.

The fencing token is the member epoch at which the member was handed leadership
(`Assignment.assigned_epochs`): the coordinator moves leadership only with a target
computed at a group epoch above any epoch the old leader held, and the new leader
gets it at that epoch or later, so every takeover raises the token.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import grpc

from regroup.client.errors import RegroupError
from regroup.client.member import GroupMember, MemberOptions
from regroup.client.sync import OnSharedLoop
from regroup.client.tls import TlsConfig
from regroup.client.types import TopicPartition

#: The server assignor of leader groups.
LEADER_ASSIGNOR = "leader"
#: The reserved topic whose partition 0 is leadership (the server's LEADERSHIP_TOPIC_ID).
LEADERSHIP_TOPIC_ID = "regroup:leadership"

T = TypeVar("T")
OnElected = Callable[[int], Awaitable[None]]
OnRevoked = Callable[[], Awaitable[None]]


def _is_leadership(tp: TopicPartition) -> bool:
    return tp.topic_id == LEADERSHIP_TOPIC_ID and tp.partition == 0


class _Listener:
    """The member's listener: leadership's arrival and departure, as callbacks."""

    def __init__(self, election: LeaderElection) -> None:
        self._election = election

    async def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        if any(map(_is_leadership, partitions)):
            await self._election._elected()

    async def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
        if any(map(_is_leadership, partitions)):
            await self._election._revoked()

    async def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> None:
        await self.on_partitions_revoked(partitions)


class LeaderElection:
    """Takes part in the election of group `group_id`'s leader.

    >>> async def elected(token: int) -> None: ...  # start leading; write with `token`
    >>> async def revoked() -> None: ...  # stop leading before this returns
    >>> async with LeaderElection("127.0.0.1:50051", "scheduler", on_elected=elected,
    ...                           on_revoked=revoked) as election:
    ...     await election.wait_elected()

    `on_elected(token)` runs when this member becomes the leader, with its fencing
    token; `on_revoked()` when it stops being the leader: on a graceful handover (the
    coordinator waits for it to return before another member leads), on `close()`,
    and when leadership was lost (fenced, or the coordinator unreachable for nearly a
    session: the member steps down `session_safety_margin_ms` before the coordinator
    may elect another). Both are coroutine functions, run one at a time while
    heartbeats go on. `target`, `member_id`, `options`, `interceptors`,
    `channel_factory` and `tls` are GroupMember's; `auth_token` is GroupMember's
    `token` (sent as `authorization: Bearer`), renamed here so as not to be confused
    with the fencing token.
    """

    def __init__(
        self,
        target: str | grpc.aio.Channel,
        group_id: str,
        *,
        on_elected: OnElected | None = None,
        on_revoked: OnRevoked | None = None,
        member_id: str | None = None,
        options: MemberOptions | None = None,
        interceptors: Sequence[grpc.aio.ClientInterceptor] | None = None,
        channel_factory: Callable[[str], grpc.aio.Channel] | None = None,
        tls: TlsConfig | None = None,
        auth_token: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._group_id = group_id
        self._on_elected = on_elected
        self._on_revoked = on_revoked
        self._token: int | None = None
        self._member = GroupMember(
            target,
            listener=_Listener(self),
            member_id=member_id,
            options=options,
            clock=clock,
            interceptors=interceptors,
            channel_factory=channel_factory,
            tls=tls,
            token=auth_token,
        )

    @property
    def group_id(self) -> str:
        return self._group_id

    @property
    def member_id(self) -> str:
        return self._member.member_id

    @property
    def member(self) -> GroupMember:
        """The underlying group member (its epoch, its failure)."""
        return self._member

    @property
    def token(self) -> int | None:
        """The fencing token while this member leads, else None."""
        return self._token

    @property
    def is_leader(self) -> bool:
        return self._token is not None

    @property
    def failure(self) -> RegroupError | None:
        """The error that stopped the member for good, if any (it then does not lead)."""
        return self._member.failure

    async def start(self) -> None:
        """Joins the group; returns once the coordinator accepted the member (it may
        not lead yet: `wait_elected`). Raises RegroupError when the join is refused."""
        # Members of a leader group subscribe to no topics: leadership is their one resource.
        await self._member.join(self._group_id, topics=[], assignor=LEADER_ASSIGNOR)

    async def wait_elected(self) -> int:
        """Waits until this member leads (bound it with asyncio.timeout); returns its token."""
        while True:
            # Unreported: a follower waiting (for ever) to lead is not a trouble.
            await self._member._wait(lambda a: any(map(_is_leadership, a.partitions)), None, report=False)
            token = self._token
            if token is not None:
                return token
            await asyncio.sleep(0)  # on_elected has not started yet: let it

    async def close(self) -> None:
        """Steps down (on_revoked, if leading) and leaves the group: another member is
        elected as soon as the coordinator learns of it, without waiting for a timeout."""
        await self._member.close(permanent=True)

    async def abort(self) -> None:
        """Stops at once, without on_revoked and without leaving, as a crash would: the
        coordinator elects another member once this one's session times out. For tests
        and processes that must stop now; the token is dropped locally."""
        self._token = None
        await self._member.abort()

    async def __aenter__(self) -> LeaderElection:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _elected(self) -> None:
        # The member records the partition at the epoch it is at now, when the callback
        # starts (GroupMember._reconcile): the epoch of the assignment that handed it over.
        self._token = self._member.member_epoch
        if self._on_elected is not None:
            await self._on_elected(self._token)

    async def _revoked(self) -> None:
        # Dropped first: a write checked against `token` meanwhile is not made.
        was_leader, self._token = self._token is not None, None
        if was_leader and self._on_revoked is not None:
            await self._on_revoked()


class SyncLeaderElection(OnSharedLoop):
    """The synchronous twin of LeaderElection, for code without an event loop:
    `on_elected(token)` and `on_revoked()` are plain functions, run in a worker thread
    (heartbeats go on meanwhile); every method may be called from any thread.

    >>> with SyncLeaderElection("127.0.0.1:50051", "scheduler", on_elected=print) as election:
    ...     token = election.wait_elected(timeout=30)
    """

    def __init__(
        self,
        target: str,
        group_id: str,
        *,
        on_elected: Callable[[int], Any] | None = None,
        on_revoked: Callable[[], Any] | None = None,
        member_id: str | None = None,
        options: MemberOptions | None = None,
        interceptors: Sequence[grpc.aio.ClientInterceptor] | None = None,
        channel_factory: Callable[[str], grpc.aio.Channel] | None = None,
        tls: TlsConfig | None = None,
        auth_token: str | None = None,
    ) -> None:
        async def elected(token: int) -> None:
            if on_elected is not None:
                await asyncio.to_thread(on_elected, token)

        async def revoked() -> None:
            if on_revoked is not None:
                await asyncio.to_thread(on_revoked)

        async def make() -> LeaderElection:
            # The channel must be created on the loop that will use it.
            return LeaderElection(
                target,
                group_id,
                on_elected=elected,
                on_revoked=revoked,
                member_id=member_id,
                options=options,
                interceptors=interceptors,
                channel_factory=channel_factory,
                tls=tls,
                auth_token=auth_token,
            )

        self._election = self._start_on_loop(make)

    @property
    def group_id(self) -> str:
        return self._election.group_id

    @property
    def member_id(self) -> str:
        return self._election.member_id

    @property
    def token(self) -> int | None:
        """The fencing token while this member leads, else None."""
        return self._election.token

    @property
    def is_leader(self) -> bool:
        return self._election.is_leader

    @property
    def failure(self) -> RegroupError | None:
        return self._election.failure

    def start(self) -> None:
        """Joins the group (LeaderElection.start)."""
        self._call(self._election.start())

    def wait_elected(self, timeout: float | None = None) -> int:
        """Waits until this member leads, at most `timeout` seconds (TimeoutError); its token."""

        async def wait() -> int:
            async with asyncio.timeout(timeout):
                return await self._election.wait_elected()

        return self._call(wait())

    def close(self) -> None:
        """Steps down (on_revoked, if leading) and leaves the group."""
        self._finish(self._election.close)

    def abort(self) -> None:
        """Stops at once without leaving, as a crash would (LeaderElection.abort)."""
        self._finish(self._election.abort)

    def __enter__(self) -> SyncLeaderElection:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
