"""The synchronous twin of GroupMember, for code without an event loop (a Spark
executor, a script): the member runs on an event loop in a background thread,
and listener callbacks run in worker threads so heartbeats go on meanwhile."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import threading
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar

import grpc

from regroup.client.connect import ConnectListener, ConnectWorker, WorkerListener
from regroup.client.errors import RegroupError
from regroup.client.member import GroupMember, MemberOptions
from regroup.client.tls import TlsConfig, check_factory
from regroup.client.types import Assignment, PartitionListener, RebalanceListener, TopicPartition

T = TypeVar("T")
P = ParamSpec("P")


def _twin(
    method: Callable[Concatenate[Any, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[SyncGroupMember, P], T]:
    """The synchronous twin of an async member method: the same signature and docs
    (taken from the method, so the twins cannot drift), run on the member's loop."""
    name = method.__name__

    def call(self: SyncGroupMember, /, *args: P.args, **kwargs: P.kwargs) -> T:
        coro: Coroutine[Any, Any, T] = getattr(self._member, name)(*args, **kwargs)
        return self._call(coro)

    functools.update_wrapper(call, method)  # name, docs and, for inspect, the signature
    return call


class _InWorkerThread:
    """Runs a plain listener's callbacks in a worker thread, off the member's loop."""

    def __init__(self, listener: object) -> None:
        self._listener = listener if listener is not None else RebalanceListener()

    async def _run(self, method: str, partitions: frozenset[TopicPartition]) -> None:
        callback = getattr(self._listener, method, None)
        if callback is not None:
            await asyncio.to_thread(callback, partitions)

    async def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
        await self._run("on_partitions_revoked", partitions)

    async def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        await self._run("on_partitions_assigned", partitions)

    async def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> None:
        await self._run("on_partitions_lost", partitions)

    # Connect workers' listener methods.
    async def on_revoked(self, resources: frozenset[Any]) -> None:
        await self._run("on_revoked", resources)

    async def on_assigned(self, resources: frozenset[Any]) -> None:
        await self._run("on_assigned", resources)

    async def on_lost(self, resources: frozenset[Any]) -> None:
        await self._run("on_lost", resources)


