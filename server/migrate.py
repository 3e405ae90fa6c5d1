"""Applies the ordered SQL files in migrations/ and records what ran.

The files ship inside the package as regroup.server.migrations (pyproject.toml
maps migrations/ to it) and are read with importlib.resources, so an installed
server finds them wherever it runs; REGROUP_MIGRATIONS_DIR overrides them with
a folder. Finding no migration is an error, never an empty success: a server
without its tables fails later, further from the cause.

Files are named NNNN_description.sql and applied in order, each in its own
transaction, under an advisory lock so that two replicas starting together
do not race. `schema_migrations` records each version with a checksum; a
changed file that already ran is refused (migrations are forward-only).
"""

from __future__ import annotations

import hashlib
import importlib.resources
import re
from dataclasses import dataclass
from importlib.resources.abc import Traversable

import asyncpg

#: The package holding the SQL files (migrations/ in a checkout).
MIGRATIONS_PACKAGE = "regroup.server.migrations"
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


def packaged_migrations() -> Traversable:
    """The migrations installed with this package."""
    try:
        return importlib.resources.files(MIGRATIONS_PACKAGE)
    except ModuleNotFoundError:
        raise MigrationError(
            f"The package {MIGRATIONS_PACKAGE} is not installed, so there are no migrations to apply; "
            "reinstall regroup, or set REGROUP_MIGRATIONS_DIR to a folder of NNNN_description.sql files."
        ) from None


def discover(directory: Traversable | None = None) -> list[Migration]:
    """The migrations in `directory` (default: the packaged ones), in order.

    Raises MigrationError when there is none, or a file is misnamed or shares a version.
    """
    source = packaged_migrations() if directory is None else directory
    if not source.is_dir():
        raise MigrationError(f"Migrations directory {source} does not exist or is not a directory.")
    migrations = []
    # Only .sql files are migrations; the package's __init__.py is not one.
    for path in sorted((p for p in source.iterdir() if p.name.endswith(".sql")), key=lambda p: p.name):
        match = _NAME.fullmatch(path.name)
        if match is None:
            raise MigrationError(f"Migration file {path.name} is not named NNNN_description.sql.")
        migrations.append(Migration(match.group(1), path.name, path.read_text(encoding="utf-8")))
    if not migrations:
        raise MigrationError(
            f"No migrations (NNNN_description.sql files) in {source}: "
            "nothing would create the tables regroup needs."
        )
    versions = [m.version for m in migrations]
    if len(set(versions)) != len(versions):
        raise MigrationError(f"Two migrations share a version number in {source}.")
    return migrations


async def apply_migrations(
    conn: asyncpg.Connection, migrations: Traversable | list[Migration] | None = None
) -> list[str]:
    """Applies pending migrations; returns the names of those applied now.

    `migrations` is a directory to discover them in (default: the packaged ones),
    or the result of `discover` when the caller checked them before connecting.
    """
    if not isinstance(migrations, list):
        migrations = discover(migrations)
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


async def migrate(dsn: str, directory: Traversable | None = None) -> list[str]:
    migrations = discover(directory)
    conn = await asyncpg.connect(dsn)
    try:
        return await apply_migrations(conn, migrations)
    finally:
        await conn.close()
