"""ahead.py: a generator read ahead in a thread gives the same items in the same
order, raises its error where the item would have come, and is closed (its files
with it) when the consumer stops early; `both` gives the first call's error first."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from base.errors import IotapeError
from replayer.run.ahead import Behind, ahead, both


def _count(n: int, fail_at: int | None = None, log: list | None = None) -> Iterator[int]:
    try:
        for i in range(n):
            if i == fail_at:
                raise IotapeError(f"t.iot: bad chunk {i}")
            yield i
    finally:
        if log is not None:
            log.append(("closed", threading.current_thread().name))


@pytest.mark.parametrize("depth", [1, 3])
def test_same_items_in_the_same_order(depth: int) -> None:
    log: list = []
    assert list(ahead(_count(1000, log=log), depth)) == list(range(1000))
    assert log == [("closed", "iotape-read-ahead")]


def test_an_error_comes_where_its_item_would_have() -> None:
    got = []
    with pytest.raises(IotapeError, match="bad chunk 7"):
        for x in ahead(_count(100, fail_at=7)):
            got.append(x)
    assert got == list(range(7))


def test_a_consumer_that_stops_early_closes_the_generator() -> None:
    log: list = []
    it = ahead(_count(10**9, log=log))
    assert [next(it) for _ in range(3)] == [0, 1, 2]
    it.close()  # (what a `for` left by an error does)
    assert log == [("closed", "iotape-read-ahead")]
    assert not any(t.name == "iotape-read-ahead" for t in threading.enumerate())


def test_both_gives_each_answer_and_the_first_error_first() -> None:
    assert both(lambda x: x * 2, 3, 4) == (6, 8)

    def fail(x: int) -> int:
        raise IotapeError(f"trace {x}")

    with pytest.raises(IotapeError, match="trace 1"):
        both(fail, 1, 2)
    with pytest.raises(IotapeError, match="trace 2"):
        both(lambda x: x if x == 1 else fail(x), 1, 2)


def test_behind_calls_in_order_and_raises_the_first_error() -> None:
    seen: list[int] = []
    b = Behind(seen.append)
    for i in range(500):
        b(i)
    b.join()
    assert seen == list(range(500))

    def fail(x: int) -> None:
        if x >= 3:
            raise IotapeError(f"item {x}")
        seen.append(x)

    seen.clear()
    b = Behind(fail)
    with pytest.raises(IotapeError, match="item 3"):
        for i in range(100):
            b(i)
        b.join()
    b.join(check=False)  # (what a closing caller does: waits, raises nothing)
    assert seen == [0, 1, 2]
    assert not any(t.name == "iotape-behind" for t in threading.enumerate())
