"""The fewest moves that balance a redundant group whose members subscribe alike.

The redundant assignor (redundant.py) places `copies` copies of each partition on
distinct members, every member's count `floor` or `floor + 1`, and keeps as many
of the copies members hold as it can. Its greedy pass (keep, hand out, even out)
usually keeps the most there are to keep; when it provably does not, this finds
the most, exactly, as a min-cost flow:

    source -> partition (capacity: its copies)
           -> member (capacity 1: one copy each; cost 0 where the member holds
              one it may keep, 1 where it would be a new copy)
           -> sink (`floor` units worth -big each, one more worth 0)

`-big` outweighs any count of moves, so the cheapest flow of all the copies fills
every member to its floor (a balanced layout always exists, since copies <= members)
and, among those, hands out the fewest new copies, i.e. takes the fewest from their
holders. Successive shortest paths (Dijkstra on potentials) from a start that is
itself cheapest for its size: each member keeps up to `floor` of what it holds,
all at cost 0, for which zero potentials (the sink's -big) are valid.

Members and partitions are indices (members in id order, partitions in topic and
partition order), and the search visits them in index order, so the result is
deterministic. The edges partition -> member are implicit: every member not
holding the partition.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence


def fewest_moves(
    members: int, partitions: int, copies: int, keepable: Sequence[Sequence[int]]
) -> list[set[int]]:
    """The partitions of each member (by index) in a balanced layout of `copies`
    copies of each of `partitions` partitions over `members` members that keeps the
    most of `keepable` (each member's partitions it may keep: distinct, and each
    partition keepable by at most `copies` members)."""
    return _Flow(members, partitions, copies, keepable).solve()


class _Flow:
    def __init__(self, members: int, partitions: int, copies: int, keepable: Sequence[Sequence[int]]) -> None:
        self.members, self.partitions, self.copies = members, partitions, copies
        total = partitions * copies
        self.total = total
        self.floor, self.extra = divmod(total, members)
        self.big = total + 1
        self.keepers: list[set[int]] = [set() for _ in range(partitions)]
        self.holders: list[set[int]] = [set() for _ in range(partitions)]
        self.owns: list[set[int]] = [set() for _ in range(members)]
        for member, mine in enumerate(keepable):
            for partition in mine:
                self.keepers[partition].add(member)
            for partition in mine[: self.floor]:
                self.holders[partition].add(member)
                self.owns[member].add(partition)
        # Nodes: partitions 0..P-1, members P..P+M-1, the sink P+M; the source is implicit.
        self.sink = partitions + members
        self.potential = [0] * (self.sink + 1)
        self.potential[self.sink] = -self.big

    def solve(self) -> list[set[int]]:
        placed = sum(len(mine) for mine in self.owns)
        while placed < self.total:
            self._augment(self._shortest_path())
            placed += 1
            # Every other path of the same cost, without another search: once the
            # potentials are moved on, those are the paths of reduced cost 0.
            tight = _Tight(self)
            while placed < self.total:
                path = tight.path()
                if path is None:
                    break
                self._augment(path)
                placed += 1
        return self.owns

    def _sink_cost(self, member: int) -> int | None:
        load = len(self.owns[member])
        if load < self.floor:
            return -self.big
        if load == self.floor and self.extra:
            return 0
        return None

    def _shortest_path(self) -> list[int]:
        """The cheapest source -> sink path, as its nodes without the source; and the
        potentials moved on by the distances (capped at the sink's), so that every
        residual edge keeps a cost >= 0 once reduced."""
        partitions, sink, potential = self.partitions, self.sink, self.potential
        unreached = float("inf")
        dist: list[float] = [unreached] * (sink + 1)  # reduced
        back = [-1] * (sink + 1)  # -1: from the source
        heap: list[tuple[float, int, int]] = []
        for partition in range(partitions):
            if self.short(partition):
                dist[partition] = -potential[partition]
                heap.append((dist[partition], 2, partition))
        heapq.heapify(heap)
        done = [False] * (sink + 1)
        # The members not searched yet, by the cost of reaching them (not reduced): a
        # partition reaches every member without a copy at its own cost + 1, which
        # improves those above that all at once, rather than member by member.
        reach = [unreached] * self.members
        by_reach: dict[float, set[int]] = {unreached: set(range(self.members))}

        def unlist(member: int) -> None:
            members = by_reach[reach[member]]
            members.discard(member)
            if not members:
                del by_reach[reach[member]]

        def reach_member(member: int, cost: float, u: int) -> None:
            unlist(member)
            reach[member] = cost
            by_reach.setdefault(cost, set()).add(member)
            v = partitions + member
            dist[v], back[v] = cost - potential[v], u
            # At equal distance the sink comes first, then members, then partitions:
            # the search ends as soon as it can.
            heapq.heappush(heap, (dist[v], 1, v))

        def relax(u: int, v: int, cost: int) -> None:
            d = dist[u] + cost + potential[u] - potential[v]
            if d < dist[v]:
                dist[v], back[v] = d, u
                heapq.heappush(heap, (d, 2 if v < partitions else 0, v))

        while heap:
            d, _, u = heapq.heappop(heap)
            if done[u] or d > dist[u]:
                continue
            done[u] = True
            if u == sink:
                break
            if u < partitions:
                cost = d + potential[u]
                holders, keepers = self.holders[u], self.keepers[u]
                for member in sorted(keepers - holders):  # it takes back a copy it held: 0
                    if cost < reach[member] and not done[partitions + member]:
                        reach_member(member, cost, u)
                for level in [level for level in by_reach if level > cost + 1]:  # a new copy: 1
                    for member in sorted(by_reach[level] - holders):
                        reach_member(member, cost + 1, u)
            else:  # a member gives up a copy it holds, or takes one more
                member = u - partitions
                unlist(member)
                for partition in sorted(self.owns[member]):
                    relax(u, partition, 0 if member in self.keepers[partition] else -1)
                sink_cost = self._sink_cost(member)
                if sink_cost is not None:
                    relax(u, sink, sink_cost)
        found = dist[sink]
        assert found != unreached, "no balanced layout"  # copies <= members: there always is one
        for v, d in enumerate(dist):
            potential[v] += int(min(d, found))
        path = [sink]
        while back[path[-1]] != -1:
            path.append(back[path[-1]])
        path.reverse()
        return path

    def short(self, partition: int) -> bool:
        """Whether the partition has fewer holders than copies (an edge from the source)."""
        return len(self.holders[partition]) < self.copies

    def tight_to_sink(self, member: int) -> bool:
        """Whether the member's edge to the sink costs 0 once reduced."""
        cost = self._sink_cost(member)
        return (
            cost is not None and cost + self.potential[self.partitions + member] == self.potential[self.sink]
        )

    def _augment(self, path: list[int]) -> None:
        """Moves one copy along `path` (partition, member, partition, member, ..., sink):
        each member takes the partition before it and gives up the one after it."""
        partitions = self.partitions
        for i in range(0, len(path) - 1, 2):
            partition, member = path[i], path[i + 1] - partitions
            self.holders[partition].add(member)
            self.owns[member].add(partition)
            if i + 2 < len(path) - 1:
                given_up = path[i + 2]
                self.holders[given_up].discard(member)
                self.owns[member].discard(given_up)


class _Tight:
    """The source -> sink paths whose edges all cost 0 once reduced (so cheapest ones),
    for the potentials of one `_shortest_path`."""

    def __init__(self, flow: _Flow) -> None:
        self.flow = flow
        potential = flow.potential
        members_from = flow.partitions
        #: Partitions with a copy to hand out and a tight edge from the source.
        self.starts = deque(p for p in range(flow.partitions) if potential[p] == 0 and flow.short(p))
        #: Members by potential: a partition's tight edges to new holders go to those
        #: one above its own.
        self.by_potential: dict[int, list[int]] = {}
        for member in range(flow.members):
            self.by_potential.setdefault(potential[members_from + member], []).append(member)
        #: Nodes searched in vain: they reach no node of any path found since (or they
        #: would reach the sink), and augmenting adds edges out of a path's nodes only,
        #: so they still reach nothing.
        self.dead: set[int] = set()

    def path(self) -> list[int] | None:
        """A tight path with the fewest edges from its first partition (breadth first),
        or None when there is none left."""
        flow, starts, dead = self.flow, self.starts, self.dead
        while starts:
            start = starts[0]
            if start in dead or not flow.short(start):
                starts.popleft()
                continue
            found = self._search(start)
            if found is not None:
                return found
            starts.popleft()
        return None

    def _search(self, start: int) -> list[int] | None:
        flow, dead = self.flow, self.dead
        partitions, potential = flow.partitions, flow.potential
        back = {start: -1}
        unseen: dict[int, set[int]] = {}  # of `by_potential`, the members not reached yet
        queue = deque([start])
        while queue:
            u = queue.popleft()
            if u < partitions:
                holders, keepers = flow.holders[u], flow.keepers[u]
                # Back to a member that held it (cost 0), or to a new holder (cost 1).
                reached = [m for m in sorted(keepers - holders) if potential[partitions + m] == potential[u]]
                level = potential[u] + 1
                if level not in unseen:
                    unseen[level] = set(self.by_potential.get(level, ()))
                fresh = sorted(unseen[level] - holders - keepers)
                unseen[level].difference_update(fresh)
                nexts = [partitions + m for m in reached + fresh]
            else:  # a member gives up a copy it holds
                member = u - partitions
                nexts = [
                    p
                    for p in sorted(flow.owns[member])
                    if (0 if member in flow.keepers[p] else -1) + potential[u] == potential[p]
                ]
            for v in nexts:
                if v in back or v in dead:
                    continue
                back[v] = u
                if v >= partitions and flow.tight_to_sink(v - partitions):
                    path = [flow.sink, v]
                    while back[path[-1]] != -1:
                        path.append(back[path[-1]])
                    path.reverse()
                    return path
                queue.append(v)
        dead.update(back)
        return None
