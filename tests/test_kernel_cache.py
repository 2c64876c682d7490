import fcntl
import os
import shutil

from tests.kernel_cache import complete_elf, drop_broken_kernels, inductor_cache_dir


def _shared_object() -> str:
    import _json  # a compiled module of the standard library: a whole ELF shared object

    return _json.__file__


def test_short_kernel_builds_are_deleted_and_whole_ones_kept(tmp_path):
    real = _shared_object()
    size = os.path.getsize(real)
    (tmp_path / "uv").mkdir()
    (tmp_path / "ab").mkdir()
    (tmp_path / "precompiled_headers").mkdir()
    empty = tmp_path / "uv" / "cuvv.main.so"  # what a killed link leaves
    empty.write_bytes(b"")
    half = tmp_path / "ab" / "cabx.main.so"  # a link killed after writing half the file
    half.write_bytes(open(real, "rb").read()[: size // 2])
    half_o = tmp_path / "ab" / "cabz.optimized.o"
    half_o.write_bytes(open(real, "rb").read()[:100])
    whole = tmp_path / "ab" / "caby.main.so"
    shutil.copy(real, whole)
    source = tmp_path / "uv" / "cuvw.main.cpp"
    source.write_bytes(b"")
    header = tmp_path / "precompiled_headers" / "cpch.h.gch"
    header.write_bytes(b"gpch")
    held = tmp_path / "uv" / "cuvh.main.so"  # a process is building it now: its lock is held
    held.write_bytes(b"\x7fELF")
    (tmp_path / "locks").mkdir()
    with open(tmp_path / "locks" / "cuvh.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        dropped = drop_broken_kernels(str(tmp_path))
    assert dropped == sorted(map(str, (half, half_o, empty)))
    left = sorted(p.name for p in tmp_path.rglob("*") if p.is_file())
    locks = ["cabx.lock", "cabz.lock", "cuvh.lock", "cuvv.lock"]  # Inductor's, as it would take
    assert left == sorted(["caby.main.so", "cpch.h.gch", "cuvh.main.so", "cuvw.main.cpp", *locks])
    assert complete_elf(str(whole)) and not complete_elf(str(held))
    assert drop_broken_kernels(str(tmp_path)) == [str(held)]  # its builder gave up


def test_the_cache_dir_is_read_without_setting_the_variable(monkeypatch, tmp_path):
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    assert inductor_cache_dir() == default_cache_dir()
    assert "TORCHINDUCTOR_CACHE_DIR" not in os.environ
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "k"))
    assert inductor_cache_dir() == str(tmp_path / "k")
