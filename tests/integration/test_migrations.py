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
