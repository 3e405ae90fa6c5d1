"""Protocol errors raised by the engine.

Each error carries the Kafka-numbered code the shell puts in the response's
`error_code`. The engine raises them before producing any record, so a refused
request never changes stored state.
"""

from __future__ import annotations

from enum import IntEnum


class ErrorCode(IntEnum):
    """Mirror of `regroup.v1.ErrorCode` (a test keeps the two in step)."""

    NONE = 0
    UNKNOWN_SERVER_ERROR = -1
    UNKNOWN_TOPIC_OR_PARTITION = 3
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    ILLEGAL_GENERATION = 22
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REQUEST = 42
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    UNKNOWN_TOPIC_ID = 100
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    INVALID_REGULAR_EXPRESSION = 128
    #: Not an error: the member was chosen to compute the target with its client-side assignor.
    COMPUTE_ASSIGNMENT = 1000
    INVALID_ASSIGNMENT = 1001
    OFFSET_METADATA_TOO_LARGE = 12
    PARTITION_NOT_OWNED = 1002
    #: A MemberStream refused a heartbeat item at one of its limits (nothing was done).
    STREAM_LIMIT_REACHED = 1003
    #: One result alone is larger than a response may be (answered without its largest part).
    MESSAGE_TOO_LARGE = 10
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31


class ApiError(Exception):
    """A request the protocol refuses; `code` goes on the wire with `message`."""

    code: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidRequest(ApiError):
    code = ErrorCode.INVALID_REQUEST


class GroupIdNotFound(ApiError):
    code = ErrorCode.GROUP_ID_NOT_FOUND


class UnknownMemberId(ApiError):
    code = ErrorCode.UNKNOWN_MEMBER_ID


class FencedMemberEpoch(ApiError):
    code = ErrorCode.FENCED_MEMBER_EPOCH


class StaleMemberEpoch(ApiError):
    code = ErrorCode.STALE_MEMBER_EPOCH


class FencedInstanceId(ApiError):
    code = ErrorCode.FENCED_INSTANCE_ID


class UnreleasedInstanceId(ApiError):
    code = ErrorCode.UNRELEASED_INSTANCE_ID


class UnsupportedAssignor(ApiError):
    code = ErrorCode.UNSUPPORTED_ASSIGNOR


class GroupMaxSizeReached(ApiError):
    code = ErrorCode.GROUP_MAX_SIZE_REACHED


class InvalidRegularExpression(ApiError):
    code = ErrorCode.INVALID_REGULAR_EXPRESSION


class InvalidAssignment(ApiError):
    """An installed client-side assignment breaks an invariant; nothing changed."""

    code = ErrorCode.INVALID_ASSIGNMENT


class NonEmptyGroup(ApiError):
    code = ErrorCode.NON_EMPTY_GROUP


class UnknownServerError(ApiError):
    code = ErrorCode.UNKNOWN_SERVER_ERROR


class InvalidTopic(ApiError):
    code = ErrorCode.INVALID_TOPIC_EXCEPTION


class TopicAlreadyExists(ApiError):
    code = ErrorCode.TOPIC_ALREADY_EXISTS


class InvalidPartitions(ApiError):
    code = ErrorCode.INVALID_PARTITIONS


class UnknownTopicOrPartition(ApiError):
    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


class UnknownTopicId(ApiError):
    code = ErrorCode.UNKNOWN_TOPIC_ID


class CoordinatorNotAvailable(ApiError):
    """Raised by the shell when the store fails; the operation changed nothing.

    For a heartbeat whose member's session the shell renewed all the same
    (`liveness.renewed_session`), `renewed_epoch` is the epoch it was renewed at
    and `session_timeout_ms` how long the session now runs.
    """

    code = ErrorCode.COORDINATOR_NOT_AVAILABLE
    renewed_epoch: int | None = None
    session_timeout_ms: int = 0

    def renewing(self, member_epoch: int, session_timeout_ms: int) -> CoordinatorNotAvailable:
        """The same refusal, saying that the member's session was renewed."""
        renewed = CoordinatorNotAvailable(self.message)
        renewed.renewed_epoch = member_epoch
        renewed.session_timeout_ms = session_timeout_ms
        return renewed


class NotCoordinator(ApiError):
    """Raised by the shell when another replica owns the group; `coordinator_address`
    is that replica's address when known (it goes in the response)."""

    code = ErrorCode.NOT_COORDINATOR
    coordinator_address: str = ""


class CoordinatorLoadInProgress(ApiError):
    """Raised by the shell while it loads the groups of a shard it just acquired."""

    code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS


class TopicAuthorizationFailed(ApiError):
    code = ErrorCode.TOPIC_AUTHORIZATION_FAILED


class GroupAuthorizationFailed(ApiError):
    code = ErrorCode.GROUP_AUTHORIZATION_FAILED


class ClusterAuthorizationFailed(ApiError):
    code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
