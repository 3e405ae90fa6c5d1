"""The pure authorizer: a request is allowed iff some entry grants it, checked against
an oracle written from the rules (not from the index the authorizer builds)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from regroup.server.authz import (
    ANY_NAME,
    EVERYONE,
    VALID_OPERATIONS,
    AclEntry,
    AclError,
    Authorizer,
    Operation,
    ResourceType,
)
from tests.support.depth import examples

#: (granted, requested, resource type) pairs where the grant allows the request though they differ.
IMPLIES = {
    ("admin", "describe", "group"),
    ("admin", "describe", "topic"),
    ("admin", "describe", "cluster"),
    ("member", "describe", "group"),
}

# A small alphabet so that names collide, share prefixes and hit "*".
names = st.text(alphabet="ab*", min_size=1, max_size=3)
principals = st.sampled_from(["User:alice", "User:bob", "User:carol", EVERYONE])
resource_types = st.sampled_from(["group", "topic", "cluster"])


@st.composite
def entries(draw: st.DrawFn) -> AclEntry:
    resource_type = draw(resource_types)
    operation = draw(st.sampled_from(sorted(VALID_OPERATIONS[resource_type])))
    return AclEntry(
        principal=draw(principals),
        operation=operation,
        resource_type=resource_type,
        pattern_type=draw(st.sampled_from(["literal", "prefixed"])),
        name=draw(names),
    )


def oracle(acl: list[AclEntry], principal: str, operation: str, resource_type: str, name: str) -> bool:
    for e in acl:
        if e.principal not in (principal, "User:*"):
            continue
        if e.resource_type != resource_type:
            continue
        if e.operation != operation and (e.operation, operation, resource_type) not in IMPLIES:
            continue
        if e.pattern_type == "literal" and (e.name == name or e.name == "*"):
            return True
        if e.pattern_type == "prefixed" and name[: len(e.name)] == e.name:
            return True
    return False


@settings(max_examples=examples(400), deadline=None)
@given(
    acl=st.lists(entries(), max_size=8),
    requests=st.lists(
        st.tuples(
            st.sampled_from(["User:alice", "User:bob", "User:dave", "User:ANONYMOUS"]),
            st.sampled_from(["member", "describe", "admin", "forward"]),
            resource_types,
            st.text(alphabet="ab*", min_size=1, max_size=4),
        ),
        min_size=1,
        max_size=10,
    ),
)
def test_a_request_is_allowed_iff_some_entry_grants_it(
    acl: list[AclEntry], requests: list[tuple[str, Operation, ResourceType, str]]
) -> None:
    authorizer = Authorizer(acl)
    for principal, operation, resource_type, name in requests:
        expected = oracle(acl, principal, operation, resource_type, name)
        assert authorizer.allows(principal, operation, resource_type, name) == expected, (
            principal,
            operation,
            resource_type,
            name,
        )


def test_no_entries_allow_nothing() -> None:
    assert not Authorizer([]).allows("User:alice", "describe", "group", "g")


def test_literal_star_prefix_and_everyone() -> None:
    authorizer = Authorizer(
        [
            AclEntry("User:alice", "member", "group", "literal", "orders"),
            AclEntry("User:bob", "admin", "topic", "prefixed", "team-"),
            AclEntry(EVERYONE, "describe", "topic", "literal", ANY_NAME),
        ]
    )
    assert authorizer.allows("User:alice", "member", "group", "orders")
    assert authorizer.allows("User:alice", "describe", "group", "orders")  # member implies describe
    assert not authorizer.allows("User:alice", "member", "group", "orders2")  # literal is exact
    assert not authorizer.allows("User:alice", "admin", "group", "orders")
    assert authorizer.allows("User:bob", "admin", "topic", "team-a")
    assert not authorizer.allows("User:bob", "admin", "topic", "team")
    assert authorizer.allows("User:nobody", "describe", "topic", "anything")
    assert not authorizer.allows("User:nobody", "admin", "topic", "anything")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"principal": "alice"}, "principal must be Type:name"),
        ({"operation": "write"}, "operation must be one of"),
        ({"resource_type": "queue"}, "resource_type must be one of"),
        ({"pattern_type": "match"}, "pattern_type must be one of"),
        ({"resource_type": "topic", "operation": "member"}, "does not apply to a topic"),
        ({"operation": "forward"}, "does not apply to a group"),
        ({"name": ""}, "name must not be empty"),
    ],
)
def test_bad_entries_are_refused(fields: dict[str, str], message: str) -> None:
    base = {
        "principal": "User:alice",
        "operation": "member",
        "resource_type": "group",
        "pattern_type": "literal",
        "name": "g",
    }
    with pytest.raises(AclError, match=message):
        AclEntry(**{**base, **fields})  # type: ignore[arg-type]
