"""Member indices from one shared tuple of ints, not from `range`.

The assignors file members by index (per rack, per quota, the ones with room)
in C passes such as `compress(range(n), selectors)`. Iterating a range makes a
new int object for every index above 256, and the lists built from it free
them all again when they go: filing 10,000 members by rack cost 0.63 ms that
way, 0.33 ms from a tuple of the same ints made once (only references are
copied). The ints are immutable, so sharing them is safe.
"""

from __future__ import annotations

_shared: tuple[int, ...] = ()


def indices(n: int) -> tuple[int, ...]:
    """0, 1, ..., n - 1, as a tuple whose ints are shared between calls. Grown
    ahead (by a quarter) so that a group growing by joins does not remake it
    for every new member; a slice of it (references only) when longer."""
    global _shared
    found = _shared
    if len(found) < n:
        found = _shared = tuple(range(n + n // 4))
    return found if len(found) == n else found[:n]
