"""Processing loops over the partitions a member owns, resuming from committed offsets.

`PartitionProcessor` is the member's rebalance listener and its work loop at
once, so that a revocation waits for the batch in flight: a partition is given
up only between batches, after its progress was committed, and the next owner
resumes from there.

- at least once (process, then commit): a crash between the two makes the next
  owner process the batch again; make the sink idempotent (key the rows) and
  guard it with the fencing token (see docs/fencing.md).
- at most once (commit the claim, then process; the flow of Marshal's
  ClaimingMessages): a crash between the two loses the batch, never repeats it.

Both refuse to process a batch whose commit the coordinator refused
(PARTITION_NOT_OWNED or a stale epoch): the partition has moved on.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from regroup.client.errors import RegroupError
from regroup.client.sync import SyncGroupMember
from regroup.client.types import PartitionToken, RebalanceListener, TopicPartition

log = logging.getLogger("regroup.client")

Mode = Literal["at_least_once", "at_most_once"]


class PartitionSource(Protocol):
    """Where a partition's records come from, by offset (0-based, dense)."""

    def read(self, partition: TopicPartition, offset: int, max_records: int) -> Sequence[Any]:
        """Up to `max_records` records from `offset`; empty when there are none (yet)."""
        ...


@dataclass(frozen=True, slots=True)
class Batch:
    partition: TopicPartition
    #: The offset of the first record.
    offset: int
    records: Sequence[Any]
    #: The owner's fencing token: pass it to the sink with the batch.
    token: PartitionToken

    @property
    def next_offset(self) -> int:
        return self.offset + len(self.records)


@dataclass
class ProcessStats:
    batches: int = 0
    records: int = 0
    #: Commits the coordinator refused (the partition had moved on).
    refused_commits: int = 0
    partitions_seen: set[TopicPartition] = field(default_factory=set)


class PartitionProcessor(RebalanceListener):
    """`processor = PartitionProcessor(source, handle)`; `member = SyncGroupMember(target,
    listener=processor)`; `member.join(...)`; `processor.run(member, until=...)`."""

    def __init__(
        self,
        source: PartitionSource,
        handle: Callable[[Batch], None],
        *,
        mode: Mode = "at_least_once",
        batch_size: int = 500,
        idle_sleep_s: float = 0.05,
        listener: Any = None,
    ) -> None:
        if mode not in ("at_least_once", "at_most_once"):
            raise ValueError(f"mode must be at_least_once or at_most_once, not {mode!r}")
        self._source = source
        self._handle = handle
        self._mode = mode
        self._batch_size = batch_size
        self._idle_sleep_s = idle_sleep_s
        self._inner = listener
        #: Held while a batch is processed and committed; revocations wait for it.
        self._lock = threading.Lock()
        #: Next offset per owned partition (learned from the committed offsets).
        self._positions: dict[TopicPartition, int] = {}
        self.stats = ProcessStats()

    # -- the listener: partitions leave only between batches -------------------

    def on_partitions_revoked(self, partitions: frozenset[TopicPartition]) -> None:
        with self._lock:
            for tp in partitions:
                self._positions.pop(tp, None)
        self._chain("on_partitions_revoked", partitions)

    def on_partitions_lost(self, partitions: frozenset[TopicPartition]) -> None:
        with self._lock:
            for tp in partitions:
                self._positions.pop(tp, None)
        self._chain("on_partitions_lost", partitions)

    def on_partitions_assigned(self, partitions: frozenset[TopicPartition]) -> None:
        self._chain("on_partitions_assigned", partitions)

    def _chain(self, method: str, partitions: frozenset[TopicPartition]) -> None:
        callback = getattr(self._inner, method, None)
        if callback is not None:
            callback(partitions)

    # -- the loop ----------------------------------------------------------------

    def run(self, member: SyncGroupMember, until: Callable[[], bool] | None = None) -> ProcessStats:
        """Processes batches of the owned partitions until `until()` is true (checked
        when a round found nothing to do) or the member failed."""
        while member.failure is None:
            worked = False
            for tp in sorted(member.assignment().partitions):
                worked |= self._one_batch(member, tp)
            if not worked:
                if until is not None and until():
                    break
                time.sleep(self._idle_sleep_s)
        return self.stats

    def _one_batch(self, member: SyncGroupMember, tp: TopicPartition) -> bool:
        with self._lock:
            assignment = member.assignment()
            if tp not in assignment.partitions:
                return False  # revoked since the round started
            position = self._positions.get(tp)
            if position is None:
                try:
                    position = member.committed([tp]).get(tp, 0)
                except RegroupError as e:
                    log.info("cannot read the committed offset of %s yet: %s", tp, e)
                    return False
                self._positions[tp] = position
            records = self._source.read(tp, position, self._batch_size)
            if not records:
                return False
            batch = Batch(tp, position, records, assignment.token(tp))
            self.stats.partitions_seen.add(tp)
            if self._mode == "at_most_once":
                # Claim the batch first: if the claim is refused, someone else owns it.
                if not self._commit(member, tp, batch.next_offset):
                    return False
                self._handle(batch)
            else:
                self._handle(batch)
                if not self._commit(member, tp, batch.next_offset):
                    return False
            self._positions[tp] = batch.next_offset
            self.stats.batches += 1
            self.stats.records += len(records)
            return True

    def _commit(self, member: SyncGroupMember, tp: TopicPartition, offset: int) -> bool:
        try:
            member.commit({tp: offset})
        except RegroupError as e:
            # Not ours any more (or our epoch moved on): forget the position; if the
            # partition is still ours, it is read again from the committed offset.
            log.info("commit of %s at %d refused: %s", tp, offset, e)
            self._positions.pop(tp, None)
            self.stats.refused_commits += 1
            return False
        return True
