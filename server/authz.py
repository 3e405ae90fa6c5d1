"""Who may do what: Kafka-style ACL entries and a pure authorizer over them.

An entry grants a principal (exact, or `User:*` for everyone) one operation on the
resources of one type whose name matches a pattern: `literal` (the name itself, or
`*` for every name, as in Kafka) or `prefixed` (every name that starts with it).
There are only grants (no deny entries): a request is allowed iff some entry
grants it. Operations imply others as Kafka's do: `admin` implies `describe` on the
same resource, and `member` on a group implies `describe` on it.

No I/O here: server/aclfile.py reads the files, server/access.py applies the rules
to calls. That keeps this testable (tests/unit/server/test_authz.py checks it
against an independent oracle with hypothesis).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final, Literal, get_args

Operation = Literal["member", "describe", "admin", "forward"]
ResourceType = Literal["group", "topic", "cluster"]
PatternType = Literal["literal", "prefixed"]

OPERATIONS: Final[tuple[Operation, ...]] = get_args(Operation)
RESOURCE_TYPES: Final[tuple[ResourceType, ...]] = get_args(ResourceType)
PATTERN_TYPES: Final[tuple[PatternType, ...]] = get_args(PatternType)

#: The principal of a call that brought no credential.
ANONYMOUS: Final = "User:ANONYMOUS"
#: An entry for this principal applies to every principal.
EVERYONE: Final = "User:*"
#: A literal pattern with this name matches every name of its resource type.
ANY_NAME: Final = "*"
#: The name of the one cluster resource (Kafka's is `kafka-cluster`).
CLUSTER: Final = "regroup-cluster"

#: The operations that make sense on each resource type; others are refused in a file.
VALID_OPERATIONS: Final[dict[ResourceType, frozenset[Operation]]] = {
    "group": frozenset({"member", "describe", "admin"}),
    "topic": frozenset({"describe", "admin"}),
    # `forward`: the principal is a replica, trusted to say whose call it forwards.
    "cluster": frozenset({"describe", "admin", "forward"}),
}


class AclError(ValueError):
    """An ACL entry that is not valid; the message says which field and why."""


@dataclass(frozen=True, slots=True)
class AclEntry:
    principal: str
    operation: Operation
    resource_type: ResourceType
    pattern_type: PatternType
    name: str

    def __post_init__(self) -> None:
        kind, sep, who = self.principal.partition(":")
        if not (kind and sep and who):
            raise AclError(f"principal must be Type:name (for example User:alice), got {self.principal!r}")
        if self.operation not in OPERATIONS:
            raise AclError(f"operation must be one of {', '.join(OPERATIONS)}, got {self.operation!r}")
        if self.resource_type not in RESOURCE_TYPES:
            raise AclError(
                f"resource_type must be one of {', '.join(RESOURCE_TYPES)}, got {self.resource_type!r}"
            )
        if self.pattern_type not in PATTERN_TYPES:
            raise AclError(
                f"pattern_type must be one of {', '.join(PATTERN_TYPES)}, got {self.pattern_type!r}"
            )
        if self.operation not in VALID_OPERATIONS[self.resource_type]:
            allowed = ", ".join(sorted(VALID_OPERATIONS[self.resource_type]))
            raise AclError(
                f"operation {self.operation!r} does not apply to a {self.resource_type} (use {allowed})"
            )
        if not self.name:
            raise AclError("name must not be empty (a literal '*' matches every name)")


def implied(granted: Operation, resource_type: ResourceType) -> frozenset[Operation]:
    """The operations a grant of `granted` on a resource of `resource_type` allows."""
    ops: set[Operation] = {granted}
    if granted == "admin" or (granted == "member" and resource_type == "group"):
        ops.add("describe")
    return frozenset(ops)


@dataclass(slots=True)
class _Grants:
    literals: set[str] = field(default_factory=set)
    prefixes: list[str] = field(default_factory=list)

    def match(self, name: str) -> bool:
        literals = self.literals
        return name in literals or ANY_NAME in literals or any(name.startswith(p) for p in self.prefixes)


class Authorizer:
    """Answers `allows(principal, operation, resource_type, name)` from the entries.

    Entries are indexed by (principal, resource type, operation allowed), so a check
    costs two dictionary look-ups and a scan of the prefixes granted to that principal."""

    def __init__(self, entries: Iterable[AclEntry]) -> None:
        self.entries: tuple[AclEntry, ...] = tuple(entries)
        self._index: dict[tuple[str, str, str], _Grants] = {}
        for e in self.entries:
            for op in implied(e.operation, e.resource_type):
                grants = self._index.setdefault((e.principal, e.resource_type, op), _Grants())
                if e.pattern_type == "literal":
                    grants.literals.add(e.name)
                else:
                    grants.prefixes.append(e.name)

    def allows(self, principal: str, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        index = self._index
        for who in (principal, EVERYONE):
            grants = index.get((who, resource_type, operation))
            if grants is not None and grants.match(name):
                return True
        return False

    def __len__(self) -> int:
        return len(self.entries)
