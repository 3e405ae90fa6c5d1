"""Migrations: applied in order to an empty database, recorded, never re-run or edited."""

from __future__ import annotations

import shutil
from pathlib import Path

import asyncpg
import pytest

from regroup.server.migrate import DEFAULT_MIGRATIONS_DIR, MigrationError, discover, migrate
from tests.support.pg import EmbeddedPostgres

pytestmark = pytest.mark.integration


async def test_migrations_apply_to_an_empty_database(postgres: EmbeddedPostgres) -> None:
    dsn = await postgres.empty_database()

    applied = await migrate(dsn)

    assert applied == [m.name for m in discover()]
    conn = await asyncpg.connect(dsn)
    try:
        versions = [
            r["version"] for r in await conn.fetch("SELECT version FROM schema_migrations ORDER BY 1")
        ]
        tables = {
            r["tablename"]
            for r in await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        }
    finally:
        await conn.close()
    assert versions == [m.version for m in discover()]
    assert {"topics", "groups", "members", "target_assignments", "current_assignments"} <= tables
    assert await migrate(dsn) == []


async def test_an_edited_migration_is_refused(postgres: EmbeddedPostgres, tmp_path: Path) -> None:
    dsn = await postgres.empty_database()
    for path in DEFAULT_MIGRATIONS_DIR.glob("*.sql"):
        shutil.copy(path, tmp_path / path.name)
    await migrate(dsn, tmp_path)
    first = min(tmp_path.glob("*.sql"))
    first.write_text(first.read_text() + "\n-- edited\n")

    with pytest.raises(MigrationError, match="changed after it was applied"):
        await migrate(dsn, tmp_path)


def test_misnamed_migration_is_refused(tmp_path: Path) -> None:
    (tmp_path / "initial.sql").write_text("SELECT 1;")
    with pytest.raises(MigrationError, match=r"NNNN_description\.sql"):
        discover(tmp_path)


async def test_connectors_without_a_group_become_an_empty_connect_group(
    postgres: EmbeddedPostgres, tmp_path: Path
) -> None:
    dsn = await postgres.empty_database()
    before = [m for m in DEFAULT_MIGRATIONS_DIR.glob("*.sql") if m.name < "0004"]
    for path in before:
        shutil.copy(path, tmp_path / path.name)
    await migrate(dsn, tmp_path)
    conn = await asyncpg.connect(dsn)
    try:
        # What PutConnectors stored before 0004: connectors of no group, and of a group
        # that became a consumer group.
        await conn.execute(
            "INSERT INTO groups (group_id, group_type, group_epoch, owner, owner_epoch)"
            " VALUES ('consumers', 'consumer', 3, 'r', 1)"
        )
        await conn.execute(
            "INSERT INTO connectors (group_id, name, tasks)"
            " VALUES ('orphan', 'A', 2), ('orphan', 'B', 0), ('consumers', 'C', 1)"
        )
        assert await migrate(dsn) == ["0004_connectors_belong_to_groups.sql"]
        groups = [tuple(r) for r in await conn.fetch("SELECT group_id, group_type, group_epoch FROM groups")]
        connectors = [
            tuple(r) for r in await conn.fetch("SELECT group_id, name FROM connectors ORDER BY 1, 2")
        ]
        await conn.execute("DELETE FROM groups WHERE group_id = 'orphan'")
        left = await conn.fetchval("SELECT count(*) FROM connectors")
    finally:
        await conn.close()
    assert sorted(groups) == [("consumers", "consumer", 3), ("orphan", "connect", 0)]
    assert connectors == [("orphan", "A"), ("orphan", "B")]
    assert left == 0
