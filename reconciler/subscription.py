"""Subscriptions: which topics a member and a group subscribe to.

A member subscribes by names, by a regex (RE2 syntax, matched against whole
topic names), or both. Names and regexes that match nothing are kept: they
simply match once such a topic exists.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable, Collection, Iterable, Mapping
from functools import lru_cache

import re2

from .errors import InvalidRegularExpression
from .model import Group
from .topics import Topic, TopicRegex, TopicsImage

#: Longest subscription regex accepted. Kafka bounds it only by the request size; topic
#: names are at most 249 characters, so a longer pattern is almost certainly a mistake.
#: Validation refuses a longer one with INVALID_REQUEST before it is compiled.
MAX_REGEX_LENGTH = 1_000

#: RE2's `max_mem` bounds a compiled regex: two thirds for its program, the rest for the
#: DFA cache it fills while matching. A pattern is first compiled under this budget, and
#: refused if its program does not fit: that caps compile time (the largest admitted
#: programs, about 9,000 instructions such as `.{1000}`, compile in under 50 ms, and a
#: larger one is refused in about 10) where RE2's default 8 MiB admits programs that take
#: 200 ms. Real topic patterns (prefixes, alternations of names) compile to a few hundred
#: instructions, two orders of magnitude below it.
REGEX_PROGRAM_MAX_MEM = 1 << 20
#: The budget of the compiled regex kept for matching, RE2's default. Under 1 MiB the DFA
#: cache of a pathological admitted pattern (`(?:.{0,10}){100}`) overflows and RE2 falls
#: back to its NFA: still linear, but 5-10 ms per 249-character topic name, seconds for a
#: registry of a thousand topics. With 8 MiB the same costs well under a millisecond per
#: name. The cache grows only as matching needs it: kilobytes for real patterns.
REGEX_MATCH_MAX_MEM = 8 << 20

RE2_SYNTAX = "https://github.com/google/re2/wiki/Syntax"


def _options(max_mem: int) -> re2.Options:
    options = re2.Options()
    options.max_mem = max_mem
    # Refusals are answered to the member; RE2 would also print each one to stderr.
    options.log_errors = False
    # Only whether a whole name matches is used: without capture groups, RE2 answers
    # that with its DFA alone rather than its slower submatch engines.
    options.never_capture = True
    return options


_PROGRAM_CHECK = _options(REGEX_PROGRAM_MAX_MEM)
_MATCHING = _options(REGEX_MATCH_MAX_MEM)


class _Re2Regex:
    """A compiled regex that matches names as UTF-8 bytes, which RE2 matches.

    Given a str, google-re2 encodes it and maps every byte offset back to a character
    offset: a match costs more than twice as much as with the bytes.
    """

    __slots__ = ("_fullmatch", "pattern")

    def __init__(self, pattern: str, fullmatch: Callable[[bytes], object]) -> None:
        self.pattern = pattern
        self._fullmatch = fullmatch

    def fullmatch(self, text: str, /) -> bool:
        return self._fullmatch(text.encode()) is not None


@lru_cache(maxsize=1024)
def _compile(pattern: str) -> TopicRegex | str:
    """The compiled regex, or the message that says why it does not compile.

    Refusals are cached too, so that a stored regex that no longer compiles costs
    one attempt per process rather than one per target computation. 1,024 distinct
    regexes are far more than groups use; the bound keeps the DFA caches of
    pathological ones (up to 8 MiB each) from adding up.
    """
    if len(pattern) > MAX_REGEX_LENGTH:
        # Not echoed: the same message as validation's.
        return f"SubscribedTopicRegex is longer than {MAX_REGEX_LENGTH} characters ({len(pattern)})."
    try:
        re2.compile(pattern, _PROGRAM_CHECK)
        # Admitted: the same program again, with room for the DFA cache.
        return _Re2Regex(pattern, re2.compile(pattern, _MATCHING).fullmatch)
    except UnicodeEncodeError:
        # RE2 compiles UTF-8, and a lone surrogate has none: escape it, or the message
        # itself could not be encoded on the wire.
        pattern = pattern.encode("utf-8", "backslashreplace").decode()
        reason = "it is not valid Unicode"
    except re2.error as e:
        raw = e.args[0] if e.args else ""
        reason = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    invalid = f"SubscribedTopicRegex `{pattern}` is not a valid regular expression"
    if reason.startswith("pattern too large"):
        return (
            f"{invalid}: its compiled program exceeds the {REGEX_PROGRAM_MAX_MEM / (1 << 20):g} MiB "
            "memory budget; use fewer or smaller counted repetitions ({n}) and narrower character classes."
        )
    return (
        f"{invalid}: {reason}. Regexes use RE2 syntax, which has no backreferences or lookaround "
        f"assertions ({RE2_SYNTAX})."
    )


def compile_regex(pattern: str) -> TopicRegex:
    """Compiles a subscription regex with RE2, as Kafka compiles it with RE2/J.

    RE2 matches in time linear in the topic name, so no pattern can backtrack
    catastrophically (with Python's `re`, `(a*)*b` against 24 `a`s takes a second, and
    twice that per extra character). Python-only constructs are refused
    (backreferences, lookaround, possessive quantifiers, `\\Z`), as are patterns longer
    than `MAX_REGEX_LENGTH` and patterns whose program exceeds `REGEX_PROGRAM_MAX_MEM`: each
    with `InvalidRegularExpression` and a message that says why. Callers use
    `fullmatch`: a regex matches a topic when it matches its whole name.
    """
    compiled = _compile(pattern)
    if isinstance(compiled, str):
        raise InvalidRegularExpression(compiled)
    return compiled


def stored_regex(pattern: str) -> TopicRegex | None:
    """A member's stored regex compiled, or None (it matches no topic) if it does not compile.

    Validation refuses such a regex in a heartbeat, but one stored by an earlier version
    (which compiled with Python's `re`) may use what RE2 refuses. Raising where stored
    regexes are matched would fail every operation on its group, timers included, and so
    wedge the group; matching nothing leaves its member without topics from the regex until
    it sends one that compiles, while the rest of the group goes on.
    """
    compiled = _compile(pattern)
    return None if isinstance(compiled, str) else compiled


def _ids_matching(image: TopicsImage, regex: str) -> frozenset[str]:
    compiled = stored_regex(regex)
    return frozenset() if compiled is None else image.ids_matching(compiled)


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
        ids.update(_ids_matching(image, regex))
    return frozenset(ids)


def group_topics(
    image: TopicsImage, name_counts: Mapping[str, int], regex_counts: Mapping[str, int]
) -> list[Topic]:
    """The existing topics any member of a group subscribes to, sorted by id."""
    by_name = image.by_name
    ids = {by_name[n].topic_id for n in name_counts if n in by_name}
    for regex in regex_counts:
        ids.update(_ids_matching(image, regex))
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
    compiled = (stored_regex(r) for r in group.subscribed_regexes())
    return any(c.fullmatch(name) for c in compiled if c is not None for name in topic_names)


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
