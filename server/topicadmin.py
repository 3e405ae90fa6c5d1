"""Topic admin: creates, grows and deletes topics, then refreshes the groups they concern.

Topics are shared by every consumer group, so they change under one lock of
their own; each change is stored first, then the topics image is replaced, and
the groups subscribed to a changed topic have their metadata refreshed (which
bumps their epoch when it moved; a refresh that fails is tried again, see
refresh.py). Other replicas learn of the change from its notice or from the
topics version their next lease round reads (`reload`).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from regroup.reconciler import ApiError, Topic, TopicsImage
from regroup.reconciler.errors import (
    TopicAlreadyExists,
    UnknownServerError,
    UnknownTopicId,
    UnknownTopicOrPartition,
)
from regroup.reconciler.history import topic_changes
from regroup.reconciler.topics import create_topic, grow_topic, validate_topic_name
from regroup.reconciler.validation import validate_id

from .store import StoreConflict, StoreUnavailable
from .writepath import GroupWriter, store_unreachable


@dataclass(frozen=True, slots=True)
class TopicOutcome:
    """The result of one topic in a batch admin call."""

    name: str
    topic: Topic | None = None
    error: ApiError | None = None
    topic_id: str = ""


class TopicAdmin:
    def __init__(self, writer: GroupWriter, refresh: Callable[[Collection[str]], Awaitable[None]]) -> None:
        self.writer = writer
        #: Refreshes the metadata of the groups named (GroupRefresher.refresh).
        self._refresh = refresh
        self._topic_lock = asyncio.Lock()
        self.log: Any = writer.log

    async def create_topics(self, specs: Sequence[tuple[str, int, tuple[str, ...]]]) -> list[TopicOutcome]:
        outcomes = []
        concerned: dict[str, None] = {}  # the groups to refresh, in order
        async with self._topic_lock:
            for name, count, racks in specs:
                try:
                    topic = create_topic(self.writer.image, name, count, racks, str(uuid.uuid4()))
                    concerned.update(dict.fromkeys(await self._put_topic(topic)))
                    outcomes.append(TopicOutcome(name, topic))
                except ApiError as e:
                    outcomes.append(TopicOutcome(name, error=e))
        await self._refresh(concerned)
        return outcomes

    async def create_partitions(
        self, specs: Sequence[tuple[str, str, int, tuple[str, ...]]]
    ) -> list[TopicOutcome]:
        """Grows topics named by (name, topic id, new count, new racks)."""
        outcomes = []
        concerned: dict[str, None] = {}
        async with self._topic_lock:
            for name, topic_id, count, racks in specs:
                try:
                    topic = self._find_topic(name, topic_id)
                    grown = grow_topic(topic, count, racks)
                    concerned.update(dict.fromkeys(await self._put_topic(grown)))
                    outcomes.append(TopicOutcome(grown.name, grown))
                except ApiError as e:
                    outcomes.append(TopicOutcome(name, error=e, topic_id=topic_id))
        await self._refresh(concerned)
        return outcomes

    async def delete_topics(self, names: Sequence[str], topic_ids: Sequence[str]) -> list[TopicOutcome]:
        outcomes = []
        concerned: dict[str, None] = {}
        async with self._topic_lock:
            for name, topic_id in [(n, "") for n in names] + [("", t) for t in topic_ids]:
                try:
                    topic = self._find_topic(name, topic_id)
                    try:
                        await self.writer.store.delete_topic(topic.topic_id)
                    except StoreUnavailable as e:
                        raise self._store_failed(e) from e
                    except StoreConflict as e:
                        raise UnknownServerError(f"The store refused to delete the topic: {e}") from e
                    concerned.update(
                        dict.fromkeys(
                            self._install(self.writer.image.without_topic(topic.topic_id), topic.name)
                        )
                    )
                    self.log.info("topic_deleted", topic=topic.name, topic_id=topic.topic_id)
                    outcomes.append(TopicOutcome(topic.name, topic))
                except ApiError as e:
                    outcomes.append(TopicOutcome(name, error=e, topic_id=topic_id))
        await self._refresh(concerned)
        return outcomes

    def _find_topic(self, name: str, topic_id: str) -> Topic:
        if topic_id:
            validate_id("topic_id", topic_id)
            topic = self.writer.image.by_id.get(topic_id)
            if topic is None:
                raise UnknownTopicId(f"Topic id {topic_id} does not exist.")
            return topic
        validate_topic_name(name)
        topic = self.writer.image.by_name.get(name)
        if topic is None:
            raise UnknownTopicOrPartition(f"Topic '{name}' does not exist.")
        return topic

    def _install(self, image: TopicsImage, name: str) -> list[str]:
        """Makes `image`, where the topic `name` changed, the topics; answers the groups
        whose metadata that concerns."""
        old = self.writer.image
        return self.writer.install_topics(image, (name,), topic_changes(old, image, (name,)))

    def _store_failed(self, e: StoreUnavailable) -> ApiError:
        """The refusal of a change the store failed (maybe stored: if so, the topics
        version tells every replica, this one too, to load the topics again)."""
        self.log.warning("topic_write_failed", error=str(e))
        return store_unreachable()

    async def _put_topic(self, topic: Topic) -> list[str]:
        """Stores the topic and makes it known; answers the groups whose metadata that concerns."""
        try:
            await self.writer.store.put_topic(topic)
        except StoreConflict as e:
            raise await self._topic_conflict(topic, e) from e
        except StoreUnavailable as e:
            raise self._store_failed(e) from e
        created = topic.topic_id not in self.writer.image.by_id
        concerned = self._install(self.writer.image.with_topic(topic), topic.name)
        self.log.info(
            "topic_created" if created else "topic_partitions_created",
            topic=topic.name,
            topic_id=topic.topic_id,
            partitions=topic.num_partitions,
        )
        return concerned

    async def _topic_conflict(self, topic: Topic, e: StoreConflict) -> ApiError:
        """Another writer stored a topic this process did not know (the same name):
        learn the registry again, and what that changes for the groups, then answer
        the real reason instead of a retriable one that would be retried forever."""
        self.log.warning("topic_write_conflict", topic=topic.name, constraint=e.constraint, error=str(e))
        try:
            concerned = await self._load()
        except (StoreUnavailable, StoreConflict) as load_error:
            self.log.warning("topics_load_failed", error=str(load_error))
            return store_unreachable()
        await self._refresh(concerned)
        if e.constraint == "topics_name_key":
            return TopicAlreadyExists(f"Topic '{topic.name}' already exists.")
        return UnknownServerError(f"The store refused topic '{topic.name}': {e}")

    async def reload(self) -> None:
        """Learns the topics again from the store, where another replica changed them,
        and refreshes the groups that subscribe to the ones that changed. Raises
        StoreUnavailable (the lease keeper tries again in its next round)."""
        async with self._topic_lock:
            concerned = await self._load()
        await self._refresh(concerned)

    async def _load(self) -> list[str]:
        """Replaces the topics image with the store's, when it differs; answers the groups
        whose metadata the topics that changed concern."""
        topics = await self.writer.store.load_topics()
        old = self.writer.image
        new = TopicsImage(topics, version=old.version + 1)
        changed = {t.name for t in topics if old.by_name.get(t.name) != t}
        changed.update(name for name in old.by_name if name not in new.by_name)
        if not changed:
            return []
        self.log.info("topics_reloaded", changed=sorted(changed), topics=len(new.by_id))
        return self.writer.install_topics(new, changed, topic_changes(old, new, changed))
