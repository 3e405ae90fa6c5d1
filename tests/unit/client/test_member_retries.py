"""GroupMember's retry timing against its own session (no server: the clock is a test's)."""

from __future__ import annotations

from regroup.client import GroupMember, MemberOptions


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_a_retry_comes_halfway_to_the_session_expiry_at_the_latest() -> None:
    """With the backoff grown past the session, the retry still leaves time for an answer."""
    clock = Clock()
    options = MemberOptions(retry_backoff_ms=100, retry_backoff_max_ms=60_000, session_safety_margin_ms=300)
    member = GroupMember("127.0.0.1:1", options=options, clock=clock)
    try:
        member._epoch, member._session_timeout_ms, member._last_answered_send = 3, 1_500, clock.now
        member._failures = 10  # a backoff of 60 s
        clock.now += 0.4  # 0.8 s of the session (1.5 s less the 0.3 s margin) is left
        delay = member._retry_later([])
        assert 0 < delay <= 0.4
        assert member._epoch == 3  # nothing lost
    finally:
        await member.abort()
