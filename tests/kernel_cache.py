"""Inductor's C++ kernel cache, checked when the suite starts.

Inductor builds a kernel's ``.so`` (and ``.o``) in place, in a cache directory that outlives
the process (``/tmp/torchinductor_<user>`` unless ``TORCHINDUCTOR_CACHE_DIR`` says otherwise).
A build killed midway (a test run stopped at its time limit, a ^C) leaves a short file behind,
and every later process that needs the same kernel finds the file, skips the build and fails
to load it: ``ImportError: ... main.so: file too short``. Stop 62's landing run failed so on a
zero-byte ``.so`` that an interrupted run on the same machine had left three hours before.

Precompiled headers (``precompiled_headers/*.gch``) are left alone: gcc ignores an empty one,
a truncated one would fail every build (checked with g++ 12.2), but they are built once per
torch build and compiler flags, in the first seconds of a run on a new cache directory, and a
whole ``.gch`` cannot be told from a cut one without gcc's own reader.
"""

from __future__ import annotations

import fcntl
import os
import struct
import tempfile

#: what Inductor writes in place: shared objects and the objects they are linked from
_BUILT = (".so", ".o")


def inductor_cache_dir() -> str:
    """The directory Inductor builds kernels in (its default when the variable is unset), read
    without torch's ``cache_dir()``, which also sets the variable for every later test."""
    env = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if env:
        return os.path.abspath(env)
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    except ImportError:  # the module moved: torch's default as of 2.11-2.14
        import getpass

        return os.path.join(tempfile.gettempdir(), f"torchinductor_{getpass.getuser()}")
    return default_cache_dir()


def complete_elf(path: str) -> bool:
    """Whether the file at ``path`` is a whole 64-bit ELF file: its magic number, and its
    section header table (the linker writes it last, at the end) inside the file."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(64)
    except FileNotFoundError:  # deleted meanwhile (Inductor's own cache clearing): not broken
        return True
    if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2:  # ELFCLASS64
        return False
    order = "<" if head[5] == 1 else ">"
    (shoff,) = struct.unpack_from(order + "Q", head, 0x28)
    shentsize, shnum = struct.unpack_from(order + "HH", head, 0x3A)
    return shoff + shentsize * shnum <= size


def drop_broken_kernels(root: str) -> list[str]:
    """Delete the built files under ``root`` that are not whole ELF files, each under the
    kernel's own Inductor lock (``root/locks/<key>.lock``: a process building it now holds
    it, and is left alone); returns the deleted paths, sorted."""
    dropped = []
    locks = os.path.join(root, "locks")
    for where, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in ("locks", "precompiled_headers")]
        for name in files:
            path = os.path.join(where, name)
            if not name.endswith(_BUILT) or complete_elf(path):
                continue
            key = name.split(".")[0]
            os.makedirs(locks, exist_ok=True)
            with open(os.path.join(locks, key + ".lock"), "a") as lock:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # being built right now
                try:
                    if not complete_elf(path):
                        os.remove(path)
                        dropped.append(path)
                finally:
                    fcntl.flock(lock, fcntl.LOCK_UN)
    return sorted(dropped)
