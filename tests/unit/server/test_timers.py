"""The timer queue: cheap re-arming, cancellation, and due timers in deadline order."""

from __future__ import annotations

from regroup.server.timers import TimerKey, TimerQueue

A = TimerKey("g", "a", "session")
B = TimerKey("g", "b", "session")
R = TimerKey("g", "a", "rebalance")


def test_due_timers_come_out_in_deadline_order_with_their_payload() -> None:
    queue = TimerQueue()
    queue.schedule(B, 200)
    queue.schedule(A, 100)
    queue.schedule(R, 150, payload=7)

    assert queue.pop_due(99) == []
    assert queue.pop_due(160) == [(A, 0), (R, 7)]
    assert queue.next_deadline() == 200
    assert queue.pop_due(1_000) == [(B, 0)]
    assert len(queue) == 0


def test_rearming_later_postpones_without_growing_the_heap() -> None:
    queue = TimerQueue()
    for deadline in range(100, 10_100, 100):  # a heartbeat re-arms the session timer each time
        queue.schedule(A, deadline)

    assert len(queue._heap) == 1
    assert queue.pop_due(9_999) == []
    assert queue.deadline(A) == 10_000
    assert queue.pop_due(10_000) == [(A, 0)]


def test_rearming_earlier_fires_at_the_earlier_deadline_once() -> None:
    queue = TimerQueue()
    queue.schedule(A, 500)
    queue.schedule(A, 100)

    assert queue.pop_due(100) == [(A, 0)]
    assert queue.pop_due(1_000) == []


def test_cancelled_timers_never_fire() -> None:
    queue = TimerQueue()
    queue.schedule(A, 100)
    queue.schedule(R, 100)
    queue.cancel_member("g", "a")

    assert queue.next_deadline() is None
    assert queue.pop_due(1_000) == []


def test_an_earlier_deadline_wakes_the_timer_loop() -> None:
    queue = TimerQueue()
    queue.schedule(A, 500)
    queue.wake.clear()
    queue.schedule(B, 900)
    assert not queue.wake.is_set()
    queue.schedule(R, 100)
    assert queue.wake.is_set()
