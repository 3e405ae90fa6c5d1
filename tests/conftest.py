"""Every test belongs to one tier, by the folder it lives in; the header names the depth.

| tier | folder | what |
|---|---|---|
| unit | tests/unit/ | the engine, the server's parts and the client without a network or a database |
| integration | tests/integration/ | a real Postgres, real servers on loopback ports, the real client |
| docs | tests/docs/ | every code block of the documentation, as written |
| deploy | tests/deploy/ | the image, the chart, the packages and wheels, the monitoring rules |
| chaos | tests/chaos/ | replica processes killed, paused and cut off while members run |
| slow | tests/slow/ | the benchmarks' smoke runs and the Spark jobs |

`make test-<tier>` runs one tier; `make test` runs them all (CONTRIBUTING.md).
"""

from __future__ import annotations

import pytest

from tests.support import depth
from tests.support.tiers import TIERS, tier_of
from tests.support.timing import describe as describe_timing
from tests.support.timing import scaled

#: How long a test of each tier may run before pytest-timeout stops it (a hang, not a slow
#: test: deadlines inside tests are tighter), times REGROUP_TEST_TIME_SCALE. The chaos
#: test and the benchmarks' smoke runs do minutes of work on a busy machine.
TIMEOUTS_S = {"unit": 120, "integration": 120, "docs": 120, "deploy": 300, "chaos": 600, "slow": 600}


def pytest_sessionstart(session: pytest.Session) -> None:
    """The depth and the time scale of this run, first thing, even with -q (and once: by
    the controller of an xdist run, not by each worker)."""
    config = session.config
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and not hasattr(config, "workerinput"):
        reporter.write_line(f"{depth.describe()}; {describe_timing()}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        tier = tier_of(item.path)
        if tier is None:
            raise pytest.UsageError(
                f"{item.nodeid} belongs to no tier: tests live in tests/<tier>/, one of {', '.join(TIERS)}"
            )
        item.add_marker(getattr(pytest.mark, tier))
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(scaled(TIMEOUTS_S[tier])))
