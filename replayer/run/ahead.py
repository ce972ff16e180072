"""Reading a trace while the requests already read are worked on: a generator run
ahead in a thread of its own, and two calls made at once.

`replay fidelity` reads both traces (checking, decompressing and decoding chunks,
putting requests in time order: ordered.py) and works on what it read (pairing,
figures, locality) in turn; the reading is C and numpy that let go of the GIL
(zlib's CRC, planes.c's codecs, compact.c, numpy's sorts and copies), about a
third of the command. Run in threads, it overlaps with the rest on a second CPU.
What comes out, and in what order, is the same; an error raised by the reading
is raised where the item would have come, and the first of two calls' errors is
the first call's, as when they ran in turn. Memory: `depth` items more at most.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

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
