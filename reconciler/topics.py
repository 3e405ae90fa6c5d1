"""The topic registry: where the partitions being shared come from.

`TopicsImage` is an immutable snapshot of the registry. Admin operations are
pure functions that validate a change against an image and return the topic to
store; the shell stores it, then builds the next image.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from .errors import InvalidPartitions, InvalidRequest, InvalidTopic, TopicAlreadyExists

#: Kafka's limits for topic names.
MAX_TOPIC_NAME_LENGTH = 249
# One character class repeated: nothing to backtrack into, so Python's `re` is safe here.
_LEGAL_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")
#: A topic larger than this is almost certainly a typo and would exhaust memory.
MAX_PARTITIONS_PER_TOPIC = 1_000_000
MAX_RACK_LENGTH = 255

#: Leadership of a leader group (the `leader` assignor, docs/leader-election.md) is
#: partition 0 of this synthetic topic, so that the engine's partition machinery
#: (epochs, revoke-before-assign, rebalance and session timeouts) keeps it single-owner.
#: It can never collide with a registry topic: registry ids are UUIDs (the topics
#: table's key is a `uuid` column; the shell draws them with uuid4) and this id is not
#: one, and registry names may only use ASCII alphanumerics, '.', '_' and '-', which
#: '<' and '>' are not. It is never in a `TopicsImage`, so no subscription (by name or
#: regex) ever matches it; only the leader assignor's input carries it.
LEADERSHIP_TOPIC_ID = "regroup:leadership"
LEADERSHIP_TOPIC_NAME = "<leadership>"


class TopicRegex(Protocol):
    """A compiled subscription regex (an RE2 program, see `subscription.compile_regex`)."""

    @property
    def pattern(self) -> str: ...

    def fullmatch(self, text: str, /) -> object: ...


@dataclass(frozen=True, slots=True)
class Topic:
    topic_id: str
    name: str
    num_partitions: int
    #: The rack of each partition, or empty when racks are not known.
    partition_racks: tuple[str, ...] = ()


#: The leadership "topic" as the leader assignor's input carries it.
LEADERSHIP_TOPIC = Topic(LEADERSHIP_TOPIC_ID, LEADERSHIP_TOPIC_NAME, 1)


class TopicsImage:
    """An immutable snapshot of the topic registry, indexed by id and by name."""

    __slots__ = ("_by_id", "_by_name", "_regex_cache", "version")

    def __init__(self, topics: Iterable[Topic] = (), version: int = 0) -> None:
        self._by_id: dict[str, Topic] = {t.topic_id: t for t in topics}
        self._by_name: dict[str, Topic] = {t.name: t for t in self._by_id.values()}
        self._regex_cache: dict[str, frozenset[str]] = {}
        self.version = version

    @property
    def by_id(self) -> Mapping[str, Topic]:
        return self._by_id

    @property
    def by_name(self) -> Mapping[str, Topic]:
        return self._by_name

    def name_of(self, topic_id: str) -> str:
        """The topic's name ("" if unknown); a copy topic's (redundant groups,
        reconciler/replicas.py) is its topic's."""
        topic = self._by_id.get(topic_id)
        if topic is None and "#" in topic_id:
            topic = self._by_id.get(topic_id.partition("#")[0])
        if topic is None:
            # Leadership is in no image, but is shown (heartbeats, DescribeGroups,
            # history, web view) under its reserved name rather than none.
            return LEADERSHIP_TOPIC_NAME if topic_id == LEADERSHIP_TOPIC_ID else ""
        return topic.name

    def ids_matching(self, pattern: TopicRegex) -> frozenset[str]:
        """Ids of the topics whose whole name matches `pattern` (memoised per image)."""
        cached = self._regex_cache.get(pattern.pattern)
        if cached is None:
            cached = frozenset(t.topic_id for t in self._by_id.values() if pattern.fullmatch(t.name))
            self._regex_cache[pattern.pattern] = cached
        return cached

    def with_topic(self, topic: Topic) -> TopicsImage:
        topics = dict(self._by_id)
        topics[topic.topic_id] = topic
        return TopicsImage(topics.values(), self.version + 1)

    def without_topic(self, topic_id: str) -> TopicsImage:
        topics = dict(self._by_id)
        topics.pop(topic_id, None)
        return TopicsImage(topics.values(), self.version + 1)


def resolve_topic_id(image: TopicsImage, topic_id: str, name: str) -> str:
    """The id of a topic named by id or by name. An unknown name keeps a key that no
    assignment uses, so that it can never pass as a subset of one, nor as a valid unit."""
    if topic_id:
        return topic_id
    topic = image.by_name.get(name)
    return topic.topic_id if topic is not None else f"unknown-topic-name:{name}"


def validate_topic_name(name: str) -> None:
    if not name:
        raise InvalidTopic("Topic name can't be empty.")
    if name in (".", ".."):
        raise InvalidTopic(f"Topic name cannot be '{name}'.")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopic(f"Topic name is longer than {MAX_TOPIC_NAME_LENGTH} characters ({len(name)}).")
    if not _LEGAL_TOPIC_NAME.fullmatch(name):
        raise InvalidTopic(
            f"Topic name '{name}' is illegal: it contains a character other than "
            "ASCII alphanumerics, '.', '_' and '-'."
        )


def _validate_racks(racks: tuple[str, ...], expected: int, field: str) -> None:
    if racks and len(racks) != expected:
        raise InvalidRequest(f"{field} must have one entry per partition ({expected}), got {len(racks)}.")
    for rack in racks:
        if not rack or len(rack) > MAX_RACK_LENGTH:
            raise InvalidRequest(f"{field} entries must be 1 to {MAX_RACK_LENGTH} characters.")


def _validate_count(count: int) -> None:
    if count <= 0:
        raise InvalidPartitions(f"Number of partitions must be larger than 0 (got {count}).")
    if count > MAX_PARTITIONS_PER_TOPIC:
        raise InvalidPartitions(
            f"Number of partitions must be at most {MAX_PARTITIONS_PER_TOPIC} (got {count})."
        )


def create_topic(
    image: TopicsImage, name: str, num_partitions: int, racks: tuple[str, ...], topic_id: str
) -> Topic:
    """Validates a new topic against the registry; `topic_id` is chosen by the caller."""
    validate_topic_name(name)
    _validate_count(num_partitions)
    _validate_racks(racks, num_partitions, "partition_racks")
    if name in image.by_name:
        raise TopicAlreadyExists(f"Topic '{name}' already exists.")
    return Topic(topic_id=topic_id, name=name, num_partitions=num_partitions, partition_racks=racks)


def grow_topic(topic: Topic, count: int, new_racks: tuple[str, ...]) -> Topic:
    """Validates growing `topic` to `count` partitions in total."""
    _validate_count(count)
    if count <= topic.num_partitions:
        raise InvalidPartitions(
            f"Topic '{topic.name}' has {topic.num_partitions} partitions; the new count "
            f"({count}) must be larger (partitions are never removed)."
        )
    added = count - topic.num_partitions
    _validate_racks(new_racks, added, "new_partition_racks")
    if bool(new_racks) != bool(topic.partition_racks):
        if topic.partition_racks:
            raise InvalidRequest(
                f"Topic '{topic.name}' has partition racks; new_partition_racks must give {added}."
            )
        raise InvalidRequest(f"Topic '{topic.name}' has no partition racks; don't send new_partition_racks.")
    return Topic(
        topic_id=topic.topic_id,
        name=topic.name,
        num_partitions=count,
        partition_racks=topic.partition_racks + new_racks,
    )
