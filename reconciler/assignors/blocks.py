"""Handing out contiguous blocks of partitions, run by run, with shared frozensets.

A fresh assignment (nothing held) gives each member the next contiguous block
of a sequence of partitions: the global order (topics by id, partitions
ascending) for the uniform assignor, or one rack's partitions in that order for
its rack-aware variant. Building a frozenset per block is most of the cost at
a partition or two per member, so the blocks are handed out by runs of equal
size, and a run of blocks cutting a segment (a topic's partitions, or its
partitions of one rack) the same way is built once and shared by every segment
that is the same object: topics of one size, or of one rack layout, all split
alike. The frozensets are immutable, so sharing them is safe.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence
from itertools import groupby, repeat
from math import lcm
from operator import add

from ..model import EMPTY_ASSIGNMENT, Assignment


def cut_runs(
    topic_ids: Sequence[str], segments: Sequence[Sequence[int]], runs: Iterable[tuple[int, int]]
) -> tuple[list[Assignment], int]:
    """The blocks of consecutive partitions of `segments` (segment j: partitions
    of topic_ids[j], in order; topics distinct), run by run: for each (size,
    count) of `runs`, `count` blocks of `size` partitions (size 0: the empty
    assignment). Stops when the segments run out, the last block then short.
    Returns the blocks and how many partitions they hold."""
    # Where each run of consecutive segments that are one object ends, to hand
    # out whole runs of them in one comprehension rather than one by one.
    run_starts: list[int] = []
    run_ends: list[int] = []
    if segments and segments.count(segments[0]) == len(segments):  # one object (by identity, in C)
        run_starts, run_ends = [0], [len(segments)]
    else:
        end = 0
        for _, same in groupby(map(id, segments)):
            run_starts.append(end)
            end += len(list(same))
            run_ends.append(end)
    made: dict[tuple[int, int, int, int], list[frozenset[int]]] = {}

    def blocks(segment: Sequence[int], start: int, size: int, count: int) -> list[frozenset[int]]:
        key = (id(segment), start, size, count)
        found = made.get(key)
        if found is None:
            found = made[key] = [
                frozenset(segment[a : a + size]) for a in range(start, start + count * size, size)
            ]
        return found

    patterns: dict[tuple[int, int, int], list[tuple[int, tuple[frozenset[int], ...]]]] = {}

    def period(
        segment: Sequence[int], start: int, size: int, span: int
    ) -> list[tuple[int, tuple[frozenset[int], ...]]]:
        """The blocks of `size` from position `start` of `segment` over `span`
        copies of it, back to `start`: each as the index of the copy it starts
        in and its pieces, one per copy it covers."""
        key = (id(segment), start, size)
        found = patterns.get(key)
        if found is None:
            n = len(segment)
            found = []
            for a in range(start, start + span * n, size):
                pieces = []
                for copy in range(a // n, (a + size - 1) // n + 1):
                    lo, hi = max(a, copy * n) - copy * n, min(a + size, (copy + 1) * n) - copy * n
                    pieces.append(frozenset(segment[lo:hi]))
                found.append((a // n, tuple(pieces)))
            patterns[key] = found
        return found

    out: list[Assignment] = []
    handed = j = pos = 0  # the next partition: segment index, position in it
    last = len(segments)
    for size, count in runs:
        if size == 0:
            out += [EMPTY_ASSIGNMENT] * count
            continue
        while count and j < last:
            segment = segments[j]
            n = len(segment)
            if pos == 0 and n % size == 0:
                # Whole segments split into whole blocks: as many as the run of
                # identical segments holds.
                per_segment = n // size
                whole = min(run_ends[bisect_right(run_starts, j) - 1] - j, count // per_segment)
                if whole:
                    split = blocks(segment, 0, size, per_segment)
                    out += [{t: b} for t in topic_ids[j : j + whole] for b in split]
                    j += whole
                    count -= whole * per_segment
                    handed += whole * n
                    continue
            if n < 8 * size:
                # Short segments that blocks run across: a run of identical
                # segments is cut alike every lcm(n, size) partitions, so that
                # pattern of blocks is made once and repeated, its topics shifted.
                span = lcm(n, size) // n  # segments per period
                room = run_ends[bisect_right(run_starts, j) - 1] - j - (1 if pos else 0)
                repeats = min(room // span, count // (span * n // size))
                if repeats:
                    pattern = period(segment, pos, size, span)
                    out += _repeated(topic_ids, j, span, repeats, pattern)
                    j += repeats * span
                    count -= repeats * len(pattern)
                    handed += repeats * span * n
                    continue
            if n - pos >= size:
                # As many whole blocks as this segment holds, in one go.
                q = min((n - pos) // size, count)
                topic_id = topic_ids[j]
                out += [{topic_id: b} for b in blocks(segment, pos, size, q)]
                pos += q * size
                count -= q
                handed += q * size
                if pos == n:
                    j, pos = j + 1, 0
                continue
            # This block runs past the end of the segment, over one or more.
            assignment: dict[str, frozenset[int]] = {}
            need = size
            while need and j < last:
                segment = segments[j]
                n = len(segment)
                take = min(need, n - pos)
                assignment[topic_ids[j]] = blocks(segment, pos, take, 1)[0]
                need -= take
                pos += take
                if pos == n:
                    j, pos = j + 1, 0
            handed += size - need
            out.append(assignment)
            count -= 1
    return out, handed


def _repeated(
    topic_ids: Sequence[str],
    j: int,
    span: int,
    repeats: int,
    pattern: list[tuple[int, tuple[frozenset[int], ...]]],
) -> list[Assignment]:
    """The blocks of `pattern` (each: the copy it starts in, and its pieces)
    over `repeats` periods of `span` segments from segment j, in order. Built
    one pattern block at a time over every period, by C passes (the topics of
    the k-th block of every period are a slice with a stride, or slices made
    by `map`), and interleaved by slice assignment: a third less than a
    comprehension that computes each block's slice in Python."""
    out: list[Assignment] = [EMPTY_ASSIGNMENT] * (repeats * len(pattern))
    for k, (first, pieces) in enumerate(pattern):
        # (`first` may be `span`: a period that starts inside a segment ends
        # with a block starting in the next period's first segment.)
        stop = j + first + repeats * span
        if len(pieces) == 1:
            piece = pieces[0]
            out[k :: len(pattern)] = [{topic_id: piece} for topic_id in topic_ids[j + first : stop : span]]
        elif len(pieces) == 2:  # a block across one segment boundary: a dict display, no slice
            head, tail = pieces
            firsts = topic_ids[j + first : stop : span]
            seconds = topic_ids[j + first + 1 : stop + 1 : span]
            out[k :: len(pattern)] = [{a: head, b: tail} for a, b in zip(firsts, seconds, strict=True)]
        else:
            starts = range(j + first, stop, span)
            spans = map(topic_ids.__getitem__, map(slice, starts, map(add, starts, repeat(len(pieces)))))
            out[k :: len(pattern)] = list(map(dict, map(zip, spans, repeat(pieces))))
    return out
