"""The client's exception hierarchy: every error code has its class, gRPC failures are
wrapped with their address and cause, and TLS mismatches are named with their fix."""

from __future__ import annotations

import grpc
import pytest

from regroup.client import (
    AuthorizationFailed,
    Fenced,
    GroupError,
    InvalidRequest,
    NotCoordinator,
    RegroupError,
    RetriableError,
    ServerError,
    TimedOut,
    TopicError,
    Unavailable,
)
from regroup.client.errors import (
    ERROR_CLASSES,
    TransportMismatch,
    error_for,
    from_rpc_error,
    security_of,
    transport_hint,
    transport_mismatch,
)
from regroup.client.tls import TlsConfig
from regroup.v1 import common_pb2

#: What gRPC (1.x, BoringSSL) reports for each failed connection, as measured against a
#: real server (tests/integration/test_tls.py checks the same end to end).
SOCKET_CLOSED = "failed to connect to all addresses; last error: UNAVAILABLE: ipv4:127.0.0.1:1: Socket closed"
PLAIN_SERVER = (
    "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: Tls handshake failed "
    "(TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL: error:100000f7:SSL routines:OPENSSL_internal:"
    "WRONG_VERSION_NUMBER: Invalid certificate verification context: OK"
)
UNTRUSTED = (
    "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: Tls handshake failed "
    "(TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL: error:1000007d:SSL routines:OPENSSL_internal:"
    "CERTIFICATE_VERIFY_FAILED: unable to get local issuer certificate: OK"
)
WRONG_NAME = (
    "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: Custom verification "
    "check failed with error: UNAUTHENTICATED: Hostname Verification Check failed."
)
REFUSED = (
    "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: "
    "Failed to connect to remote host: Connection refused"
)


def rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details=details)


def test_every_error_code_has_its_class() -> None:
    codes = set(common_pb2.ErrorCode.values())
    assert set(ERROR_CLASSES) == codes, "a new ErrorCode needs its class in ERROR_CLASSES"
    not_errors = {common_pb2.NONE, common_pb2.COMPUTE_ASSIGNMENT}
    for code in codes - not_errors:
        error = error_for(code, "why")
        assert type(error) is not RegroupError, common_pb2.ErrorCode.Name(code)
        assert (error.code, error.message, error.name) == (code, "why", common_pb2.ErrorCode.Name(code))


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        (common_pb2.COORDINATOR_NOT_AVAILABLE, Unavailable),
        (common_pb2.COORDINATOR_LOAD_IN_PROGRESS, Unavailable),
        (common_pb2.NOT_COORDINATOR, NotCoordinator),
        (common_pb2.FENCED_MEMBER_EPOCH, Fenced),
        (common_pb2.STALE_MEMBER_EPOCH, Fenced),
        (common_pb2.UNKNOWN_MEMBER_ID, Fenced),
        (common_pb2.GROUP_AUTHORIZATION_FAILED, AuthorizationFailed),
        (common_pb2.TOPIC_AUTHORIZATION_FAILED, AuthorizationFailed),
        (common_pb2.INVALID_REQUEST, InvalidRequest),
        (common_pb2.INVALID_REGULAR_EXPRESSION, InvalidRequest),
        (common_pb2.GROUP_ID_NOT_FOUND, GroupError),
        (common_pb2.GROUP_MAX_SIZE_REACHED, GroupError),
        (common_pb2.TOPIC_ALREADY_EXISTS, TopicError),
        (common_pb2.UNKNOWN_SERVER_ERROR, ServerError),
    ],
)
def test_codes_map_to_the_class_a_caller_catches(code: int, cls: type[RegroupError]) -> None:
    error = error_for(code, "m")
    assert isinstance(error, cls) and isinstance(error, RegroupError)
    assert error.retriable == issubclass(cls, RetriableError)
    assert str(error) == f"{common_pb2.ErrorCode.Name(code)}: m"


def test_a_regroup_error_is_built_as_before() -> None:
    error = RegroupError(common_pb2.GROUP_ID_NOT_FOUND, "no group g")
    assert (error.code, error.name, error.message, error.status) == (
        common_pb2.GROUP_ID_NOT_FOUND,
        "GROUP_ID_NOT_FOUND",
        "no group g",
        None,
    )
    assert str(error) == "GROUP_ID_NOT_FOUND: no group g"
    assert str(RegroupError(common_pb2.NOT_COORDINATOR)) == "NOT_COORDINATOR"


