"""Retrying a call whose error is retriable (`RegroupError.retriable`: `Unavailable`,
`NotCoordinator`) after a backoff, until a deadline, for the asyncio and the blocking
clients alike. The last error is raised when the next retry would pass the deadline."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from regroup.client.errors import RegroupError
from regroup.client.routing import backoff_s

log = logging.getLogger("regroup.client")

T = TypeVar("T")

#: The least time a last attempt is given: a call with less would only time out.
MIN_ATTEMPT_S = 0.001


class Retrier:
    """When to retry: `within` seconds in all, `backoff_ms` doubling to `backoff_max_ms`."""

    def __init__(self, within: float, backoff_ms: int, backoff_max_ms: int, what: str) -> None:
        self._deadline = time.monotonic() + within
        self._backoff = (backoff_ms, backoff_max_ms)
        self._what = what
        self._failures = 0

    def remaining(self) -> float:
        return max(MIN_ATTEMPT_S, self._deadline - time.monotonic())

    def delay_after(self, error: RegroupError) -> float:
        """The backoff before retrying after `error`; raises it when it is not retriable
        or no retry fits before the deadline."""
        if not error.retriable:
            raise error
        self._failures += 1
        delay = backoff_s(self._failures, *self._backoff)
        if time.monotonic() + delay >= self._deadline:
            raise error
        log.debug("%s: %s; retrying in %.3f s", self._what, error, delay)
        return delay


async def retry_async(
    attempt: Callable[[float], Awaitable[T]],
    *,
    within: float,
    backoff_ms: int,
    backoff_max_ms: int,
    what: str,
) -> T:
    """`await attempt(seconds left)` until it returns, retrying retriable errors."""
    retrier = Retrier(within, backoff_ms, backoff_max_ms, what)
    while True:
        try:
            return await attempt(retrier.remaining())
        except RegroupError as error:
            delay = retrier.delay_after(error)
        await asyncio.sleep(delay)


def retry_blocking(
    attempt: Callable[[float], T], *, within: float, backoff_ms: int, backoff_max_ms: int, what: str
) -> T:
    """`retry_async` for blocking calls."""
    retrier = Retrier(within, backoff_ms, backoff_max_ms, what)
    while True:
        try:
            return attempt(retrier.remaining())
        except RegroupError as error:
            delay = retrier.delay_after(error)
        time.sleep(delay)
