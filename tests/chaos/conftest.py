"""The chaos test's own embedded Postgres (one per run)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.pg import EmbeddedPostgres


@pytest.fixture(scope="session")
def postgres() -> Iterator[EmbeddedPostgres]:
    pg = EmbeddedPostgres()
    yield pg
    pg.close()
