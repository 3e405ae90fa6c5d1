"""Computes big groups' target assignments in a worker process.

A big group's assignor is pure-Python work of tens of milliseconds. In a
thread it would still hold the GIL and stall the event loop (every other
group's heartbeats) in slices of the switch interval; in a process it costs
the event loop only what crosses the pipe.

What crosses is kept small: the worker keeps a copy of each group's current
targets, and a request carries only the targets that changed since the last
one (by identity: replay swaps the object of every target it changes), plus
the members and their subscriptions (shared frozensets, pickled once). A
computation answers with the engine's records, which name only the members
whose target moved. If the worker's copy is not the one a request builds on
(a restart, a failed call), it says so and gets the whole group again.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import multiprocessing
import os
from collections.abc import Collection
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import NamedTuple

from regroup.reconciler import GroupConfig, Record, Topic
from regroup.reconciler.assignors import GroupSpec, MemberSpec, SubscriptionType
from regroup.reconciler.errors import CoordinatorNotAvailable
from regroup.reconciler.model import Assignment
from regroup.reconciler.target_assignment import PendingAssignment

#: The worker's niceness: computing a target is batch work, and on a busy machine it
#: should wait for the heartbeats (of this process and its database), not delay them.
WORKER_NICENESS = 10

#: A member as sent: member id, instance id, rack id, subscribed topic ids.
_WireMember = tuple[str, str | None, str | None, frozenset[str]]


class _Request(NamedTuple):
    group_id: str
    #: The token of the copy `changed` applies to; 0 sends the whole group.
    base: int
    #: The token of the copy this request leaves in the worker.
    token: int
    group_epoch: int
    now_ms: int
    assignor: str
    members: tuple[_WireMember, ...]
    #: Current targets that differ from the copy (all of them when `base` is 0).
    changed: dict[str, Assignment]
    topics: dict[str, Topic]
    subscription_type: SubscriptionType | None
    #: Groups whose copies the worker may drop.
    forget: tuple[str, ...]


# -- the worker process ------------------------------------------------------------

_config: GroupConfig | None = None
#: group id -> (token, current target per member id)
_copies: dict[str, tuple[int, dict[str, Assignment]]] = {}


def _init_worker(config: GroupConfig) -> None:
    global _config
    _config = config
    with contextlib.suppress(OSError, AttributeError):  # AttributeError: no os.nice (Windows)
        os.nice(WORKER_NICENESS)


def _compute(request: _Request) -> list[Record] | None:
    """The records of the group's new target; None when the copy it builds on is not here."""
    assert _config is not None
    for group_id in request.forget:
        _copies.pop(group_id, None)
    previous: dict[str, Assignment] = {}
    if request.base:
        held = _copies.get(request.group_id)
        if held is None or held[0] != request.base:
            return None
        previous = held[1]
    changed = request.changed
    currents: dict[str, Assignment] = {}
    specs: dict[str, MemberSpec] = {}
    for member_id, instance_id, rack_id, topic_ids in request.members:
        current = changed.get(member_id)
        if current is None:
            current = previous.get(member_id)
            if current is None:
                _copies.pop(request.group_id, None)
                return None
        currents[member_id] = current
        specs[member_id] = MemberSpec(member_id, instance_id, rack_id, topic_ids, current)
    _copies[request.group_id] = (request.token, currents)
    pending = PendingAssignment(
        request.group_epoch,
        request.now_ms,
        request.assignor,
        GroupSpec(specs, request.topics, request.subscription_type),
    )
    return pending.compute(_config)


def _ping() -> None:
    """Nothing: submitted once to start the worker ahead of its first computation."""


# -- the coordinator's side ------------------------------------------------------------


class Assigner:
    """Runs `PendingAssignment`s in one worker process, started when first needed."""

    def __init__(self, config: GroupConfig) -> None:
        self._config = config
        self._pool: ProcessPoolExecutor | None = None
        #: group id -> (token, the current targets the worker's copy holds)
        self._sent: dict[str, tuple[int, dict[str, Assignment]]] = {}
        self._forget: set[str] = set()
        self._tokens = itertools.count(1)

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            # Not fork: this process runs gRPC and event-loop threads.
            context = multiprocessing.get_context("spawn")
            self._pool = ProcessPoolExecutor(
                1, mp_context=context, initializer=_init_worker, initargs=(self._config,)
            )
        return self._pool

    async def start(self) -> None:
        """Starts the worker now rather than on the first computation."""
        await asyncio.get_running_loop().run_in_executor(self._executor(), _ping)

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        self._sent.clear()
        if pool is not None:
            await asyncio.to_thread(pool.shutdown, wait=True, cancel_futures=True)

    def forget(self, group_ids: Collection[str]) -> None:
        """The groups are gone (or must be sent whole next time)."""
        for group_id in group_ids:
            if self._sent.pop(group_id, None) is not None:
                self._forget.add(group_id)

    async def compute(self, group_id: str, pending: PendingAssignment) -> list[Record]:
        loop = asyncio.get_running_loop()
        broken = 0
        while True:
            request, copy = self._request(group_id, pending)
            self._forget.difference_update(request.forget)
            pool = self._executor()
            try:
                records = await loop.run_in_executor(pool, _compute, request)
            except BrokenProcessPool as e:
                # The worker died (killed, out of memory): start another, which has no copies.
                if self._pool is pool:
                    self._pool = None
                    self._sent.clear()
                    self._forget.clear()
                broken += 1
                if broken > 1:
                    raise CoordinatorNotAvailable(f"The assignment worker failed: {e}") from e
                continue
            except BaseException:
                self._sent.pop(group_id, None)
                raise
            if records is None:
                self._sent.pop(group_id, None)
                continue
            self._sent[group_id] = (request.token, copy)
            return records

    def _request(self, group_id: str, pending: PendingAssignment) -> tuple[_Request, dict[str, Assignment]]:
        sent = self._sent.get(group_id)
        previous = sent[1] if sent is not None else {}
        members: list[_WireMember] = []
        copy: dict[str, Assignment] = {}
        changed: dict[str, Assignment] = {}
        for member_id, spec in pending.spec.members.items():
            members.append((member_id, spec.instance_id, spec.rack_id, spec.subscribed_topic_ids))
            current = spec.current
            copy[member_id] = current
            if previous.get(member_id) is not current:
                changed[member_id] = current
        request = _Request(
            group_id=group_id,
            base=sent[0] if sent is not None else 0,
            token=next(self._tokens),
            group_epoch=pending.group_epoch,
            now_ms=pending.now_ms,
            assignor=pending.assignor,
            members=tuple(members),
            changed=changed,
            topics=dict(pending.spec.topics),
            subscription_type=pending.spec.subscription_type,
            forget=tuple(self._forget),
        )
        return request, copy
