"""Errors raised by the client, and how the member treats each error code.

Every error the client raises is a `RegroupError`, with `.code` (a `regroup.v1.ErrorCode`
value), `.name` (its name) and `.message`. Its class says what kind of trouble it is,
so that callers catch a class rather than compare names:

    RegroupError
    ├── RetriableError        the client retried it within its deadline; try again later
    │   ├── Unavailable       the coordinator cannot be reached or cannot answer now
    │   └── NotCoordinator    the address does not coordinate the group
    ├── Fenced                the member's epoch or ownership is no longer current
    ├── AuthorizationFailed   the caller's principal or token is refused
    ├── InvalidRequest        the request itself is wrong; sending it again will not help
    ├── GroupError            the group's state refuses it (not found, full, not empty)
    ├── TopicError            no such topic, or one of that name exists already
    ├── ServerError           the server failed, or is too old for the call
    ├── TimedOut              join() or wait_for_assignment() ran out of time
    └── CommitFailed          some partitions of a commit were refused

A gRPC failure (a `grpc.aio.AioRpcError` or `grpc.RpcError`) is raised as one of these
too, `from` it (`__cause__`), with `.status` its gRPC status code: UNAVAILABLE and
deadlines as `Unavailable` naming the address, UNAUTHENTICATED and PERMISSION_DENIED
as `AuthorizationFailed`, and so on (`from_rpc_error`). When the failure looks like a
TLS mismatch (plain text to a TLS server, TLS without a client certificate to an mTLS
one), the message says so and what to set (`transport_hint`).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import grpc

from regroup.client.tls import TlsConfig
from regroup.v1 import common_pb2

ErrorCode = int


class RegroupError(Exception):
    """A request the coordinator refused: `code` is a `regroup.v1.ErrorCode` value.

    `status` is the gRPC status of a call that failed below the protocol (None for a
    refusal the coordinator answered)."""

    #: Whether the client retries this kind of error by itself, within its deadline.
    retriable: ClassVar[bool] = False

    def __init__(self, code: ErrorCode, message: str = "", *, status: grpc.StatusCode | None = None) -> None:
        self.code = code
        self.message = message
        self.status = status
        if code == common_pb2.NONE:
            text = message  # not a refusal (a wait that timed out): the message says it all
        else:
            text = f"{error_name(code)}: {message}" if message else error_name(code)
        super().__init__(text)

    @property
    def name(self) -> str:
        return error_name(self.code)


class RetriableError(RegroupError):
    """The coordinator could not take the request now; the client already retried it
    (after `retry_backoff_ms`, doubling) until its deadline."""

    retriable = True


class Unavailable(RetriableError):
    """The coordinator is unreachable (a gRPC UNAVAILABLE or deadline), cannot reach its
    store (COORDINATOR_NOT_AVAILABLE), or is loading the group (COORDINATOR_LOAD_IN_PROGRESS).
    `address` is the address the client called, when it knows it."""

    def __init__(
        self,
        code: ErrorCode,
        message: str = "",
        *,
        status: grpc.StatusCode | None = None,
        address: str | None = None,
    ) -> None:
        super().__init__(code, message, status=status)
        self.address = address


class NotCoordinator(RetriableError):
    """The replica called does not coordinate the group (NOT_COORDINATOR), and following
    it to its coordinator did not succeed within the deadline."""


class Fenced(RegroupError):
    """The member's epoch or ownership is no longer current (FENCED_MEMBER_EPOCH,
    STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, PARTITION_NOT_OWNED...):
    another member may own its partitions now. The member rejoins by itself."""


class AuthorizationFailed(RegroupError):
    """The caller's principal lacks a permission (TOPIC_, GROUP_ or
    CLUSTER_AUTHORIZATION_FAILED), or its token was refused (gRPC UNAUTHENTICATED)."""


class InvalidRequest(RegroupError):
    """The request is wrong and sending it again will not help: INVALID_REQUEST (the
    message names the field), a regex that does not compile, a bad topic name or
    partition count, an unknown assignor..."""


class GroupError(RegroupError):
    """The group's state refuses the request: GROUP_ID_NOT_FOUND, GROUP_MAX_SIZE_REACHED,
    NON_EMPTY_GROUP, UNRELEASED_INSTANCE_ID."""


class TopicError(RegroupError):
    """UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID or TOPIC_ALREADY_EXISTS."""


class ServerError(RegroupError):
    """The server failed (UNKNOWN_SERVER_ERROR, gRPC INTERNAL) or does not have the call
    (gRPC UNIMPLEMENTED: an older server)."""


class TimedOut(RegroupError, TimeoutError):
    """`join(timeout=)` or `wait_for_assignment(timeout=)` gave up; the message says why
    nothing arrived (the coordinator unreachable, no such topic, nothing assigned yet).
    Also a builtin `TimeoutError`. `code` is the refusal behind it, if any (NONE otherwise)."""


class CommitFailed(RegroupError):
    """Some partitions of an offset commit were refused; `partitions` says why, per partition
    (PARTITION_NOT_OWNED: the member no longer owns it, another member may)."""

    def __init__(self, partitions: dict[Any, RegroupError]) -> None:
        self.partitions = partitions
        first = next(iter(partitions.values()))
        super().__init__(first.code, f"{len(partitions)} partition(s) refused, e.g. {first}")


_C = common_pb2

#: The class of each error code. Every value of `regroup.v1.ErrorCode` is here
#: (tests/unit/client/test_errors.py checks it): NONE and COMPUTE_ASSIGNMENT are no
#: errors, and stay plain RegroupErrors should one ever be raised.
ERROR_CLASSES: Mapping[ErrorCode, type[RegroupError]] = {
    _C.NONE: RegroupError,
    _C.COMPUTE_ASSIGNMENT: RegroupError,
    _C.COORDINATOR_NOT_AVAILABLE: Unavailable,
    _C.COORDINATOR_LOAD_IN_PROGRESS: Unavailable,
    _C.NOT_COORDINATOR: NotCoordinator,
    _C.FENCED_MEMBER_EPOCH: Fenced,
    _C.STALE_MEMBER_EPOCH: Fenced,
    _C.UNKNOWN_MEMBER_ID: Fenced,
    _C.FENCED_INSTANCE_ID: Fenced,
    _C.ILLEGAL_GENERATION: Fenced,
    _C.PARTITION_NOT_OWNED: Fenced,
    _C.TOPIC_AUTHORIZATION_FAILED: AuthorizationFailed,
    _C.GROUP_AUTHORIZATION_FAILED: AuthorizationFailed,
    _C.CLUSTER_AUTHORIZATION_FAILED: AuthorizationFailed,
    _C.INVALID_REQUEST: InvalidRequest,
    _C.INVALID_REGULAR_EXPRESSION: InvalidRequest,
    _C.INVALID_TOPIC_EXCEPTION: InvalidRequest,
    _C.INVALID_GROUP_ID: InvalidRequest,
    _C.INVALID_PARTITIONS: InvalidRequest,
    _C.INVALID_ASSIGNMENT: InvalidRequest,
    _C.UNSUPPORTED_ASSIGNOR: InvalidRequest,
    _C.OFFSET_METADATA_TOO_LARGE: InvalidRequest,
    # One result does not fit in a response: ask for less (page_size).
    _C.MESSAGE_TOO_LARGE: InvalidRequest,
    _C.GROUP_ID_NOT_FOUND: GroupError,
    _C.GROUP_MAX_SIZE_REACHED: GroupError,
    _C.NON_EMPTY_GROUP: GroupError,
    # The member retries it by itself (the previous incarnation has not left yet).
    _C.UNRELEASED_INSTANCE_ID: GroupError,
    _C.UNKNOWN_TOPIC_OR_PARTITION: TopicError,
    _C.UNKNOWN_TOPIC_ID: TopicError,
    _C.TOPIC_ALREADY_EXISTS: TopicError,
    _C.UNKNOWN_SERVER_ERROR: ServerError,
    # The member sends that heartbeat again with the unary RPC; never raised.
    _C.STREAM_LIMIT_REACHED: ServerError,
}


def error_for(code: ErrorCode, message: str = "", *, address: str | None = None) -> RegroupError:
    """The error of its class for a refusal the coordinator answered with `code`."""
    cls = ERROR_CLASSES.get(code, RegroupError)
    if cls is Unavailable:
        return Unavailable(code, message, address=address)
    return cls(code, message)


#: gRPC statuses by the class they are raised as, and the code they carry.
_STATUS_CLASSES: Mapping[grpc.StatusCode, tuple[type[RegroupError], ErrorCode]] = {
    grpc.StatusCode.UNAVAILABLE: (Unavailable, _C.COORDINATOR_NOT_AVAILABLE),
    grpc.StatusCode.DEADLINE_EXCEEDED: (Unavailable, _C.COORDINATOR_NOT_AVAILABLE),
    grpc.StatusCode.CANCELLED: (Unavailable, _C.COORDINATOR_NOT_AVAILABLE),
    grpc.StatusCode.ABORTED: (Unavailable, _C.COORDINATOR_NOT_AVAILABLE),
    grpc.StatusCode.UNAUTHENTICATED: (AuthorizationFailed, _C.UNKNOWN_SERVER_ERROR),
    grpc.StatusCode.PERMISSION_DENIED: (AuthorizationFailed, _C.UNKNOWN_SERVER_ERROR),
    grpc.StatusCode.INVALID_ARGUMENT: (InvalidRequest, _C.INVALID_REQUEST),
    grpc.StatusCode.OUT_OF_RANGE: (InvalidRequest, _C.INVALID_REQUEST),
    grpc.StatusCode.FAILED_PRECONDITION: (InvalidRequest, _C.INVALID_REQUEST),
    # The request is larger than the server's max_message_bytes.
    grpc.StatusCode.RESOURCE_EXHAUSTED: (InvalidRequest, _C.INVALID_REQUEST),
}


def from_rpc_error(
    error: grpc.RpcError, *, address: str | None = None, security: Security | None = None
) -> RegroupError:
    """The RegroupError for a failed gRPC call to `address`; raise it `from error`.

    `security` says how the channel was made (`security_of`; None when the client cannot
    tell, as with a channel or channel_factory of the application's): the message then
    adds `transport_hint`'s advice when the failure looks like a TLS mismatch."""
    status, details = status_of(error)
    cls, code = _STATUS_CLASSES.get(status, (ServerError, _C.UNKNOWN_SERVER_ERROR))
    where = address or "the coordinator"
    if cls is Unavailable:
        verb = "no answer in time from" if status == grpc.StatusCode.DEADLINE_EXCEEDED else "cannot reach"
        message = f"{verb} {where} ({status.name}: {details})"
        hint = transport_hint(details, security)
        if hint is not None:
            message += f"; {hint}"
        return Unavailable(code, message, status=status, address=address)
    return cls(code, f"{status.name} from {where}: {details}", status=status)


def status_of(error: grpc.RpcError) -> tuple[grpc.StatusCode, str]:
    """The status code and details of a failed call: a `grpc.aio.AioRpcError`, or a
    blocking call's error (a `grpc.Call` too); UNKNOWN for any other RpcError."""
    if isinstance(error, grpc.aio.AioRpcError | grpc.Call):
        return error.code(), error.details() or str(error)
    return grpc.StatusCode.UNKNOWN, str(error)


@dataclass(frozen=True)
class Channels:
    """Where a client's channels go and how they speak, for the errors of its calls:
    the bootstrap address (None when the client was given a channel), and how the
    bootstrap channel and the channels to followed coordinators speak (None when the
    application makes them: a channel, or a channel_factory)."""

    bootstrap: str | None
    bootstrap_security: Security | None
    followed_security: Security | None

    @classmethod
    def of(cls, target: object, tls: TlsConfig | None, channel_factory: object) -> Channels:
        """For a client built with `target` (an address or a channel), `tls` and `channel_factory`."""
        ours = channel_factory is None
        address = target if isinstance(target, str) else None
        bootstrap = security_of(tls) if ours and address is not None else None
        return cls(address, bootstrap, security_of(tls) if ours else None)

    def error(self, error: grpc.RpcError, followed: str | None = None) -> RegroupError:
        """The RegroupError for `error`, a call to `followed` (None: the bootstrap address)."""
        if followed is None:
            return from_rpc_error(error, address=self.bootstrap, security=self.bootstrap_security)
        return from_rpc_error(error, address=followed, security=self.followed_security)


# -- TLS mismatches ------------------------------------------------------------

#: How a channel speaks: plain text, TLS, or TLS with a client certificate.
Security = Literal["plain text", "tls", "mtls"]


def security_of(tls: TlsConfig | None) -> Security:
    """How a channel made with `tls` (None: an insecure one) speaks."""
    if tls is None:
        return "plain text"
    return "mtls" if tls.cert is not None else "tls"


class TransportMismatch(enum.Enum):
    """What a failed connection says about the client's and the server's TLS settings."""

    #: A plain text client and a server that speaks TLS only: the server closes the socket.
    SERVER_WANTS_TLS = "the server speaks TLS only"
    #: TLS without a client certificate to a server that requires one (mTLS).
    SERVER_WANTS_CLIENT_CERTIFICATE = "the server requires a client certificate (mTLS)"
    #: A client certificate the server does not accept (not signed by its client CA).
    CLIENT_CERTIFICATE_REFUSED = "the server did not accept the client certificate"
    #: TLS to a server that speaks plain text.
    SERVER_SPEAKS_PLAIN_TEXT = "the server speaks plain text, not TLS"
    #: The server's certificate is not signed by a CA the client trusts.
    SERVER_CERTIFICATE_UNTRUSTED = "the server's certificate is not signed by a CA the client trusts"
    #: The server's certificate does not name the host dialled.
    SERVER_NAME_MISMATCH = "the server's certificate does not name the host dialled"


#: What to set in the Python client for each mismatch (the CLI has its flags).
PYTHON_FIXES: Mapping[TransportMismatch, str] = {
    TransportMismatch.SERVER_WANTS_TLS: "pass tls=TlsConfig(ca=...), the CA that signed its certificate",
    TransportMismatch.SERVER_WANTS_CLIENT_CERTIFICATE: "pass TlsConfig(cert=..., key=...) as well",
    TransportMismatch.CLIENT_CERTIFICATE_REFUSED: (
        "give TlsConfig a certificate signed by the server's client CA (REGROUP_TLS_CLIENT_CA)"
    ),
    TransportMismatch.SERVER_SPEAKS_PLAIN_TEXT: "leave tls= out",
    TransportMismatch.SERVER_CERTIFICATE_UNTRUSTED: (
        "pass TlsConfig(ca=...), the CA that signed its certificate"
    ),
    TransportMismatch.SERVER_NAME_MISMATCH: (
        "dial a name the certificate has, or set TlsConfig(server_name_override=...)"
    ),
}


def transport_mismatch(details: str, security: Security | None) -> TransportMismatch | None:
    """The TLS mismatch a failed connection's gRPC details (`AioRpcError.details()`)
    point to, given how the channel spoke (None when unknown: no guess is made).

    gRPC reports a server that closed the socket during the handshake as "Socket
    closed", whatever the cause; it means a TLS mismatch when the client spoke plain
    text (the server wanted TLS) or presented no or a refused client certificate."""
    if security is None:
        return None
    if "Socket closed" in details:
        return {
            "plain text": TransportMismatch.SERVER_WANTS_TLS,
            "tls": TransportMismatch.SERVER_WANTS_CLIENT_CERTIFICATE,
            "mtls": TransportMismatch.CLIENT_CERTIFICATE_REFUSED,
        }[security]
    if security == "plain text":
        return None
    if "WRONG_VERSION_NUMBER" in details:
        return TransportMismatch.SERVER_SPEAKS_PLAIN_TEXT
    if "CERTIFICATE_VERIFY_FAILED" in details:
        return TransportMismatch.SERVER_CERTIFICATE_UNTRUSTED
    if "Hostname Verification" in details:
        return TransportMismatch.SERVER_NAME_MISMATCH
    return None


def transport_hint(
    details: str, security: Security | None, fixes: Mapping[TransportMismatch, str] = PYTHON_FIXES
) -> str | None:
    """A sentence saying what a failed connection probably means and what to set, or
    None: "perhaps the server speaks TLS only: pass tls=TlsConfig(ca=...), ...". `fixes`
    gives the advice per mismatch (the CLI passes its flags)."""
    mismatch = transport_mismatch(details, security)
    if mismatch is None:
        return None
    return f"perhaps {mismatch.value}: {fixes[mismatch]}"


def error_name(code: ErrorCode) -> str:
    try:
        return common_pb2.ErrorCode.Name(code)  # type: ignore[arg-type]
    except ValueError:
        return f"ERROR_{code}"


# The member's partitions are no longer its own: give them up and rejoin with epoch 0.
FENCING_CODES = frozenset(
    {common_pb2.FENCED_MEMBER_EPOCH, common_pb2.UNKNOWN_MEMBER_ID, common_pb2.STALE_MEMBER_EPOCH}
)

# The coordinator cannot answer right now: back off with jitter and retry the full request.
# UNRELEASED_INSTANCE_ID means the previous incarnation of a static member has not left yet.
RETRIABLE_CODES = frozenset(
    {
        common_pb2.COORDINATOR_NOT_AVAILABLE,
        common_pb2.NOT_COORDINATOR,
        common_pb2.COORDINATOR_LOAD_IN_PROGRESS,
        common_pb2.UNRELEASED_INSTANCE_ID,
        common_pb2.UNKNOWN_SERVER_ERROR,
    }
)

# gRPC statuses that say nothing about the request itself (transport, deadline, a
# server bug, overload): the request is retried in full after a backoff.
# INVALID_ARGUMENT, UNIMPLEMENTED, PERMISSION_DENIED, UNAUTHENTICATED and the like
# will fail again and are raised instead.
RETRIABLE_STATUSES = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.ABORTED,
    }
)
