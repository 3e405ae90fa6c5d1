"""Request validation: Kafka's rules and messages, plus limits on absurd input.

Validation runs before anything else, so a refused request changes nothing.
Every message names the field at fault.
"""

from __future__ import annotations

from .assignors.leader import LeaderAssignor
from .context import GroupConfig
from .errors import InvalidRequest, UnsupportedAssignor
from .messages import ConsumerGroupHeartbeat
from .model import (
    CONSUMER_GROUP_TYPE,
    JOIN_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ClientAssignor,
)
from .replicas import MAX_REPLICAS
from .subscription import MAX_REGEX_LENGTH, compile_regex
from .topics import MAX_TOPIC_NAME_LENGTH

#: Longest group, member, instance, rack and client id and assignor name accepted.
MAX_ID_LENGTH = 255
MAX_SUBSCRIBED_TOPIC_NAMES = 10_000
MAX_OWNED_PARTITIONS = 1_000_000


def validate_id(field: str, value: str | None) -> None:
    if value is not None and len(value) > MAX_ID_LENGTH:
        raise InvalidRequest(f"{field} is longer than {MAX_ID_LENGTH} characters ({len(value)}).")


def validate_group_id(group_id: str) -> None:
    if not group_id.strip():
        raise InvalidRequest("GroupId can't be empty.")
    validate_id("GroupId", group_id)


def validate_consumer_group_heartbeat(req: ConsumerGroupHeartbeat, config: GroupConfig) -> None:
    """Raises the first rule the request breaks, in Kafka's order."""
    validate_group_id(req.group_id)
    if req.instance_id == "":
        raise InvalidRequest("InstanceId can't be empty.")
    if req.rack_id == "":
        raise InvalidRequest("RackId can't be empty.")
    if not req.member_id and req.member_epoch != JOIN_GROUP_MEMBER_EPOCH:
        raise InvalidRequest("MemberId can't be empty.")
    validate_id("MemberId", req.member_id)
    if req.instance_id is not None or req.rack_id is not None or req.client_id is not None:
        validate_id("InstanceId", req.instance_id)
        validate_id("RackId", req.rack_id)
        validate_id("ClientId", req.client_id)
    validate_id("ServerAssignor", req.server_assignor)

    if req.member_epoch == JOIN_GROUP_MEMBER_EPOCH:
        if req.rebalance_timeout_ms is None or req.rebalance_timeout_ms == -1:
            raise InvalidRequest("RebalanceTimeoutMs must be provided in first request.")
        if req.owned_topic_partitions is None or req.owned_topic_partitions:
            raise InvalidRequest("TopicPartitions must be empty when (re-)joining.")
        if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
            raise InvalidRequest(
                "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining."
            )
    elif req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        if req.instance_id is None:
            raise InvalidRequest("InstanceId can't be null.")
    elif req.member_epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        raise InvalidRequest("MemberEpoch is invalid.")

    if req.rebalance_timeout_ms is not None and req.rebalance_timeout_ms < -1:
        raise InvalidRequest(
            "RebalanceTimeoutMs must be -1 (unchanged) or a non-negative number of milliseconds, "
            f"got {req.rebalance_timeout_ms}."
        )
    _validate_subscription(req)
    _validate_owned(req)
    _validate_weights(req)
    if req.server_assignor is not None and req.server_assignor not in config.assignors:
        raise UnsupportedAssignor(
            f"ServerAssignor {req.server_assignor} is not supported. "
            f"Supported assignors: {', '.join(config.assignors)}."
        )
    if req.server_assignor == LeaderAssignor.name and req.group_type != CONSUMER_GROUP_TYPE:
        # Leadership is a partition of a consumer group; a Connect group would get it as a
        # connector named after the reserved topic.
        raise UnsupportedAssignor(
            f"ServerAssignor {LeaderAssignor.name} elects a leader in consumer groups only, "
            f"not in {req.group_type} groups."
        )
    if req.subscribed_topic_regex:
        compile_regex(req.subscribed_topic_regex)
    validate_client_assignors(req.client_assignors, req.server_assignor)


#: A member's weight, relative to the others'.
MAX_CAPACITY = 1000


def _validate_weights(req: ConsumerGroupHeartbeat) -> None:
    if req.capacity is not None and not 1 <= req.capacity <= MAX_CAPACITY:
        raise InvalidRequest(f"Capacity must be between 1 and {MAX_CAPACITY}, got {req.capacity}.")
    if req.replicas is not None and not 1 <= req.replicas <= MAX_REPLICAS:
        raise InvalidRequest(f"Replicas must be between 1 and {MAX_REPLICAS}, got {req.replicas}.")