def test_a_transport_failure_is_unavailable_with_its_address_and_cause() -> None:
    cause = rpc_error(grpc.StatusCode.UNAVAILABLE, REFUSED)
    error = from_rpc_error(cause, address="127.0.0.1:1", security="plain text")
    assert isinstance(error, Unavailable) and error.retriable
    assert error.address == "127.0.0.1:1" and error.status == grpc.StatusCode.UNAVAILABLE
    assert error.code == common_pb2.COORDINATOR_NOT_AVAILABLE
    assert "cannot reach 127.0.0.1:1" in str(error) and "Connection refused" in str(error)
    assert "perhaps" not in str(error)  # nothing listens: no TLS advice
    late = from_rpc_error(rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded"), address="h:1")
    assert isinstance(late, Unavailable) and "no answer in time from h:1" in str(late)


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (grpc.StatusCode.UNAUTHENTICATED, AuthorizationFailed),
        (grpc.StatusCode.PERMISSION_DENIED, AuthorizationFailed),
        (grpc.StatusCode.INVALID_ARGUMENT, InvalidRequest),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, InvalidRequest),
        (grpc.StatusCode.UNIMPLEMENTED, ServerError),
        (grpc.StatusCode.INTERNAL, ServerError),
    ],
)
def test_other_statuses_have_their_class(status: grpc.StatusCode, cls: type[RegroupError]) -> None:
    error = from_rpc_error(rpc_error(status, "details"), address="h:1")
    assert type(error) is cls and error.status == status and not error.retriable
    assert f"{status.name} from h:1: details" in str(error)


def test_tls_mismatches_are_named_with_the_option_to_set() -> None:
    assert security_of(None) == "plain text"
    assert security_of(TlsConfig(ca=b"x")) == "tls"
    assert security_of(TlsConfig(cert=b"c", key=b"k")) == "mtls"
    cases = [
        (SOCKET_CLOSED, "plain text", TransportMismatch.SERVER_WANTS_TLS, "tls=TlsConfig(ca="),
        (SOCKET_CLOSED, "tls", TransportMismatch.SERVER_WANTS_CLIENT_CERTIFICATE, "cert=..., key="),
        (SOCKET_CLOSED, "mtls", TransportMismatch.CLIENT_CERTIFICATE_REFUSED, "client CA"),
        (PLAIN_SERVER, "tls", TransportMismatch.SERVER_SPEAKS_PLAIN_TEXT, "leave tls= out"),
        (UNTRUSTED, "tls", TransportMismatch.SERVER_CERTIFICATE_UNTRUSTED, "ca="),
        (WRONG_NAME, "mtls", TransportMismatch.SERVER_NAME_MISMATCH, "server_name_override"),
    ]
    for details, security, mismatch, fix in cases:
        assert transport_mismatch(details, security) == mismatch  # type: ignore[arg-type]
        hint = transport_hint(details, security)  # type: ignore[arg-type]
        assert hint is not None and mismatch.value in hint and fix in hint
    # Nothing is guessed when the client does not know how its channel speaks, nor
    # for a failure that is no handshake.
    assert transport_mismatch(SOCKET_CLOSED, None) is None
    assert transport_mismatch(REFUSED, "tls") is None
    assert transport_mismatch(PLAIN_SERVER, "plain text") is None
    # The CLI passes its own advice.
    cli = {m: f"--flag-for-{m.name}" for m in TransportMismatch}
    assert transport_hint(SOCKET_CLOSED, "plain text", cli) == (
        "perhaps the server speaks TLS only: --flag-for-SERVER_WANTS_TLS"
    )


def test_the_hint_is_in_the_message_of_the_wrapped_error() -> None:
    error = from_rpc_error(
        rpc_error(grpc.StatusCode.UNAVAILABLE, SOCKET_CLOSED), address="db:50051", security="plain text"
    )
    assert str(error).endswith(
        "perhaps the server speaks TLS only: pass tls=TlsConfig(ca=...), the CA that signed its certificate"
    )


def test_timed_out_is_a_timeout_error_too() -> None:
    error = TimedOut(common_pb2.NONE, "no partitions within 1 s: no such topic: orders")
    assert isinstance(error, TimeoutError) and isinstance(error, RegroupError)
    assert str(error) == "no partitions within 1 s: no such topic: orders"
    with pytest.raises(TimeoutError):
        raise error
