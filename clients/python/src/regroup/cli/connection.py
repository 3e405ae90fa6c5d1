"""How the command talks to the coordinator: one blocking channel to the bootstrap
address, and the client's own routing for group calls (a group answered NOT_COORDINATOR
is asked again where the answer says; routing.py).

Every gRPC failure becomes a CliError with the exit code scripts can act on (exits.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc

from regroup.cli.diagnose import hint
from regroup.cli.exits import BAD_TOKEN, ERROR, TIMEOUT, UNREACHABLE, UNSUPPORTED, CliError
from regroup.client.routing import CoordinatorRouter, GroupCall, drive_blocking, routed, single
from regroup.client.tls import TlsConfig, blocking_connector
from regroup.v1 import admin_pb2, common_pb2, coordinator_pb2

T = TypeVar("T")

#: The address `make run` serves on (README.md), as the docs' examples assume.
DEFAULT_ADDRESS = "127.0.0.1:50051"


@dataclass(frozen=True)
class Target:
    """Where and how to connect, from the command line and the environment."""

    address: str = DEFAULT_ADDRESS
    tls: TlsConfig | None = None
    token: str | None = None
    #: Bounds each call, the retries of a group call that follows its coordinator included.
    timeout: float = 10.0


def rpc_error(err: grpc.RpcError, what: str, address: str, target: Target | None = None) -> CliError:
    """The CliError for a failed call: unreachable (with what to change when the TLS options
    do not fit the server's), timed out, bad token, unsupported, or other."""
    code = err.code() if isinstance(err, grpc.Call) else None
    details = (err.details() if isinstance(err, grpc.Call) else None) or str(err)
    if code == grpc.StatusCode.UNAVAILABLE:
        why = hint(address, details, target.tls if target is not None else None)
        return CliError(
            UNREACHABLE,
            f"cannot reach the coordinator at {address}: " + (f"{why} ({details})" if why else details),
        )
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return CliError(TIMEOUT, f"{what}: no answer from {address} in time ({details})")
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return CliError(UNSUPPORTED, f"the coordinator at {address} does not support {what} yet")
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return CliError(BAD_TOKEN, bad_token(address, details, target))
    name = code.name if code is not None else "error"
    return CliError(ERROR, f"{what} failed: {name}: {details}")


def bad_token(address: str, details: str, target: Target | None) -> str:
    """What an UNAUTHENTICATED answer says, and where the token came from (never the token)."""
    sent = target is not None and target.token is not None
    if not sent:
        return f"the coordinator at {address} wants a token ({details}): set REGROUP_TOKEN or --token-file"
    return (
        f"the coordinator at {address} did not accept the token ({details}): "
        "check REGROUP_TOKEN or the file of --token-file"
    )


class Connection:
    """A channel to the bootstrap address, the router for group calls, and the calls."""

    def __init__(self, target: Target) -> None:
        self.target = target
        connect = blocking_connector(target.tls)
        self._connect = connect
        self._channel = connect(target.address)
        self.router: CoordinatorRouter[grpc.Channel] = CoordinatorRouter(
            self._channel, bootstrap_address=target.address, connect=connect, token=target.token
        )

    def close(self) -> None:
        for channel in self.router.take_channels():
            channel.close()
        self._channel.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def metadata(self) -> tuple[tuple[str, str], ...] | None:
        return self.router.metadata()

    def admin(self, rpc: str, request: Any) -> Any:
        """A GroupAdmin call that is not about a group (topics, listings)."""
        try:
            return getattr(self.router.bootstrap.admin, rpc)(
                request, timeout=self.target.timeout, metadata=self.metadata()
            )
        except grpc.RpcError as err:
            raise rpc_error(err, rpc, self.target.address, self.target) from None

    def pages(self, rpc: str, request: Any, items: Callable[[Any], Sequence[T]]) -> list[T]:
        """Every page of a listing (ListGroups, DescribeTopics): AIP-158 page tokens."""
        out: list[T] = []
        while True:
            response = self.admin(rpc, request)
            if response.error_code != common_pb2.NONE:
                raise CliError(ERROR, f"{rpc}: {error_name(response.error_code)}: {response.error_message}")
            out += items(response)
            if not response.next_page_token or response.next_page_token == request.page_token:
                return out
            request.page_token = response.next_page_token

    def group(self, call: GroupCall) -> Any:
        """A call about groups, sent to each group's coordinator (routing.py)."""
        steps = routed(self.router, call, timeout=self.target.timeout, backoff_ms=100, backoff_max_ms=1000)
        try:
            return drive_blocking(self.router, steps)
        except grpc.RpcError as err:
            raise rpc_error(err, call.rpc, self.target.address, self.target) from None

    def group_admin(self, rpc: str, group_id: str, request: Any) -> Any:
        """A GroupAdmin call about one group, whose response has error_code and coordinator_address."""
        return self.group(single("admin", rpc, group_id, request))

    def describe_groups(self, group_ids: Sequence[str]) -> list[admin_pb2.DescribedGroup]:
        call = GroupCall(
            "admin",
            "DescribeGroups",
            tuple(group_ids),
            lambda ids: admin_pb2.DescribeGroupsRequest(group_ids=ids),
            lambda r: r.groups,
            lambda groups: admin_pb2.DescribeGroupsResponse(groups=groups),
        )
        return list(self.group(call).groups)

    def delete_groups(self, group_ids: Sequence[str]) -> list[admin_pb2.DeleteGroupsResponse.Result]:
        call = GroupCall(
            "admin",
            "DeleteGroups",
            tuple(group_ids),
            lambda ids: admin_pb2.DeleteGroupsRequest(group_ids=ids),
            lambda r: r.results,
            lambda results: admin_pb2.DeleteGroupsResponse(results=results),
        )
        return list(self.group(call).results)

    def fetch_offsets(self, group_id: str) -> coordinator_pb2.OffsetFetchResponse:
        """Every committed offset of the group, fetched as an admin (no member, epoch -1)."""
        request = coordinator_pb2.OffsetFetchRequest(group_id=group_id, member_id="", member_epoch=-1)
        response: coordinator_pb2.OffsetFetchResponse = self.group(
            single("coordinator", "OffsetFetch", group_id, request)
        )
        return response

    def watch(self, request: admin_pb2.WatchGroupRequest, address: str | None = None) -> Watch:
        """Opens GroupAdmin.WatchGroup at `address` (default: the bootstrap one)."""
        if address is None or address == self.target.address:
            stub, where = self.router.bootstrap.admin, self.target.address
        else:
            self.router.follow(request.group_id, address)
            stub, where = self.router.route(request.group_id).admin, address
        # No deadline: the stream lasts until the user stops it.
        return Watch(stub.WatchGroup(request, metadata=self.metadata()), where, self.target)


class Watch:
    """An open WatchGroup stream: iterate for its messages; `cancel()` ends it."""

    def __init__(self, call: Any, address: str, target: Target) -> None:
        self._call = call
        self.address = address
        self._target = target

    def __iter__(self) -> Iterator[admin_pb2.WatchGroupResponse]:
        try:
            yield from self._call
        except grpc.RpcError as err:
            if isinstance(err, grpc.Call) and err.code() == grpc.StatusCode.CANCELLED:
                return
            raise rpc_error(err, "WatchGroup", self.address, self._target) from None

    def cancel(self) -> None:
        self._call.cancel()


def error_name(code: int) -> str:
    try:
        return common_pb2.ErrorCode.Name(code)  # type: ignore[arg-type]
    except ValueError:
        return f"ERROR_{code}"
