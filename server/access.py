"""Authentication and authorisation of calls: who is calling, and may they.

The principal of a call (see "Access control" in the README):

1. a call forwarded by another replica under mTLS carries `regroup-principal`: the
   principal of the call at the replica it reached first. It is believed only when the
   caller's own certificate principal is granted `forward` on the cluster; otherwise
   the call is refused with CLUSTER_AUTHORIZATION_FAILED (someone claims to be a
   replica). Without mTLS a replica has no identity to prove, so it does not send the
   header: the caller's token goes along and is checked again by the owner;
2. else a bearer token (`authorization: Bearer <token>`) found in the tokens file; a
   token that is not there is refused with UNAUTHENTICATED (a typo must not quietly
   turn a client into User:ANONYMOUS);
3. else the client certificate's first subject alternative name, or its common name,
   as `User:<name>`;
4. else User:ANONYMOUS.

Without an ACL file every call is allowed; without an ACL file and a tokens file the
principal is not even looked at (today's behaviour, at no cost).

`RULES` says, for every RPC of both services, the operation it needs on which
resource. `service.internal_errors` applies the `request` rules before a handler
runs (one refusal for the whole call); handlers whose requests hold several groups
or topics check each with `allowed()` (one result per item, or a filtered listing).
tests/unit/server/test_access.py checks that every RPC in the proto has a rule.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import structlog

from regroup.reconciler.errors import (
    ApiError,
    ClusterAuthorizationFailed,
    GroupAuthorizationFailed,
    TopicAuthorizationFailed,
)
from regroup.reconciler.subscription import stored_regex

from .aclfile import (
    ACL_FILE,
    DEFAULT_CHECK_INTERVAL_S,
    TOKENS_FILE,
    Tokens,
    WatchedFile,
    load_acl,
    load_tokens,
)
from .authz import ANONYMOUS, CLUSTER, Authorizer, Operation, ResourceType

log = structlog.get_logger("regroup")

#: Metadata a call forwarded under mTLS carries: the principal it was made by.
PRINCIPAL = "regroup-principal"
AUTHORIZATION = "authorization"

#: Certificate properties gRPC puts in the auth context, in the order they name the principal.
_CERT_NAMES = ("x509_subject_alternative_name", "x509_common_name")


class Unauthenticated(Exception):
    """A credential that is present but not valid: the call ends with UNAUTHENTICATED."""


@dataclass(frozen=True, slots=True)
class Rule:
    """What one RPC needs: `operation` on a resource of `resource_type`.

    `request`: the request names one group (`group_id`), checked before the handler
    runs; `admin_if(request)` asks for `admin` instead (admin commits), `describe_if`
    for `describe` (an admin's offset fetch reads, and changes nothing). `items`: the
    handler checks each group or topic of the request with `allowed()`."""

    operation: Operation
    resource_type: ResourceType
    scope: Literal["request", "items"]
    admin_if: Callable[[Any], bool] | None = None
    describe_if: Callable[[Any], bool] | None = None
    #: ConsumerGroupHeartbeat: `describe` on the topics subscribed to, as well.
    subscription: bool = False

    def operation_for(self, request: Any) -> Operation:
        if self.admin_if is not None and self.admin_if(request):
            return "admin"
        if self.describe_if is not None and self.describe_if(request):
            return "describe"
        return self.operation


def _admin_commit(request: Any) -> bool:
    # reconciler/offsets.py: no member id and a negative epoch is an admin commit.
    return not request.member_id and request.member_epoch < 0


def _no_member(request: Any) -> bool:
    return not request.member_id


#: Every RPC, by service and method name (see the module's docs).
RULES: dict[tuple[str, str], Rule] = {
    ("regroup.v1.GroupCoordinator", "FindCoordinator"): Rule("describe", "group", "request"),
    ("regroup.v1.GroupCoordinator", "ConsumerGroupHeartbeat"): Rule(
        "member", "group", "request", subscription=True
    ),
    ("regroup.v1.GroupCoordinator", "ConnectGroupHeartbeat"): Rule("member", "group", "request"),
    # Each heartbeat of the stream is checked with its unary RPC's rule (server/service.py).
    ("regroup.v1.GroupCoordinator", "MemberStream"): Rule("member", "group", "items"),
    ("regroup.v1.GroupCoordinator", "PrepareAssignment"): Rule("member", "group", "request"),
    ("regroup.v1.GroupCoordinator", "InstallAssignment"): Rule("member", "group", "request"),
    ("regroup.v1.GroupCoordinator", "OffsetCommit"): Rule(
        "member", "group", "request", admin_if=_admin_commit
    ),
    ("regroup.v1.GroupCoordinator", "OffsetFetch"): Rule(
        "member", "group", "request", describe_if=_no_member
    ),
    ("regroup.v1.GroupAdmin", "CreateTopics"): Rule("admin", "topic", "items"),
    ("regroup.v1.GroupAdmin", "CreatePartitions"): Rule("admin", "topic", "items"),
    ("regroup.v1.GroupAdmin", "DeleteTopics"): Rule("admin", "topic", "items"),
    ("regroup.v1.GroupAdmin", "DescribeTopics"): Rule("describe", "topic", "items"),
    ("regroup.v1.GroupAdmin", "ListGroups"): Rule("describe", "group", "items"),
    ("regroup.v1.GroupAdmin", "DescribeGroups"): Rule("describe", "group", "items"),
    ("regroup.v1.GroupAdmin", "DeleteGroups"): Rule("admin", "group", "items"),
    ("regroup.v1.GroupAdmin", "PutConnectors"): Rule("admin", "group", "request"),
    ("regroup.v1.GroupAdmin", "ListGroupEvents"): Rule("describe", "group", "request"),
    ("regroup.v1.GroupAdmin", "WatchGroup"): Rule("describe", "group", "request"),
    ("regroup.v1.GroupAdmin", "DrainMember"): Rule("admin", "group", "request"),
    ("regroup.v1.GroupAdmin", "ResetOffsets"): Rule("admin", "group", "request"),
}


@dataclass(frozen=True, slots=True)
class Caller:
    """The principal of the call being served, and the ACL it is judged by (None: all allowed)."""

    principal: str
    authorizer: Authorizer | None

    def allowed(self, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        return self.authorizer is None or self.authorizer.allows(
            self.principal, operation, resource_type, name
        )


#: Set by `service.internal_errors` for the call its task serves.
_caller: contextvars.ContextVar[Caller | None] = contextvars.ContextVar("regroup_caller", default=None)


def current() -> Caller | None:
    """The caller of the call being served (None when access control is off)."""
    return _caller.get()


def allowed(operation: Operation, resource_type: ResourceType, name: str) -> bool:
    """Whether the call being served may do `operation` on the resource; True when off."""
    caller = _caller.get()
    return caller is None or caller.allowed(operation, resource_type, name)


def enter(caller: Caller | None) -> contextvars.Token[Caller | None]:
    return _caller.set(caller)


def leave(token: contextvars.Token[Caller | None]) -> None:
    _caller.reset(token)


def certificate_principal(context: Any) -> str | None:
    """`User:<name>` from the client certificate of the connection (mTLS), else None."""
    auth_context = getattr(context, "auth_context", None)  # not every test fake has one
    auth = {} if auth_context is None else auth_context() or {}
    for key in _CERT_NAMES:
        values = auth.get(key)
        if values:
            value = values[0]
            name = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
            return f"User:{name}"
    return None


#: What each ACL operation lets a principal do, as the verb of a refusal's sentence.
DOING: dict[Operation, str] = {
    "member": "be a member of",
    "describe": "describe",
    "admin": "administer",
    "forward": "forward calls to",
}


def refusal(
    resource_type: ResourceType, name: str, operation: Operation, principal: str, *, audit: bool = True
) -> ApiError:
    """The error refusing `principal` `operation` on the resource, a sentence such as
    "User:eve may not be a member of group 'g1'."; logged as `access_refused` (the audit
    trail: who was refused what, never their credential) unless `audit` is False (the
    refusal is only looked at, and made again where it is answered)."""
    message = f"{principal} may not {DOING[operation]} {resource_type} {name!r}."
    if audit:
        _log_refused(principal, operation, resource_type, resource_name=name)
    if resource_type == "group":
        return GroupAuthorizationFailed(message)
    if resource_type == "topic":
        return TopicAuthorizationFailed(message)
    return ClusterAuthorizationFailed(message)


#: A client's string (a regex) is logged up to this many characters.
MAX_LOGGED = 256


def _log_refused(principal: str, operation: Operation, resource_type: ResourceType, **resource: Any) -> None:
    log.info(
        "access_refused", principal=principal, operation=operation, resource_type=resource_type, **resource
    )


class Access:
    """The ACL and tokens files in use (each None when not configured), re-read when they change."""

    def __init__(
        self,
        acl: WatchedFile[Authorizer] | None = None,
        tokens: WatchedFile[Tokens] | None = None,
    ) -> None:
        self.acl = acl
        self.tokens = tokens
        #: Whether calls are authenticated at all.
        self.enabled = acl is not None or tokens is not None

    @classmethod
    def from_files(cls, acl_file: Path | None, tokens_file: Path | None) -> Access:
        """Loads the files (AccessFileError names the file and entry)."""
        acl = None if acl_file is None else WatchedFile(ACL_FILE, acl_file, load_acl)
        tokens = None if tokens_file is None else WatchedFile(TOKENS_FILE, tokens_file, load_tokens)
        return cls(acl, tokens)

    async def watch(self, interval_s: float = DEFAULT_CHECK_INTERVAL_S) -> None:
        """Looks at the files every `interval_s` until cancelled (a task of the server), so
        that a change is taken and logged within that time even when no call reads them."""
        watched = [f for f in (self.acl, self.tokens) if f is not None]
        while watched:
            await asyncio.sleep(interval_s)
            for file in watched:
                try:
                    file.check()
                except Exception:  # a bug must not end the watch: calls still look themselves
                    log.exception("access_file_check_failed", setting=file.setting, path=str(file.path))

    def caller(self, context: Any) -> Caller:
        """Who makes this call (see the module's docs). Unauthenticated for an unknown
        token; ClusterAuthorizationFailed for an untrusted claim to be a replica."""
        authorizer = None if self.acl is None else self.acl.current
        forwarded_for: str | None = None
        token: str | None = None
        for key, value in context.invocation_metadata() or ():
            if key == PRINCIPAL:
                forwarded_for = str(value)
            elif key == AUTHORIZATION:
                token = str(value)
        certificate = certificate_principal(context)
        if forwarded_for is not None:
            replica = certificate
            if authorizer is not None and (
                replica is None or not authorizer.allows(replica, "forward", "cluster", CLUSTER)
            ):
                _log_refused(
                    replica or ANONYMOUS,
                    "forward",
                    "cluster",
                    resource_name=CLUSTER,
                    forwarded_for=forwarded_for[:MAX_LOGGED],
                )
                raise ClusterAuthorizationFailed(
                    f"The call says it was forwarded for {forwarded_for}, but its caller "
                    f"({replica or ANONYMOUS}) is not granted forward on the cluster."
                )
            return Caller(forwarded_for, authorizer)
        if token is not None:
            return Caller(self._token_principal(token), authorizer)
        return Caller(certificate or ANONYMOUS, authorizer)

    def _token_principal(self, header: str) -> str:
        scheme, _, token = header.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated("The authorization metadata must be 'Bearer <token>'.")
        principal = None if self.tokens is None else self.tokens.current.principal(token.strip())
        if principal is None:
            # The token itself is never logged or echoed.
            log.info("access_unauthenticated", reason="unknown bearer token")
            raise Unauthenticated(f"Unknown bearer token (not in {TOKENS_FILE}).")
        return principal


def subscription_refusal(
    caller: Caller, request: Any, coordinator: Any, *, audit: bool = True
) -> ApiError | None:
    """TOPIC_AUTHORIZATION_FAILED for a consumer heartbeat whose subscription reaches
    topics the principal may not describe, else None; logged as `refusal` logs.

    Topic names sent in the request are checked as Kafka checks them (the names it may
    not describe are listed: the caller named them). A regex, the request's or the one
    the member subscribed with before, may match only topics the principal may
    describe; the refusal does not name them. Kafka instead leaves such topics out of
    what the regex matches for that member; regroup resolves regexes per group in the
    engine, which knows no principals, so it refuses rather than assign them."""
    authorizer = caller.authorizer
    if authorizer is None:
        return None
    principal = caller.principal
    if request.HasField("subscribed_topic_names"):
        hidden = [
            n
            for n in request.subscribed_topic_names.values
            if not authorizer.allows(principal, "describe", "topic", n)
        ]
        if hidden:
            names = sorted(set(hidden))
            if audit:
                _log_refused(principal, "describe", "topic", resource_names=names)
            return TopicAuthorizationFailed(f"{principal} may not describe topics {names}.")
    regex: str | None = request.subscribed_topic_regex if request.HasField("subscribed_topic_regex") else None
    if regex is None and request.member_id:
        group = coordinator.group(request.group_id)
        member = None if group is None else group.members.get(request.member_id)
        regex = None if member is None else member.subscribed_topic_regex
    if not regex:
        return None
    compiled = stored_regex(regex)
    if compiled is None:
        return None  # refused as INVALID_REGULAR_EXPRESSION by the engine, or matches nothing
    image = coordinator.image_for(request.group_id)
    hidden_count = sum(
        1
        for topic_id in image.ids_matching(compiled)
        if not authorizer.allows(principal, "describe", "topic", image.by_id[topic_id].name)
    )
    if hidden_count:
        if audit:  # the topics are not named: the caller did not name them either
            _log_refused(principal, "describe", "topic", regex=regex[:MAX_LOGGED], topics=hidden_count)
        return TopicAuthorizationFailed(
            f"The subscription regex matches {hidden_count} topic(s) {principal} may not describe."
        )
    return None
