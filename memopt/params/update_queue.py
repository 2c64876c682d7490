"""Host updates queued during backward, run newest first, awaited per layer by the next forward.

    backward:  grads land on the host for layers L-1, ..., 1, 0, root  --push--> stack
    worker:    pops the newest (while backward runs: whatever landed last; after it: root,
               layer 0, layer 1, ... -- the order the next forward needs them)
    forward:   a pre-hook on each FSDP2 group waits only for that group's updates

The next forward's first layers start while later layers are still being updated: the CPU step
overlaps both the backward that produces the gradients and the forward that reads the weights.
The queue counts the worker's busy seconds and the seconds callers spent waiting, so a step's
time can be set beside the CPU update's (``stats``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable


class UpdateQueue:
    """One worker thread; tasks keyed by ints (parameter ids); LIFO.

    ``init`` runs once on the worker thread before its first task (e.g. its thread count).
    """

    def __init__(self, init: Callable[[], None] | None = None) -> None:
        self._stack: list[tuple[frozenset[int], Callable[[], None]]] = []
        self._cv = threading.Condition()
        self._busy: dict[int, int] = {}
        self._error: BaseException | None = None
        self._closed = False
        self.busy_s = self.wait_s = 0.0
        self.tasks = 0
        self._init = init
        self._thread = threading.Thread(target=self._run, name="memopt-host-adamw", daemon=True)
        self._thread.start()

    def push(self, keys: int | Iterable[int], fn: Callable[[], None]) -> None:
        ks = frozenset([keys] if isinstance(keys, int) else keys)
        with self._cv:
            for k in ks:
                self._busy[k] = self._busy.get(k, 0) + 1
            self._stack.append((ks, fn))
            self._cv.notify_all()

    def _run(self) -> None:
        if self._init is not None:
            try:
                self._init()
            except BaseException as e:  # noqa: BLE001 -- re-raised in the waiting thread
                self._error = e
        while True:
            with self._cv:
                while not self._stack and not self._closed:
                    self._cv.wait()
                if not self._stack:
                    return
                keys, fn = self._stack.pop()
            t0 = time.perf_counter()
            try:
                fn()
            except BaseException as e:  # noqa: BLE001 -- re-raised in the waiting thread
                self._error = e
            with self._cv:
                self.busy_s += time.perf_counter() - t0
                self.tasks += 1
                for k in keys:
                    self._busy[k] -= 1
                    if not self._busy[k]:
                        del self._busy[k]
                self._cv.notify_all()

    def wait(self, keys: Iterable[int] | None = None) -> None:
        """Block until the tasks of ``keys`` (all tasks when None) have run."""
        want = None if keys is None else set(keys)
        t0 = time.perf_counter()
        with self._cv:
            while self._busy if want is None else want.intersection(self._busy):
                self._cv.wait()
            self.wait_s += time.perf_counter() - t0
        if self._error is not None:
            err, self._error = self._error, None
            raise RuntimeError("a host AdamW update failed") from err

    def stats(self) -> dict[str, float]:
        """Worker busy seconds, tasks run, and seconds callers spent in :meth:`wait`."""
        with self._cv:
            return {"busy_s": self.busy_s, "tasks": self.tasks, "wait_s": self.wait_s}

    def close(self) -> None:
        self.wait()
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        self._thread.join()
