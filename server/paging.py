"""Paging of the admin listings (ListGroups, DescribeTopics), as Google's AIP-158 has it.

A page ends at `page_size` entries or before its serialized size would pass the
byte budget, whichever comes first, so that no listing fails on the message
size limit (or after passing over many keys its filters leave out). Paging is
by key (keyset): the token carries the last key looked at and the next page
starts after it, so entries created or deleted between two calls neither
repeat nor hide the others. Tokens are urlsafe base64 of a small
versioned JSON object and also carry a digest of the listing's filters: a token
passed back with other filters is refused rather than answered with a page of
another listing.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from heapq import heapify, heappop
from typing import Generic, Protocol, TypeVar

from regroup.reconciler.errors import InvalidRequest

DEFAULT_PAGE_SIZE = 1_000
MAX_PAGE_SIZE = 10_000
#: gRPC's default receive limit in every language. Pages stay under it even when
#: the server allows larger messages, so that clients with default channel
#: options can read every page.
GRPC_DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024
#: Tokens are at most a few hundred bytes; anything much longer is not ours.
MAX_TOKEN_LENGTH = 4_096
_TOKEN_VERSION = 1
#: Keys a page may pass over (left out by filters) before it ends, even empty.
MAX_SKIPPED = 5_000
_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)

#: A listing's key: a name, or a position in a request's list.
K = TypeVar("K", str, int)


class Entry(Protocol):
    def ByteSize(self) -> int: ...


M = TypeVar("M", bound=Entry)


def byte_budget(max_message_bytes: int) -> int:
    """The most bytes a page may take: the message limit (capped at gRPC's default)
    less a sixteenth. Sizes are counted exactly; the headroom is for what the count
    cannot see, such as a field a future version adds to the response."""
    cap = min(max_message_bytes, GRPC_DEFAULT_MAX_MESSAGE_BYTES)
    return cap - cap // 16


def page_size(requested: int, default: int = DEFAULT_PAGE_SIZE) -> int:
    if requested < 0:
        raise InvalidRequest(f"page_size must not be negative (got {requested}).")
    if requested == 0:
        return default
    return min(requested, MAX_PAGE_SIZE)


def field_size(length: int) -> int:
    """Bytes a length-delimited field of `length` bytes takes in its message
    (its field number is below 16, so its tag is one byte)."""
    return 1 + max(1, (length.bit_length() + 6) // 7) + length


class Cursor(Generic[K]):
    """Issues and reads the page tokens of one listing: `method` and its filters
    (JSON-able values; `filter_names` names them in the message refusing a token
    issued with other filters)."""

    def __init__(self, method: str, filters: object, key_type: type[K], filter_names: str) -> None:
        self.method = method
        self.key_type: type[K] = key_type
        self.filter_names = filter_names
        self._digest = hashlib.sha256(_JSON.encode(filters).encode()).hexdigest()[:16]
        # The token's JSON up to its key, made once: a page measures the token it
        # would end with for every entry it considers (a whole json.dumps each
        # time took a third of a page's time).
        head = {"v": _TOKEN_VERSION, "m": self.method, "f": self._digest, "k": None}
        self._head = _JSON.encode(head).encode()[: -len("null}")]

    def _json(self, key: K) -> bytes:
        return self._head + _JSON.encode(key).encode() + b"}"

    def token(self, key: K) -> str:
        return base64.urlsafe_b64encode(self._json(key)).rstrip(b"=").decode("ascii")

    def token_length(self, key: K) -> int:
        """len(self.token(key)), without encoding it (unpadded base64: 4 characters per 3 bytes)."""
        return (len(self._json(key)) * 4 + 2) // 3

    def after(self, token: str) -> K | None:
        """The last key of the previous page, or None for the first page."""
        if not token:
            return None
        body = _decode(token) or {}
        key = body.get("k")
        # `type(...) is`: JSON's true is an int to isinstance, yet no position (the
        # isinstance after it only tells the type checker).
        if (
            body.get("v") != _TOKEN_VERSION
            or body.get("m") != self.method
            or type(key) is not self.key_type
            or not isinstance(key, self.key_type)
        ):
            raise InvalidRequest(
                f"page_token is not a page token of {self.method}: pass the next_page_token of "
                "the previous response unchanged, or none for the first page."
            )
        if body.get("f") != self._digest:
            raise InvalidRequest(
                f"page_token belongs to a listing with other {self.filter_names}: send the same "
                f"{self.filter_names} as the call that returned it, or start again without a page_token."
            )
        return key


def _decode(token: str) -> dict[str, object] | None:
    if len(token) > MAX_TOKEN_LENGTH:
        return None
    try:
        raw = base64.b64decode(token + "=" * (-len(token) % 4), altchars=b"-_", validate=True)
        body = json.loads(raw.decode())
    except (binascii.Error, ValueError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return None
    return body if isinstance(body, dict) else None


def sorted_after(keys: Iterable[str], after: str | None) -> Iterator[str]:
    """The keys greater than `after`, in order. Sorted lazily through a heap: one
    pass to start (in C), then O(log n) per key taken, so a page of 1000 out of
    100,000 costs a few milliseconds where sorting them all costs some 30 (and a
    filter that skips most keys costs at worst one sort)."""
    heap = list(keys) if after is None else [k for k in keys if k > after]
    heapify(heap)
    while heap:
        yield heappop(heap)


@dataclass(frozen=True, slots=True)
class Page(Generic[M]):
    entries: list[M]
    #: Empty on the last page.
    next_page_token: str


def take_page(
    keys: Iterable[K],
    build: Callable[[K], M | None],
    size: int,
    budget: int,
    cursor: Cursor[K],
    oversized: Callable[[M, int], M] | None = None,
    max_skipped: int = MAX_SKIPPED,
) -> Page[M]:
    """Entries for `keys` in order (`build` returns None for a key to skip), at most
    `size` of them and at most `budget` serialized bytes, counting the next page
    token the page would end with.

    The first entry is always taken so that paging makes progress; `oversized`
    replaces one that alone passes the budget (given the entry and the budget).
    A token is only issued when another key is known to follow, so the last page
    is never an empty one; but a page that skipped `max_skipped` keys ends there,
    even empty, and the next one resumes after the last key skipped: a filter
    that matches little must not hold the event loop for a whole listing (one
    that matched none of 100,000 groups took half a second in one call)."""
    entries: list[M] = []
    used = 0  # by the entries; the token is counted on top, once
    last: K | None = None  # the last key taken
    skipped = 0
    for key in keys:
        entry = build(key)
        if entry is None:
            skipped += 1
            if skipped > max_skipped:
                return Page(entries, cursor.token(_resume(key, last, used, budget, cursor)))
            continue
        if len(entries) == size:
            assert last is not None
            return Page(entries, cursor.token(last))
        entry_size = field_size(entry.ByteSize())
        if used + entry_size + field_size(cursor.token_length(key)) > budget:
            if entries:
                assert last is not None
                return Page(entries, cursor.token(last))
            if oversized is not None:
                entry = oversized(entry, budget)
                entry_size = field_size(entry.ByteSize())
        entries.append(entry)
        used += entry_size
        last = key
    return Page(entries, "")


def _resume(skipped: K, last: K | None, used: int, budget: int, cursor: Cursor[K]) -> K:
    """Where a page that stopped at a skipped key lets the next one start: after that
    key when its token fits (it may be longer than the last taken key's, which was
    counted), else after the last key taken."""
    if last is None or used + field_size(cursor.token_length(skipped)) <= budget:
        return skipped
    return last
