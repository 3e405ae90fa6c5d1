"""ACL and tokens files for tests of access control, and the callers' metadata
(tests/integration/test_access.py and the tests that run with an ACL)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

TOKENS = {"admin": "User:admin", "alice": "User:alice", "eve": "User:eve"}


def grant(
    principal: str, operation: str, resource_type: str, name: str, pattern: str = "literal"
) -> dict[str, str]:
    return {
        "principal": principal,
        "operation": operation,
        "resource_type": resource_type,
        "pattern_type": pattern,
        "name": name,
    }


BASE_ACL = [
    grant("User:admin", "admin", "group", "*"),
    grant("User:admin", "member", "group", "*"),
    grant("User:admin", "admin", "topic", "*"),
    grant("User:alice", "member", "group", "team-", "prefixed"),
    grant("User:alice", "describe", "topic", "orders"),
    grant("User:*", "describe", "topic", "public-", "prefixed"),
]


def write_acl(path: Path, acl: list[dict[str, str]]) -> Path:
    staged = path.with_suffix(".new")
    staged.write_text(json.dumps(acl))
    staged.replace(path)  # in one step, as a ConfigMap update swaps its files
    return path


def files(folder: Path, acl: list[dict[str, str]] = BASE_ACL) -> dict[str, Path]:
    tokens = folder / "tokens.json"
    tokens.write_text(
        json.dumps(
            [{"principal": p, "sha256": hashlib.sha256(t.encode()).hexdigest()} for t, p in TOKENS.items()]
        )
    )
    return {"acl_file": write_acl(folder / "acl.json", acl), "tokens_file": tokens}


def auth(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


ADMIN, ALICE, EVE = auth("admin"), auth("alice"), auth("eve")
