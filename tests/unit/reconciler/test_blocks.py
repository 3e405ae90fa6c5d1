"""blocks.cut_runs against a plain cut of the flattened partitions.

cut_runs shares frozensets between segments that are one object and builds
repeated patterns of blocks at once (a pattern may start inside a segment);
whatever path it takes, each block must be the next `size` partitions in
order, the last one short when the segments run out.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from regroup.reconciler.assignors.blocks import cut_runs
from regroup.reconciler.model import Assignment
from tests.support.depth import examples


def _plain(
    topic_ids: list[str], segments: list[tuple[int, ...]], runs: list[tuple[int, int]]
) -> tuple[list[Assignment], int]:
    pairs = [(t, p) for t, segment in zip(topic_ids, segments, strict=True) for p in segment]
    out: list[Assignment] = []
    at = 0
    for size, count in runs:
        for _ in range(count):
            if size and at >= len(pairs):
                return out, at
            block: dict[str, set[int]] = {}
            for t, p in pairs[at : at + size]:
                block.setdefault(t, set()).add(p)
            out.append({t: frozenset(ps) for t, ps in block.items()})
            at = min(at + size, len(pairs))
    return out, at


@settings(max_examples=examples(400), deadline=None)
@given(
    shapes=st.lists(
        st.sampled_from([(0, 3, 6, 9), (1, 4, 7), (2, 5), (0,), (0, 1, 2, 3, 4, 5, 6)]), max_size=4
    ),
    copies=st.lists(st.integers(1, 30), min_size=1, max_size=4),
    runs=st.lists(st.tuples(st.integers(0, 25), st.integers(0, 60)), min_size=1, max_size=4),
)
def test_cut_runs_cuts_the_next_partitions_in_order(
    shapes: list[tuple[int, ...]], copies: list[int], runs: list[tuple[int, int]]
) -> None:
    """Runs of one segment object repeated over many topics (as topics of
    one rack layout share theirs) take the pattern paths; mixed runs the rest."""
    segments: list[tuple[int, ...]] = []
    for shape, n in zip(shapes, copies, strict=False):
        segments += [shape] * n  # one object, n topics
    topic_ids = [f"t{i:03}" for i in range(len(segments))]
    runs = sorted(runs, reverse=True)
    blocks, handed = cut_runs(topic_ids, segments, runs)
    expected, expected_handed = _plain(topic_ids, segments, runs)
    assert handed == expected_handed
    assert blocks[: len(expected)] == expected
    assert all(not b for b in blocks[len(expected) :])
