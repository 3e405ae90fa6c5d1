"""Paging helpers: tokens, page sizes, lazy order and byte-bounded pages."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from regroup.reconciler.errors import InvalidRequest
from regroup.server import paging
from regroup.v1 import admin_pb2

Group = admin_pb2.ListGroupsResponse.Group


def test_page_size_defaults_clamps_and_refuses_negatives() -> None:
    assert paging.page_size(0) == paging.DEFAULT_PAGE_SIZE
    assert paging.page_size(0, default=7) == 7
    assert paging.page_size(5) == 5
    assert paging.page_size(10**9) == paging.MAX_PAGE_SIZE
    with pytest.raises(InvalidRequest, match=r"page_size must not be negative \(got -1\)"):
        paging.page_size(-1)


def test_byte_budget_leaves_headroom_under_the_limit_and_grpcs_default() -> None:
    assert paging.byte_budget(64 * 1024) == 60 * 1024
    assert paging.byte_budget(1024) == 960
    assert paging.byte_budget(64 * 1024 * 1024) == paging.byte_budget(4 * 1024 * 1024) < 4 * 1024 * 1024


@pytest.mark.parametrize("length", [0, 1, 127, 128, 16_383, 16_384, 2_000_000])
def test_field_size_matches_protobuf(length: int) -> None:
    # A repeated field, so that even an empty entry is written (as page entries are).
    message = admin_pb2.DescribeTopicsRequest(names=["x" * length])
    assert paging.field_size(length) == message.ByteSize()


@given(st.text(min_size=1, max_size=255))
def test_tokens_round_trip_any_key_and_their_length_is_known_without_making_them(key: str) -> None:
    cursor = paging.Cursor("ListGroups", [["stable"], []], str, "filters")
    token = cursor.token(key)
    assert cursor.after(token) == key
    assert cursor.token_length(key) == len(token)
    assert json.loads(base64.urlsafe_b64decode(token + "==")) == {
        "v": 1,
        "m": "ListGroups",
        "f": cursor._digest,
        "k": key,
    }


def _forged(body: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(body).encode()).decode()


@pytest.mark.parametrize(
    "token",
    [
        "not base64!",
        "e30",  # {} : no version
        base64.urlsafe_b64encode(b"\xff\xfe").decode(),
        _forged([1, 2]),
        _forged({"v": 2, "m": "ListGroups", "k": "g"}),
        _forged({"v": 1, "m": "DescribeTopics", "k": "g"}),
        _forged({"v": 1, "m": "ListGroups", "k": 3}),
        "A" * (paging.MAX_TOKEN_LENGTH + 4),
    ],
)
def test_malformed_tokens_are_invalid_requests(token: str) -> None:
    cursor = paging.Cursor("ListGroups", [[], []], str, "filters")
    with pytest.raises(InvalidRequest, match="page_token is not a page token of ListGroups"):
        cursor.after(token)


def test_a_token_is_only_valid_with_its_filters_and_positions_are_ints_not_bools() -> None:
    token = paging.Cursor("ListGroups", [["stable"], []], str, "states_filter").token("g")
    with pytest.raises(InvalidRequest, match="other states_filter"):
        paging.Cursor("ListGroups", [["empty"], []], str, "states_filter").after(token)
    names = paging.Cursor("DescribeTopics", ["a", "b"], int, "names")
    assert names.after(names.token(0)) == 0
    with pytest.raises(InvalidRequest, match="not a page token"):
        names.after(_forged({"v": 1, "m": "DescribeTopics", "f": "x", "k": True}))


@given(st.sets(st.text(max_size=8), max_size=60), st.one_of(st.none(), st.text(max_size=8)))
def test_sorted_after_is_sorted_and_strictly_after(keys: set[str], after: str | None) -> None:
    assert list(paging.sorted_after(keys, after)) == sorted(k for k in keys if after is None or k > after)


def _group(i: int) -> Group:
    return Group(group_id=f"g{i:04d}", group_state="Stable", group_type="consumer", members=3)


#: Positions as keys, as DescribeTopics with names has them.
CURSOR = paging.Cursor("DescribeTopics", ["some", "names"], int, "names")
_token = CURSOR.token


def test_a_page_ends_at_its_size_and_only_says_more_when_there_is_more() -> None:
    build = _group
    full = paging.take_page(range(10), build, 4, 10**6, CURSOR)
    assert [g.group_id for g in full.entries] == ["g0000", "g0001", "g0002", "g0003"]
    assert full.next_page_token == _token(3)
    last = paging.take_page(range(4), build, 4, 10**6, CURSOR)
    assert len(last.entries) == 4 and last.next_page_token == ""
    # Skipped keys past a full page do not count as more.
    odd = paging.take_page(range(6), lambda i: _group(i) if i < 4 else None, 4, 10**6, CURSOR)
    assert odd.next_page_token == ""


@given(st.integers(min_value=60, max_value=3_000), st.integers(min_value=1, max_value=200))
def test_a_page_with_its_token_never_passes_the_budget_and_always_progresses(budget: int, count: int) -> None:
    page = paging.take_page(range(count), _group, 1_000, budget, CURSOR)
    response = admin_pb2.ListGroupsResponse(groups=page.entries, next_page_token=page.next_page_token)
    assert page.entries
    assert response.ByteSize() <= budget or len(page.entries) == 1
    if page.next_page_token:
        assert page.next_page_token == _token(len(page.entries) - 1)
        # The next entry would not have fitted.
        bigger = admin_pb2.ListGroupsResponse(
            groups=[*page.entries, _group(len(page.entries))], next_page_token=_token(len(page.entries))
        )
        assert bigger.ByteSize() > budget


def test_an_entry_alone_over_the_budget_is_replaced_only_when_first() -> None:
    def describe(i: int) -> admin_pb2.TopicDescription:
        racks = ["r" * 50] * (100 if i == 1 else 1)
        return admin_pb2.TopicDescription(name=f"t{i}", num_partitions=len(racks), partition_racks=racks)

    def oversized(d: admin_pb2.TopicDescription, budget: int) -> admin_pb2.TopicDescription:
        return admin_pb2.TopicDescription(name=d.name, num_partitions=d.num_partitions, error_message="big")

    first = paging.take_page(range(3), describe, 10, 1_000, CURSOR, oversized)
    assert [t.name for t in first.entries] == ["t0"] and first.next_page_token == _token(0)
    second = paging.take_page(range(1, 3), describe, 10, 1_000, CURSOR, oversized)
    assert [(t.name, t.error_message) for t in second.entries] == [("t1", "big"), ("t2", "")]


def test_a_page_that_skips_too_many_keys_ends_even_empty_and_the_next_resumes_after_them() -> None:
    def build(i: int) -> Group | None:
        return _group(i) if i % 10 == 9 else None

    pages = []
    after: int | None = None
    while True:
        keys = range(0 if after is None else after + 1, 30)
        page = paging.take_page(keys, build, 5, 10**6, CURSOR, max_skipped=4)
        pages.append([g.group_id for g in page.entries])
        if not page.next_page_token:
            break
        after = CURSOR.after(page.next_page_token)
    # Five keys looked at and skipped per page at most; every match exactly once.
    assert pages == [[], ["g0009"], [], ["g0019"], [], ["g0029"]]
