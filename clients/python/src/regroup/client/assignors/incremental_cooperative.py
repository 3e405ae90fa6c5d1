"""Kafka Connect's incremental cooperative assignment, computed by a worker.

Sticky and balanced: connectors and tasks are balanced separately, each so
that workers' counts differ by at most one while as few as possible move
(quotas of `count // workers`, the remainder going to the workers that
already hold the most; workers above their quota give up their highest
resources, which with the unassigned ones fill the workers below theirs).

Departed workers get time to come back (`scheduled_rebalance_max_delay_ms`,
as Connect's scheduled.rebalance.max.delay.ms). The assignor remembers, in
`AssignmentPlan.state`, what every worker holds, keyed by the worker's
identity (URL, else instance id, else member id: what survives a restart).
When a worker of the previous state is missing from the snapshot, its
still-existing connectors and tasks are held back: left in
`plan.unassigned`, remembered with a deadline of `now_ms + delay` (an
already-held entry keeps its deadline), and `plan.rebalance_at_ms` asks for a
computation at the earliest deadline. A worker that comes back under the same
identity gets exactly its held work back (then balancing applies as for
anyone). Once `now_ms >= deadline`, held work goes to the least-loaded
workers. New connectors and tasks are assigned at once; removed ones are
dropped everywhere. With no workers at all, everything is unassigned and
nothing is held.

State, JSON (UTF-8, sorted keys), version 1:

    {"version": 1,
     "workers": {identity: {"connectors": [name, ...], "tasks": [[name, task], ...]}},
     "held": {identity: {"deadline_ms": int, "connectors": [...], "tasks": [...]}}}

A state that cannot be read (or of another version) counts as empty.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from regroup.client.assignors.base import CONNECT, AssignmentPlan, GroupSnapshot, Resource, SimpleAssignor
from regroup.client.types import ConnectorTaskId

STATE_VERSION = 1


@dataclass(slots=True)
class _Held:
    deadline_ms: int
    resources: set[Resource]


def _sort_key(r: Resource) -> tuple[int, str, int]:
    if isinstance(r, ConnectorTaskId):
        return (1, r.connector, r.task)
    return (0, str(r), 0)


def _encode_resources(resources: Iterable[Resource]) -> dict[str, Any]:
    connectors: list[str] = []
    tasks: list[list[str | int]] = []
    for r in sorted(resources, key=_sort_key):
        if isinstance(r, ConnectorTaskId):
            tasks.append([r.connector, r.task])
        else:
            connectors.append(str(r))
    return {"connectors": connectors, "tasks": tasks}


def _decode_resources(entry: Any) -> set[Resource]:
    out: set[Resource] = set()
    for c in entry.get("connectors", []):
        if isinstance(c, str):
            out.add(c)
    for t in entry.get("tasks", []):
        if (
            isinstance(t, list)
            and len(t) == 2
            and isinstance(t[0], str)
            and isinstance(t[1], int)
            and not isinstance(t[1], bool)
        ):
            out.add(ConnectorTaskId(t[0], t[1]))
    return out


def encode_state(workers: dict[str, set[Resource]], held: dict[str, _Held]) -> bytes:
    doc = {
        "version": STATE_VERSION,
        "workers": {ident: _encode_resources(rs) for ident, rs in workers.items()},
        "held": {
            ident: {"deadline_ms": h.deadline_ms, **_encode_resources(h.resources)}
            for ident, h in held.items()
        },
    }
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def decode_state(state: bytes) -> tuple[dict[str, set[Resource]], dict[str, _Held]]:
    """(identity -> resources, identity -> held work); empty when unreadable."""
    if not state:
        return {}, {}
    try:
        doc = json.loads(state)
        if not isinstance(doc, dict) or doc.get("version") != STATE_VERSION:
            return {}, {}
        workers = {str(ident): _decode_resources(e) for ident, e in dict(doc.get("workers", {})).items()}
        held: dict[str, _Held] = {}
        for ident, e in dict(doc.get("held", {})).items():
            deadline = e.get("deadline_ms")
            if isinstance(deadline, int) and not isinstance(deadline, bool):
                held[str(ident)] = _Held(deadline, _decode_resources(e))
        return workers, held
    except (ValueError, TypeError, AttributeError):
        return {}, {}


class IncrementalCooperativeAssignor(SimpleAssignor):
    """Sticky, balanced Connect assignment that holds a departed worker's work for a while."""

    name: str = "incremental_cooperative"
    serves = CONNECT

    def __init__(self, scheduled_rebalance_max_delay_ms: int = 300_000) -> None:
        if scheduled_rebalance_max_delay_ms < 0:
            raise ValueError("scheduled_rebalance_max_delay_ms must be >= 0")
        self.scheduled_rebalance_max_delay_ms = scheduled_rebalance_max_delay_ms

    def assign(self, group: GroupSnapshot) -> AssignmentPlan:
        refused = self.refuse(group)
        if refused is not None:
            return refused
        valid = group.resources()
        members = sorted(group.members, key=lambda m: m.member_id)
        if not members:
            return AssignmentPlan(assignments={}, unassigned=valid, state=encode_state({}, {}))
        prev_workers, prev_held = decode_state(group.state)
        now = group.now_ms

        # The first member (by id) of each identity inherits what the state remembers for it.
        primary: dict[str, str] = {}
        for m in members:
            primary.setdefault(m.identity, m.member_id)
        current: dict[str, set[Resource]] = {m.member_id: set() for m in members}
        owned: set[Resource] = set()

        def claim(mid: str, resources: Iterable[Resource]) -> None:
            for r in sorted(resources, key=_sort_key):
                if r in valid and r not in owned:
                    owned.add(r)
                    current[mid].add(r)

        # 1. The current target; 2. what the state remembers for the identity
        # (a worker that came back under a new member id); 3. its held work.
        for m in members:
            claim(m.member_id, m.assignment)
        for ident, mid in primary.items():
            claim(mid, prev_workers.get(ident, ()))
        for ident, mid in primary.items():
            h = prev_held.get(ident)
            if h is not None:
                claim(mid, h.resources)

        # Work of absent identities stays held; newly departed workers' work gets held.
        held: dict[str, _Held] = {}
        for ident in sorted(prev_held):
            if ident in primary:
                continue
            rs = {r for r in prev_held[ident].resources if r in valid and r not in owned}
            if rs:
                owned.update(rs)
                held[ident] = _Held(prev_held[ident].deadline_ms, rs)
        for ident in sorted(prev_workers):
            if ident in primary:
                continue
            rs = {r for r in prev_workers[ident] if r in valid and r not in owned}
            if not rs:
                continue
            owned.update(rs)
            if ident in held:
                held[ident].resources |= rs
            else:
                held[ident] = _Held(now + self.scheduled_rebalance_max_delay_ms, rs)

        # Expired held work and new resources are assigned now.
        pool: set[Resource] = set(valid - owned)
        for ident in sorted(held):
            if now >= held[ident].deadline_ms:
                pool |= held.pop(ident).resources

        mids = [m.member_id for m in members]
        connectors = _balance(
            mids,
            {mid: [r for r in rs if not isinstance(r, ConnectorTaskId)] for mid, rs in current.items()},
            [r for r in pool if not isinstance(r, ConnectorTaskId)],
            tiebreak=lambda mid: 0,
        )
        tasks = _balance(
            mids,
            {mid: [r for r in rs if isinstance(r, ConnectorTaskId)] for mid, rs in current.items()},
            [r for r in pool if isinstance(r, ConnectorTaskId)],
            tiebreak=lambda mid: len(connectors[mid]),
        )
        assignments = {mid: frozenset(connectors[mid] + tasks[mid]) for mid in mids}

        workers: dict[str, set[Resource]] = {}
        for m in members:
            workers.setdefault(m.identity, set()).update(assignments[m.member_id])
        unassigned: set[Resource] = set()
        for h in held.values():
            unassigned |= h.resources
        return AssignmentPlan(
            assignments=assignments,
            unassigned=frozenset(unassigned),
            state=encode_state(workers, held),
            rebalance_at_ms=min((h.deadline_ms for h in held.values()), default=None),
        )


def _balance(
    mids: list[str],
    current: dict[str, list[Resource]],
    pool: list[Resource],
    tiebreak: Callable[[str], int],
) -> dict[str, list[Resource]]:
    """Counts differing by at most one, moving as few resources as possible."""
    total = len(pool) + sum(len(v) for v in current.values())
    base, extra = divmod(total, len(mids))
    by_load = sorted(mids, key=lambda mid: (-len(current[mid]), tiebreak(mid), mid))
    quota = {mid: base + (1 if i < extra else 0) for i, mid in enumerate(by_load)}
    free = list(pool)
    out: dict[str, list[Resource]] = {}
    for mid in mids:
        mine = sorted(current[mid], key=_sort_key)
        surplus = len(mine) - quota[mid]
        if surplus > 0:
            free.extend(mine[-surplus:])
            del mine[-surplus:]
        out[mid] = mine
    free.sort(key=_sort_key)
    i = 0
    for mid in mids:
        deficit = quota[mid] - len(out[mid])
        if deficit > 0:
            out[mid].extend(free[i : i + deficit])
            i += deficit
    return out
