"""Several replicas in one test process on one database: short leases, and waiting until the shards
are spread."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from tests.support.service import Service, ServiceFactory
from tests.support.timing import wait_until

#: Short leases so that a test sees a whole takeover; renewals often, so the spread settles fast.
FAST = {"lease_ms": 2_000, "lease_renew_ms": 300}


async def replicas(start_service: ServiceFactory, n: int, **overrides: Any) -> list[Service]:
    started = [await start_service(**FAST, **overrides) for _ in range(n)]
    await spread(started)
    return started


async def spread(services: list[Service], timeout_s: float = 15.0) -> None:
    """Waits until every shard is served by exactly one of `services`, fairly, and
    every replica knows which (their next lease rounds tell them)."""
    deadline = time.monotonic() + timeout_s
    while True:
        held = [set(s.coordinator.shards.held) for s in services]
        count = services[0].coordinator.shards.count
        fair = -(-count // len(services))
        owners = {
            shard: s.coordinator.store.replica_id for s, h in zip(services, held, strict=True) for shard in h
        }
        settled = len(owners) == count and sum(map(len, held)) == count and all(len(h) <= fair for h in held)
        if settled and all(
            {shard: o[0] for shard, o in s.coordinator.shards.owners.items()} == owners for s in services
        ):
            return
        assert time.monotonic() < deadline, f"shards never spread: {[len(h) for h in held]}"
        await asyncio.sleep(0.05)


def owned_by(service: Service, prefix: str = "g") -> str:
    """A group id whose shard `service` holds."""
    shards = service.coordinator.shards
    return next(g for g in (f"{prefix}{i}" for i in range(10_000)) if shards.shard(g) in shards.held)


async def topics_known(services: list[Service], *names: str, timeout_s: float = 15.0) -> None:
    """Waits until every replica of `services` knows the topics `names` (a topic created
    through one reaches the others by a NOTIFY, or at their next lease round: on a busy
    machine later than a test's next call, whose group would be assigned without it)."""
    await wait_until(
        lambda: all(n in s.coordinator.image.by_name for s in services for n in names),
        timeout_s,
        f"every replica knows {sorted(names)}",
    )
