"""A shared ownership registry: every listener callback of every member is
recorded with a timestamp, and any instant at which a partition would have two
owners is a violation."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from regroup.client import RebalanceListener, TopicPartition


@dataclass
class Event:
    at: float
    member: str
    kind: str  # assigned, revoked, lost, crashed
    partitions: frozenset[Any]


@dataclass
class OwnershipRegistry:
    owners: dict[Any, str] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def listener(self, member: str) -> RebalanceListener:
        return _Recorder(self, member)

    def record(self, member: str, kind: str, partitions: frozenset[Any]) -> None:
        with self._lock:
            self.events.append(Event(time.monotonic(), member, kind, partitions))
            for tp in partitions:
                holder = self.owners.get(tp)
                if kind == "assigned":
                    if holder is not None and holder != member:
                        self.violations.append(f"{tp} given to {member} while {holder} holds it")
                    self.owners[tp] = member
                elif holder == member:
                    del self.owners[tp]
                elif kind != "crashed":
                    self.violations.append(f"{member} gave up {tp} it did not hold ({kind}, holder {holder})")

    def crashed(self, member: str) -> None:
        """The member's process died: it stopped working on everything it held."""
        with self._lock:
            held = frozenset(tp for tp, m in self.owners.items() if m == member)
        self.record(member, "crashed", held)

    def held_by(self, member: str) -> frozenset[Any]:
        with self._lock:
            return frozenset(tp for tp, m in self.owners.items() if m == member)

    def count(self, member: str, kind: str) -> int:
        with self._lock:
            return sum(1 for e in self.events if e.member == member and e.kind == kind)

    def assert_safe(self) -> None:
        assert not self.violations, "\n".join(self.violations)


class _Recorder(RebalanceListener):
    def __init__(self, registry: OwnershipRegistry, member: str) -> None:
        self.registry = registry
        self.member = member

    def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        self.registry.record(self.member, "assigned", partitions)

    def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
        self.registry.record(self.member, "revoked", partitions)

    def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> None:
        self.registry.record(self.member, "lost", partitions)

    # The same, for Connect workers (connectors and tasks).
    def on_assigned(self, resources: frozenset[Any]) -> None:
        self.registry.record(self.member, "assigned", resources)

    def on_revoked(self, resources: frozenset[Any]) -> None:
        self.registry.record(self.member, "revoked", resources)

    def on_lost(self, resources: frozenset[Any]) -> None:
        self.registry.record(self.member, "lost", resources)
