"""Connect groups: workers share connectors and tasks instead of partitions.

A Connect group reuses the consumer machinery whole (epochs, reconciliation,
fencing, storage) through one mapping: each connector is a resource whose
unit 0 is the connector itself and unit t + 1 its task t, and every worker
subscribes to all the connectors of its group. The group's connectors come
from GroupAdmin.PutConnectors (Connect's config topic), stored as a record of
the group and replayed like every other change.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from .context import Context, Result
from .errors import GroupIdNotFound, InvalidRequest
from .membership import refresh_metadata
from .model import CONNECT_GROUP_TYPE, Assignment, Group, make_assignment
from .records import ConnectorsRecord, GroupMetadataRecord, Record
from .subscription import metadata_hash
from .topics import MAX_TOPIC_NAME_LENGTH, Topic, TopicsImage

#: Every worker subscribes to every connector of its group.
CONNECT_SUBSCRIPTION = ".*"
MAX_TASKS_PER_CONNECTOR = 10_000
MAX_CONNECTORS = 100_000


def validate_connectors(connectors: Sequence[tuple[str, int]]) -> dict[str, int]:
    """The connector set of a PutConnectors request, checked."""
    if len(connectors) > MAX_CONNECTORS:
        raise InvalidRequest(f"At most {MAX_CONNECTORS} connectors per group, got {len(connectors)}.")
    out: dict[str, int] = {}
    for name, tasks in connectors:
        if not name:
            raise InvalidRequest("Connector names can't be empty.")
        if len(name) > MAX_TOPIC_NAME_LENGTH:
            raise InvalidRequest(f"Connector name is longer than {MAX_TOPIC_NAME_LENGTH} characters.")
        if any(ord(c) < 32 or ord(c) == 127 for c in name):
            raise InvalidRequest(f"Connector name {name!r} contains a control character.")
        if name in out:
            raise InvalidRequest(f"Connector {name} is listed twice.")
        if not 0 <= tasks <= MAX_TASKS_PER_CONNECTOR:
            raise InvalidRequest(
                f"Connector {name}: tasks must be 0 to {MAX_TASKS_PER_CONNECTOR}, got {tasks}."
            )
        out[name] = tasks
    return out


def connectors_image(connectors: Mapping[str, int], version: int = 0) -> TopicsImage:
    """The group's connectors as the resources the engine assigns."""
    return TopicsImage((Topic(name, name, tasks + 1) for name, tasks in connectors.items()), version)


def to_connect(assignment: Assignment) -> tuple[list[str], list[tuple[str, int]]]:
    """Connectors and (connector, task) ids of an assignment."""
    connectors: list[str] = []
    tasks: list[tuple[str, int]] = []
    for name in sorted(assignment):
        units = assignment[name]
        if 0 in units:
            connectors.append(name)
        tasks.extend((name, unit - 1) for unit in sorted(units) if unit > 0)
    return connectors, tasks


def from_connect(connectors: Iterable[str], tasks: Iterable[tuple[str, int]]) -> Assignment:
    """An assignment from connectors and (connector, task) ids; a negative task id
    stays out of range (never a subset of any assignment)."""
    pairs: list[tuple[str, Iterable[int]]] = [(c, (0,)) for c in connectors]
    pairs.extend((c, (t + 1 if t >= 0 else -1,)) for c, t in tasks)
    return make_assignment(pairs)


def put_connectors(group: Group | None, connectors: Sequence[tuple[str, int]], ctx: Context) -> Result[int]:
    """Sets a Connect group's connectors; bumps its epoch if its workers' resources changed.

    A group that does not exist yet is created, Empty at epoch 0 (as Connect's case
    study starts: connectors are configured before workers join). Returns the group
    epoch afterwards."""
    wanted = validate_connectors(connectors)
    if group is not None and group.group_type != CONNECT_GROUP_TYPE:
        raise GroupIdNotFound(f"Group {group.group_id} is not a connect group.")
    records: list[Record] = []
    if group is None:
        records.append(GroupMetadataRecord(0, metadata_hash(()), CONNECT_GROUP_TYPE))
    if group is None or wanted != group.connectors:
        records.append(ConnectorsRecord(tuple(sorted(wanted.items()))))
    if group is None:
        return Result(0, tuple(records))
    refreshed = refresh_metadata(group, replace(ctx, image=connectors_image(wanted)))
    epoch = group.group_epoch + (1 if refreshed.response else 0)
    return Result(epoch, (*records, *refreshed.records), refreshed.timers)
