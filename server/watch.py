"""GroupAdmin.ListGroupEvents and WatchGroup: reading a group's history, and following it.

ListGroupEvents reads the store (any replica answers, also for a deleted group).
WatchGroup is served by the replica that owns the group, whose write path
publishes every write's events (server/history.py HistoryHub): the stream
registers its watch first, then reads the history it was asked for, then
describes the group, so that no event stored meanwhile is missed; an event both
read and published is sent once (by sequence).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from regroup.reconciler import ApiError
from regroup.reconciler.errors import CoordinatorNotAvailable, InvalidRequest, NotCoordinator
from regroup.reconciler.history import EventType, GroupEvent
from regroup.reconciler.validation import validate_group_id
from regroup.v1 import admin_pb2

from . import mapping
from .history import DEFAULT_LIMIT, MAX_LIMIT, MAX_WATCH_HISTORY, EventQuery, WatchClosed
from .paging import byte_budget
from .runtime import Coordinator

#: The group's description now (or the reason it has none), as DescribeGroups gives it.
Describe = Callable[[str], admin_pb2.DescribedGroup]


def event_query(request: admin_pb2.ListGroupEventsRequest) -> EventQuery:
    """The request's bounds, checked (INVALID_REQUEST naming the field)."""
    for name in ("after_sequence", "before_sequence", "since_ms", "until_ms", "limit"):
        if getattr(request, name) < 0:
            raise InvalidRequest(f"{name} must not be negative (got {getattr(request, name)}).")
    if request.limit > MAX_LIMIT:
        raise InvalidRequest(
            f"limit must be at most {MAX_LIMIT} (got {request.limit}); page with after_sequence."
        )
    known = {int(t) for t in EventType}
    unknown = sorted({int(t) for t in request.types} - known)
    if unknown:
        raise InvalidRequest(f"Unknown event types in types: {unknown}.")
    return EventQuery(
        after_sequence=request.after_sequence,
        before_sequence=request.before_sequence,
        since_ms=request.since_ms,
        until_ms=request.until_ms,
        limit=request.limit or DEFAULT_LIMIT,
        oldest_first=request.oldest_first,
        types=tuple(sorted({int(t) for t in request.types})),
    )


async def list_group_events(
    coordinator: Coordinator, request: admin_pb2.ListGroupEventsRequest, max_message_bytes: int
) -> admin_pb2.ListGroupEventsResponse:
    validate_group_id(request.group_id)
    events, more = await coordinator.list_group_events(request.group_id, event_query(request))
    out = admin_pb2.ListGroupEventsResponse()
    budget = byte_budget(max_message_bytes)
    for event in events:
        message = mapping.event_pb(event)
        budget -= message.ByteSize() + 8
        if budget < 0:  # the rest on the next page (after_sequence / before_sequence)
            more = True
            break
        out.events.append(message)
    out.more = more
    return out


async def watch_group(
    coordinator: Coordinator, request: admin_pb2.WatchGroupRequest, describe: Describe
) -> AsyncIterator[admin_pb2.WatchGroupResponse]:
    """The stream's messages: the description (and history), then the events as they are stored."""
    group_id = request.group_id
    try:
        validate_group_id(group_id)
        if not 0 <= request.history <= MAX_WATCH_HISTORY:
            raise InvalidRequest(f"history must be 0 to {MAX_WATCH_HISTORY} (got {request.history}).")
        coordinator.shards.fence(group_id, coordinator.clock.monotonic_ms())
    except ApiError as e:
        yield refused(group_id, e)
        return
    watch = coordinator.history.watch(group_id)
    try:
        history: list[GroupEvent] = []
        if request.history:
            try:
                history, _ = await coordinator.list_group_events(group_id, EventQuery(limit=request.history))
            except ApiError as e:
                yield refused(group_id, e)
                return
            history.reverse()
        last = history[-1].sequence if history else 0
        yield admin_pb2.WatchGroupResponse(
            description=describe(group_id), events=[mapping.event_pb(e) for e in history]
        )
        while True:
            new = [e for e in await watch.next() if e.sequence == 0 or e.sequence > last]
            if not new:
                continue
            last = max(last, new[-1].sequence)
            message = admin_pb2.WatchGroupResponse(events=[mapping.event_pb(e) for e in new])
            if request.descriptions:
                message.description.CopyFrom(describe(group_id))
            yield message
    except WatchClosed as closed:
        if closed.behind:
            raise
        error: ApiError = (
            NotCoordinator(str(closed)) if closed.moved else CoordinatorNotAvailable(str(closed))
        )
        if closed.moved:
            try:
                coordinator.shards.fence(group_id, coordinator.clock.monotonic_ms())
            except NotCoordinator as e:
                error = e  # with the new owner's address when known
            except ApiError:
                pass
        yield refused(group_id, error)
    finally:
        coordinator.history.unwatch(watch)


def refused(group_id: str, e: ApiError) -> admin_pb2.WatchGroupResponse:
    description = admin_pb2.DescribedGroup(
        group_id=group_id[:255],
        error_code=mapping.error_code_pb(e.code),
        error_message=e.message,
    )
    if isinstance(e, NotCoordinator) and e.coordinator_address:
        description.coordinator_address = e.coordinator_address
    return admin_pb2.WatchGroupResponse(description=description)