class _SharedLoop:
    """One event loop in one background thread for every synchronous member of the
    process, so that they share one member stream per coordinator (and one thread).
    Started by the first member, stopped when the last one closes."""

    _lock = threading.Lock()
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None
    _users = 0

    @classmethod
    def acquire(cls) -> asyncio.AbstractEventLoop:
        with cls._lock:
            if cls._loop is None:
                loop = asyncio.new_event_loop()
                # Listener callbacks of every member run in these threads (created as
                # needed): more than asyncio's default of a few, so that members whose
                # callbacks take long do not queue the others'.
                loop.set_default_executor(
                    concurrent.futures.ThreadPoolExecutor(
                        max_workers=64, thread_name_prefix="regroup-listener"
                    )
                )
                thread = threading.Thread(target=loop.run_forever, name="regroup-members", daemon=True)
                thread.start()
                cls._loop, cls._thread = loop, thread
            cls._users += 1
            return cls._loop

    @classmethod
    def release(cls) -> None:
        with cls._lock:
            cls._users -= 1
            if cls._users > 0 or cls._loop is None or cls._thread is None:
                return
            loop, thread = cls._loop, cls._thread
            cls._loop = cls._thread = None
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(loop.shutdown_default_executor(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()


class OnSharedLoop:
    """What every synchronous twin shares: its async object lives on the process's
    shared loop (made there, since its channel must be created on the loop that uses
    it), calls go to that loop from any thread, and closing gives the loop back once."""

    _loop: asyncio.AbstractEventLoop
    _closed: bool

    def _start_on_loop(self, make: Callable[[], Coroutine[Any, Any, T]]) -> T:
        self._loop = _SharedLoop.acquire()
        self._closed = False
        try:
            return self._call(make())
        except BaseException:
            _SharedLoop.release()
            raise

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def _finish(self, stop: Callable[[], Coroutine[Any, Any, object]]) -> None:
        """Runs `stop` (close or abort) once, then gives the shared loop back."""
        if self._closed:
            return
        self._closed = True
        try:
            self._call(stop())
        finally:
            _SharedLoop.release()


class SyncGroupMember(OnSharedLoop):
    """`with SyncGroupMember(target, listener=...) as member: member.join(...)`.

    Every method may be called from any thread; `assignment()` returns an
    immutable snapshot. Listener methods are plain functions run in worker
    threads, one at a time, in protocol order. `channel_factory` (called on the
    member's own loop) opens the asyncio channels, as for GroupMember, or `tls` (a
    `TlsConfig`) makes them TLS channels; `token` is sent with every call."""

    _member_class: type[GroupMember] = GroupMember

    def __init__(
        self,
        target: str,
        *,
        listener: PartitionListener | None = None,
        member_id: str | None = None,
        options: MemberOptions | None = None,
        interceptors: Sequence[grpc.aio.ClientInterceptor] | None = None,
        channel_factory: Callable[[str], grpc.aio.Channel] | None = None,
        tls: TlsConfig | None = None,
        token: str | None = None,
    ) -> None:
        self._open(target, listener, member_id, options, interceptors, channel_factory, tls, token)

    def _open(
        self,
        target: str,
        listener: object,
        member_id: str | None = None,
        options: MemberOptions | None = None,
        interceptors: Sequence[grpc.aio.ClientInterceptor] | None = None,
        channel_factory: Callable[[str], grpc.aio.Channel] | None = None,
        tls: TlsConfig | None = None,
        token: str | None = None,
    ) -> None:
        """Starts the member on the shared loop, with `listener`'s methods run in threads."""
        check_factory(tls, channel_factory)  # before a thread is started for nothing

        async def make() -> GroupMember:
            # The channel must be created on the loop that will use it.
            member = self._member_class(
                target,
                member_id=member_id,
                options=options,
                interceptors=interceptors,
                channel_factory=channel_factory,
                tls=tls,
                token=token,
            )
            # Set here, as ConnectWorker does: its callbacks have a Connect worker's names.
            member._listener = _InWorkerThread(listener)
            return member

        self._member = self._start_on_loop(make)

    @property
    def member_id(self) -> str:
        return self._member.member_id

    @property
    def member_epoch(self) -> int:
        return self._member.member_epoch

    @property
    def failure(self) -> RegroupError | None:
        return self._member.failure

    def assignment(self) -> Assignment:
        return self._member.assignment()

    join = _twin(GroupMember.join)
    commit = _twin(GroupMember.commit)
    committed = _twin(GroupMember.committed)

    def subscribe(self, *, topics: Sequence[str] | None = None, regex: str | None = None) -> None:
        self._loop.call_soon_threadsafe(lambda: self._member.subscribe(topics=topics, regex=regex))

    def wait_for_assignment(
        self, predicate: Callable[[Assignment], bool] | None = None, timeout: float | None = None
    ) -> Assignment:
        """GroupMember.wait_for_assignment: TimedOut (also a TimeoutError) after `timeout` seconds."""
        return self._call(self._member.wait_for_assignment(predicate, timeout=timeout))

    def close(self, *, permanent: bool | None = None) -> None:
        self._finish(lambda: self._member.close(permanent=permanent))

    def __enter__(self) -> SyncGroupMember:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SyncConnectWorker(SyncGroupMember):
    """The synchronous twin of ConnectWorker; listener methods (on_assigned,
    on_revoked, on_lost) run in worker threads."""

    _member_class = ConnectWorker

    def __init__(self, target: str, *, listener: ConnectListener | None = None, **kwargs: Any) -> None:
        """SyncGroupMember's options; `listener`'s methods are plain functions."""
        self._open(target, listener if listener is not None else WorkerListener(), **kwargs)

    join = _twin(ConnectWorker.join)  # type: ignore[arg-type]
