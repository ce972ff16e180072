"""Reading a trace while the requests already read are worked on: a generator run
ahead in a thread of its own, two calls made at once, and a consumer that runs
behind in a thread of its own.

`replay fidelity` reads both traces (checking, decompressing and decoding chunks,
putting requests in time order: ordered.py) and works on what it read (pairing,
figures, locality) in turn; the reading is C and numpy that let go of the GIL
(zlib's CRC, planes.c's codecs, compact.c, numpy's sorts and copies), about a
third of the command. Run in threads, it overlaps with the rest on a second CPU.
What comes out, and in what order, is the same; an error raised by the reading
is raised where the item would have come, and the first of two calls' errors is
the first call's, as when they ran in turn. Memory: `depth` items more at most.
`Behind` takes work that only sums what it is given (both traces' locality,
localitystream.py: numpy and the C stack distances) off the thread that pairs.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Generic, TypeVar

T = TypeVar("T")
A = TypeVar("A")
_END = object()
_POLL_S = 0.1  # how often a producer whose consumer is gone looks whether to stop


def ahead(items: Iterator[T], depth: int = 1) -> Iterator[T]:
    """`items`, produced in a thread up to `depth` items ahead of the consumer."""
    q: queue.Queue[tuple[bool, Any]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: tuple[bool, Any]) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def run() -> None:
        try:
            for x in items:
                if not put((True, x)):
                    return
            put((False, _END))
        except BaseException as e:  # handed to the consumer, raised there
            put((False, e))
        finally:
            if isinstance(items, Generator):
                items.close()  # (its files closed in the thread that runs it)

    thread = threading.Thread(target=run, name="iotape-read-ahead", daemon=True)
    thread.start()
    try:
        while True:
            ok, x = q.get()
            if ok:
                yield x
            elif x is _END:
                return
            else:
                raise x
    finally:
        stop.set()
        thread.join()


def both(f: Callable[[A], T], a: A, b: A) -> tuple[T, T]:
    """(f(a), f(b)), the first in a thread while the second runs here."""
    with ThreadPoolExecutor(1, thread_name_prefix="iotape-read") as pool:
        first = pool.submit(f, a)
        try:
            second = f(b)
        except BaseException:
            first.result()  # a's error first, as in turn
            raise
        return first.result(), second


class Behind(Generic[T]):
    """`fn` called with each item given, in the order given, in a thread of its own,
    up to `depth` items behind; `join` waits for the last and raises the first
    error `fn` raised (an item given after that error raises it at once)."""

    def __init__(self, fn: Callable[[T], object], depth: int = 1) -> None:
        self._q: queue.Queue[Any] = queue.Queue(maxsize=depth)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fn,), name="iotape-behind",
                                        daemon=True)  # fmt: skip
        self._thread.start()

    def _run(self, fn: Callable[[T], object]) -> None:
        while (x := self._q.get()) is not _END:
            if self._error is None:  # (taking the rest, so that the giver never waits)
                try:
                    fn(x)
                except BaseException as e:
                    self._error = e

    def __call__(self, x: T) -> None:
        if self._error is not None:
            raise self._error
        self._q.put(x)

    def join(self, check: bool = True) -> None:
        """Wait until every item given is done; `check`: raise fn's error if any."""
        if self._thread.is_alive():
            self._q.put(_END)
            self._thread.join()
        if check and self._error is not None:
            raise self._error
