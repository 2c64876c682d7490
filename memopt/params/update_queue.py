"""Host updates queued during backward, run newest first, awaited per layer by the next forward.

    backward:  grads land on the host for layers L-1, ..., 1, 0, root  --push--> stack
    worker:    pops the newest (while backward runs: whatever landed last; after it: root,
               layer 0, layer 1, ... -- the order the next forward needs them)
    forward:   a pre-hook on each FSDP2 group waits only for that group's updates

The next forward's first layers start while later layers are still being updated: the CPU step
overlaps both the backward that produces the gradients and the forward that reads the weights.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable


class UpdateQueue:
    """One worker thread; tasks keyed by ``int`` (a parameter's id); LIFO."""

    def __init__(self) -> None:
        self._stack: list[tuple[int, Callable[[], None]]] = []
        self._cv = threading.Condition()
        self._busy: set[int] = set()
        self._error: BaseException | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="memopt-host-adamw", daemon=True)
        self._thread.start()

    def push(self, key: int, fn: Callable[[], None]) -> None:
        with self._cv:
            self._busy.add(key)
            self._stack.append((key, fn))
            self._cv.notify_all()

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._stack and not self._closed:
                    self._cv.wait()
                if not self._stack:
                    return
                key, fn = self._stack.pop()
            try:
                fn()
            except BaseException as e:  # noqa: BLE001 -- re-raised in the waiting thread
                self._error = e
            with self._cv:
                self._busy.discard(key)
                self._cv.notify_all()

    def wait(self, keys: Iterable[int] | None = None) -> None:
        """Block until the tasks of ``keys`` (all tasks when None) have run."""
        want = None if keys is None else set(keys)
        with self._cv:
            while self._busy if want is None else self._busy & want:
                self._cv.wait()
        if self._error is not None:
            err, self._error = self._error, None
            raise RuntimeError("a host AdamW update failed") from err

    def close(self) -> None:
        self.wait()
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        self._thread.join()
