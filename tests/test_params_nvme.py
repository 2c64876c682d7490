"""The NVMe tier's store (HostAdamW's moments in a file: tests/test_params_host_adamw.py) and its
throughput probe; memopt.CPUAdamW's removal names what replaced it."""

import pytest
import torch

import memopt
from memopt.params import NvmeStore, sequential_throughput


def test_nvme_store_round_trip(tmp_path):
    store = NvmeStore(str(tmp_path), 4096)
    a = torch.arange(256, dtype=torch.float32)
    b = torch.arange(512, dtype=torch.int16).to(torch.bfloat16)
    w1, w2 = store.write(0, a), store.write(1024, b)
    out_a, out_b = torch.empty_like(a), torch.empty_like(b)
    store.read(0, out_a, after=w1).result()
    store.read(1024, out_b, after=w2).result()
    assert torch.equal(out_a, a) and torch.equal(out_b, b)
    assert (store.write_bytes, store.read_bytes) == (2048, 2048)
    assert store.throughput()["read_Bps"] > 0
    with pytest.raises(ValueError, match="outside"):
        store.write(4000, a)
    path = store.path
    store.close()
    assert not (tmp_path / path).exists()


def test_sequential_throughput(tmp_path):
    t = sequential_throughput(str(tmp_path), 1 << 20, block=1 << 18)
    assert t["read_Bps"] > 0 and t["write_Bps"] > 0
    assert list(tmp_path.iterdir()) == []


def test_removed_cpu_adamw_names_its_replacement():
    for get in (lambda: memopt.CPUAdamW, lambda: memopt.params.CPUAdamW):
        with pytest.raises(memopt.ConfigError, match="torchao.optim.CPUOffloadOptimizer"):
            get()
    with pytest.raises(memopt.ConfigError, match="was removed"):
        from memopt.params import CPUAdamW  # noqa: F401
    with pytest.raises(AttributeError, match="no attribute 'CPUAdamw'"):
        memopt.params.CPUAdamw  # noqa: B018 -- any other name stays an AttributeError