#: int8 in Kafka's schema.
MIN_REASON, MAX_REASON = -128, 127
MAX_CLIENT_ASSIGNORS = 16
MAX_ASSIGNOR_METADATA_BYTES = 1 << 20


def validate_client_assignors(
    assignors: tuple[ClientAssignor, ...] | None, server_assignor: str | None
) -> None:
    """The seed's rules for client-side assignors (KIP-848 for Connect)."""
    if assignors is None:
        return
    if server_assignor is not None and assignors:
        raise InvalidRequest("ServerAssignor and ClientAssignors cannot be used together.")
    if len(assignors) > MAX_CLIENT_ASSIGNORS:
        raise InvalidRequest(
            f"ClientAssignors lists {len(assignors)} assignors; at most {MAX_CLIENT_ASSIGNORS}."
        )
    seen: set[str] = set()
    for a in assignors:
        if not a.name:
            raise InvalidRequest("ClientAssignors contains an assignor with an empty name.")
        validate_id("ClientAssignors.name", a.name)
        if a.name in seen:
            raise InvalidRequest(f"ClientAssignors lists assignor {a.name} twice.")
        seen.add(a.name)
        if a.minimum_version < -1:
            raise InvalidRequest(f"Assignor {a.name}: MinimumVersion must be >= -1, got {a.minimum_version}.")
        if a.maximum_version < 0 or a.maximum_version < a.minimum_version:
            raise InvalidRequest(
                f"Assignor {a.name}: MaximumVersion must be >= 0 and >= MinimumVersion "
                f"({a.minimum_version}), got {a.maximum_version}."
            )
        if not a.minimum_version <= a.version <= a.maximum_version:
            raise InvalidRequest(
                f"Assignor {a.name}: Version {a.version} is outside "
                f"[{a.minimum_version}, {a.maximum_version}]."
            )
        if not MIN_REASON <= a.reason <= MAX_REASON:
            raise InvalidRequest(f"Assignor {a.name}: Reason must be an int8, got {a.reason}.")
        if len(a.metadata) > MAX_ASSIGNOR_METADATA_BYTES:
            raise InvalidRequest(
                f"Assignor {a.name}: Metadata is {len(a.metadata)} bytes; "
                f"at most {MAX_ASSIGNOR_METADATA_BYTES}."
            )


def _validate_subscription(req: ConsumerGroupHeartbeat) -> None:
    names = req.subscribed_topic_names
    if names is not None:
        if len(names) > MAX_SUBSCRIBED_TOPIC_NAMES:
            raise InvalidRequest(
                f"SubscribedTopicNames has {len(names)} names; "
                f"at most {MAX_SUBSCRIBED_TOPIC_NAMES} are allowed."
            )
        for name in names:
            if not name:
                raise InvalidRequest("SubscribedTopicNames contains an empty topic name.")
            if len(name) > MAX_TOPIC_NAME_LENGTH:
                raise InvalidRequest(
                    f"SubscribedTopicNames contains a name longer than {MAX_TOPIC_NAME_LENGTH} characters."
                )
    regex = req.subscribed_topic_regex
    if regex is not None and len(regex) > MAX_REGEX_LENGTH:
        raise InvalidRequest(
            f"SubscribedTopicRegex is longer than {MAX_REGEX_LENGTH} characters ({len(regex)})."
        )


def _validate_owned(req: ConsumerGroupHeartbeat) -> None:
    if req.owned_topic_partitions is None:
        return
    total = 0
    for entry in req.owned_topic_partitions:
        if not entry.topic_id and not entry.topic_name:
            raise InvalidRequest("TopicPartitions entries must name a topic_id or a topic_name.")
        validate_id("TopicPartitions.topic_id", entry.topic_id)
        if len(entry.topic_name) > MAX_TOPIC_NAME_LENGTH:
            raise InvalidRequest(
                f"TopicPartitions.topic_name is longer than {MAX_TOPIC_NAME_LENGTH} characters."
            )
        for partition in entry.partitions:
            if partition < 0:
                raise InvalidRequest(
                    f"TopicPartitions contains a negative partition ({partition}) "
                    f"for topic {entry.topic_id or entry.topic_name}."
                )
        total += len(entry.partitions)
    if total > MAX_OWNED_PARTITIONS:
        raise InvalidRequest(f"TopicPartitions lists {total} partitions; at most {MAX_OWNED_PARTITIONS}.")
