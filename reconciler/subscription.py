"""Subscriptions: which topics a member and a group subscribe to.

A member subscribes by names, by a regex (Python `re`, matched against whole
topic names), or both. Names and regexes that match nothing are kept: they
simply match once such a topic exists.
"""

from __future__ import annotations

import hashlib
import re
import sys
from collections.abc import Collection, Iterable, Mapping
from functools import lru_cache

from .errors import InvalidRegularExpression
from .model import Group
from .topics import Topic, TopicsImage


@lru_cache(maxsize=4096)
def compile_regex(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as e:
        raise InvalidRegularExpression(
            f"SubscribedTopicRegex `{pattern}` is not a valid regular expression: {e}."
        ) from None


@lru_cache(maxsize=8192)
def canonical_names(names: tuple[str, ...]) -> tuple[str, ...]:
    """One shared tuple (of interned names) per distinct subscription.

    Thousands of members usually subscribe to the same topics: sharing the
    tuple saves memory and lets per-subscription work be cached by identity.
    """
    return tuple(sys.intern(n) for n in names)


def member_topic_ids(image: TopicsImage, names: Iterable[str], regex: str | None) -> frozenset[str]:
    """The ids of the existing topics a member subscribes to."""
    by_name = image.by_name
    ids = {by_name[n].topic_id for n in names if n in by_name}
    if regex is not None:
        ids.update(image.ids_matching(compile_regex(regex)))
    return frozenset(ids)


def group_topics(
    image: TopicsImage, name_counts: Mapping[str, int], regex_counts: Mapping[str, int]
) -> list[Topic]:
    """The existing topics any member of a group subscribes to, sorted by id."""
    by_name = image.by_name
    ids = {by_name[n].topic_id for n in name_counts if n in by_name}
    for regex in regex_counts:
        ids.update(image.ids_matching(compile_regex(regex)))
    return [image.by_id[t] for t in sorted(ids)]


def metadata_hash(topics: Iterable[Topic]) -> int:
    """A stable hash of subscribed topic metadata (KIP-1101 style), 0 for none.

    A change of this hash (a topic created, grown or deleted, racks changed)
    bumps the group epoch. It is stable across processes, unlike `hash()`.
    """
    digest = hashlib.blake2b(digest_size=8)
    empty = True
    for topic in topics:
        empty = False
        digest.update(
            f"{topic.topic_id}\0{topic.name}\0{topic.num_partitions}\0{','.join(topic.partition_racks)}\n".encode()
        )
    if empty:
        return 0
    return int.from_bytes(digest.digest(), "big", signed=True)


def subscribes_to_any(group: Group, topic_names: Collection[str]) -> bool:
    """Whether any member of the group subscribes to one of the topics, by name or regex."""
    names = group.subscribed_topic_names()
    if any(name in names for name in topic_names):
        return True
    return any(compile_regex(r).fullmatch(name) for r in group.subscribed_regexes() for name in topic_names)


def adjusted_counts(counts: Mapping[str, int], remove: Iterable[str], add: Iterable[str]) -> dict[str, int]:
    """`counts` after one member's keys were replaced by another's."""
    out = dict(counts)
    for key in remove:
        value = out.get(key, 0) - 1
        if value > 0:
            out[key] = value
        else:
            out.pop(key, None)
    for key in add:
        out[key] = out.get(key, 0) + 1
    return out
