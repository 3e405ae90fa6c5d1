"""The assignors' shared member indices."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from regroup.reconciler.assignors.indices import indices


@given(st.lists(st.integers(0, 3_000), min_size=1, max_size=8))
def test_indices_are_zero_to_n_whatever_sizes_came_before(sizes: list[int]) -> None:
    """Grown, cut or reused, each call is exactly 0 .. n - 1, and the ints of a
    call are the very objects of the next one (shared, not made again)."""
    for n in sizes:
        assert indices(n) == tuple(range(n))
    n = sizes[-1]
    assert all(a is b for a, b in zip(indices(n), indices(n), strict=True))
