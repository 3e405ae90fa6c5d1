"""The group state machine again, with every target computed as a big group's is: from a
read of the group at one tick, installed at the next (`install_computed_target`), while
members join, leave, crash, resubscribe and lose responses in between. The same
invariants hold after every step (one owner per partition, revocation before
assignment, the stored records rebuild the group), and the group still converges."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import event, settings

from regroup.reconciler import GroupConfig
from regroup.reconciler.records import Record
from regroup.reconciler.target_assignment import install_computed_target, pending_assignment
from tests.support.depth import examples
from tests.support.group_machine import GROUP, Client, GroupMachine, _Harness


@dataclass
class _OffloadedHarness(_Harness):
    """Heartbeats never compute a target (the group is over the inline limit); each tick
    installs the computation started at the previous one, then starts the next one."""

    inflight: tuple[str, list[Record]] | None = None

    def advance(self, ms: int) -> list[tuple[str, str]]:
        self.assignments.clear()  # the timer's computation is the one below, offloaded
        fenced = super().advance(ms)
        if self.inflight is not None:
            (assignor, records), self.inflight = self.inflight, None
            group = self.groups.get(GROUP)
            result = install_computed_target(group, records, self.ctx())
            if group is not None and len(result.records) < len(records):
                event("installed without the targets of members that left meanwhile")
            if group is not None and result.response and group.group_epoch > group.assignment_epoch + 1:
                event("installed while the group had moved on")
            self.apply(GROUP, result)
            if result.response:
                self.timer_computations.append((GROUP, assignor))
        group = self.groups.get(GROUP)
        pending = None if group is None else pending_assignment(group, self.ctx())
        if pending is not None:
            self.inflight = (pending.assignor, pending.compute(self.config))
        return fenced


class OffloadedGroupMachine(GroupMachine):
    def __init__(self) -> None:
        super().__init__()
        self.h = _OffloadedHarness(config=GroupConfig(inline_assignment_max_partitions=0))

    def _exchange(self, client: Client, lose: bool = False) -> None:
        # A member that joins a group without a target yet waits at epoch 0 for the next tick.
        client.unassigned_join_ok = True
        super()._exchange(client, lose)


# The plain machine's settings, with fewer examples (about 10 s on a 2-core machine).
OffloadedGroupMachine.TestCase.settings = settings(GroupMachine.TestCase.settings, max_examples=examples(200))
TestOffloadedGroupMachine = OffloadedGroupMachine.TestCase
