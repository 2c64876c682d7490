"""The NVMe tier: tensors spilled to files under a user-given directory, with async I/O.

One file per :class:`NvmeStore`; callers address it by byte offset. Reads and writes run on their
own single-thread pools so a prefetch of chunk ``k + 1`` overlaps the write-back of ``k - 1``
while chunk ``k`` is updated. The store counts bytes and busy seconds so the report can set its
throughput beside a plain sequential read/write of the same size (:func:`sequential_throughput`).
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

import torch


def _buffer(t: torch.Tensor) -> memoryview:
    if t.device.type != "cpu" or not t.is_contiguous():
        raise ValueError("NVMe I/O needs a contiguous CPU tensor")
    return memoryview(t.view(-1).view(torch.uint8).numpy()).cast("B")


def _pwrite_all(fd: int, buf: memoryview, offset: int) -> None:
    done = 0
    while done < len(buf):
        done += os.pwrite(fd, buf[done:], offset + done)


def _pread_all(fd: int, buf: memoryview, offset: int) -> None:
    done = 0
    while done < len(buf):
        n = os.preadv(fd, [buf[done:]], offset + done)
        if n == 0:
            raise OSError(f"short read at offset {offset + done}: file ends early")
        done += n


class NvmeStore:
    """A file of ``nbytes`` bytes under ``directory`` read and written in place, asynchronously."""

    def __init__(self, directory: str, nbytes: int, *, name: str = "memopt") -> None:
        if not os.path.isdir(directory):
            raise ValueError(f"nvme directory {directory!r} does not exist")
        fd, self.path = tempfile.mkstemp(prefix=f"{name}-", suffix=".bin", dir=directory)
        self.fd = fd
        self.nbytes = int(nbytes)
        os.ftruncate(fd, self.nbytes)
        self._readers = ThreadPoolExecutor(1, thread_name_prefix="memopt-nvme-read")
        self._writers = ThreadPoolExecutor(1, thread_name_prefix="memopt-nvme-write")
        self._lock = threading.Lock()
        self.read_bytes = self.write_bytes = 0
        self.read_seconds = self.write_seconds = 0.0

    def _check(self, offset: int, t: torch.Tensor) -> memoryview:
        buf = _buffer(t)
        if offset < 0 or offset + len(buf) > self.nbytes:
            raise ValueError(
                f"[{offset}, {offset + len(buf)}) is outside the {self.nbytes}-byte file"
            )
        return buf

    def write(self, offset: int, t: torch.Tensor) -> Future:
        """Write ``t``'s bytes at ``offset``; ``t`` must stay unchanged until the future is done."""
        buf = self._check(offset, t)

        def job() -> None:
            t0 = time.perf_counter()
            _pwrite_all(self.fd, buf, offset)
            with self._lock:
                self.write_bytes += len(buf)
                self.write_seconds += time.perf_counter() - t0

        return self._writers.submit(job)

    def read(self, offset: int, out: torch.Tensor, after: Future | None = None) -> Future:
        """Read ``out.nbytes`` bytes at ``offset`` into ``out`` (after ``after``, a write, is done)."""
        buf = self._check(offset, out)

        def job() -> None:
            if after is not None:
                after.result()
            t0 = time.perf_counter()
            _pread_all(self.fd, buf, offset)
            with self._lock:
                self.read_bytes += len(buf)
                self.read_seconds += time.perf_counter() - t0

        return self._readers.submit(job)

    def throughput(self) -> dict[str, float]:
        """Achieved bytes/s of reads and writes while busy."""
        return {
            "read_Bps": self.read_bytes / self.read_seconds if self.read_seconds else 0.0,
            "write_Bps": self.write_bytes / self.write_seconds if self.write_seconds else 0.0,
        }

    def close(self) -> None:
        self._readers.shutdown(wait=True)
        self._writers.shutdown(wait=True)
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
            os.unlink(self.path)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def sequential_throughput(directory: str, nbytes: int, block: int = 64 << 20) -> dict[str, float]:
    """Plain sequential write (then fsync) and read of an ``nbytes`` file under ``directory``.

    The page cache is dropped for the file between the two (``posix_fadvise(DONTNEED)``), so the
    read comes from the disk where the OS allows it.
    """
    blk = torch.ones(min(block, max(nbytes, 1)), dtype=torch.uint8)
    buf = _buffer(blk)
    fd, path = tempfile.mkstemp(prefix="memopt-seq-", suffix=".bin", dir=directory)
    try:
        t0 = time.perf_counter()
        off = 0
        while off < nbytes:
            n = min(len(buf), nbytes - off)
            _pwrite_all(fd, buf[:n], off)
            off += n
        os.fsync(fd)
        write_s = time.perf_counter() - t0
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        t0 = time.perf_counter()
        off = 0
        while off < nbytes:
            n = min(len(buf), nbytes - off)
            _pread_all(fd, buf[:n], off)
            off += n
        read_s = time.perf_counter() - t0
    finally:
        os.close(fd)
        os.unlink(path)
    return {"read_Bps": nbytes / read_s, "write_Bps": nbytes / write_s}
