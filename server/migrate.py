"""Applies the ordered SQL files in migrations/ and records what ran.

Files are named NNNN_description.sql and applied in order, each in its own
transaction, under an advisory lock so that two replicas starting together
do not race. `schema_migrations` records each version with a checksum; a
changed file that already ran is refused (migrations are forward-only).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import asyncpg

DEFAULT_MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"
_NAME = re.compile(r"(\d{4})_[a-z0-9_]+\.sql")
#: An arbitrary constant naming regroup's migration lock.
_LOCK_ID = 0x7265_6772_6F75_70


class MigrationError(Exception):
    pass


@dataclass(frozen=True, slots=True)
class Migration:
    version: str
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def discover(directory: Path = DEFAULT_MIGRATIONS_DIR) -> list[Migration]:
    migrations = []
    for path in sorted(directory.glob("*.sql")):
        match = _NAME.fullmatch(path.name)
        if match is None:
            raise MigrationError(f"Migration file {path.name} is not named NNNN_description.sql.")
        migrations.append(Migration(match.group(1), path.name, path.read_text()))
    versions = [m.version for m in migrations]
    if len(set(versions)) != len(versions):
        raise MigrationError(f"Two migrations share a version number in {directory}.")
    return migrations


async def apply_migrations(conn: asyncpg.Connection, directory: Path = DEFAULT_MIGRATIONS_DIR) -> list[str]:
    """Applies pending migrations; returns the names of those applied now."""
    migrations = discover(directory)
    await conn.execute("SELECT pg_advisory_lock($1)", _LOCK_ID)
    try:
        await conn.execute(
            """
            CREATE TABLE IF NOT EXISTS schema_migrations (
                version    text PRIMARY KEY,
                name       text NOT NULL,
                checksum   text NOT NULL,
                applied_at timestamptz NOT NULL DEFAULT now()
            )
            """
        )
        done = {r["version"]: r for r in await conn.fetch("SELECT * FROM schema_migrations")}
        applied = []
        for migration in migrations:
            previous = done.get(migration.version)
            if previous is not None:
                if previous["checksum"] != migration.checksum:
                    raise MigrationError(
                        f"Migration {migration.name} changed after it was applied; "
                        "add a new migration instead of editing an old one."
                    )
                continue
            async with conn.transaction():
                await conn.execute(migration.sql)
                await conn.execute(
                    "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
                    migration.version,
                    migration.name,
                    migration.checksum,
                )
            applied.append(migration.name)
        return applied
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", _LOCK_ID)


async def migrate(dsn: str, directory: Path = DEFAULT_MIGRATIONS_DIR) -> list[str]:
    conn = await asyncpg.connect(dsn)
    try:
        return await apply_migrations(conn, directory)
    finally:
        await conn.close()
