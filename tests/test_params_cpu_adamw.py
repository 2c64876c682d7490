"""CPUAdamW numerics against torch.optim.AdamW (fp32), and the NVMe tier's round trips."""

import pytest
import torch

from memopt._torch_compat import has_fused_adamw
from memopt.params import CPUAdamW, NvmeStore, sequential_throughput


def params(seed: int = 0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    shapes = [(37, 11), (5,), (64, 64), (3, 7, 2)]
    return [torch.nn.Parameter(torch.randn(s, generator=g).to(dtype)) for s in shapes]


def run(opt, ps, steps: int, skip: int | None = None):
    g = torch.Generator().manual_seed(1)
    for s in range(steps):
        for i, p in enumerate(ps):
            if i == skip and s % 2:
                continue  # a parameter without a gradient this step is not updated
            grad = torch.randn(p.shape, generator=g).to(p.dtype)
            _accumulate(p, grad)
        opt.step()
        opt.zero_grad()


def _accumulate(p, grad):
    (p * grad).sum().backward()


@pytest.mark.parametrize("kw", [{}, {"chunk_numel": 1000}, {"threads": 3, "chunk_numel": 700}])
def test_matches_fused_torch_adamw_exactly(kw):
    a, b = params(), params()
    ref = torch.optim.AdamW(a, lr=3e-3, betas=(0.8, 0.95), weight_decay=0.05, fused=True)
    opt = CPUAdamW(b, lr=3e-3, betas=(0.8, 0.95), weight_decay=0.05, **kw)
    run(ref, a, 5, skip=1)
    run(opt, b, 5, skip=1)
    for x, y in zip(a, b):
        assert torch.equal(x, y)


def test_matches_default_torch_adamw_and_fallback_kernel():
    a, b, c = params(), params(), params()
    ref = torch.optim.AdamW(a, lr=1e-2, weight_decay=0.1)
    opt = CPUAdamW(b, lr=1e-2, weight_decay=0.1)
    slow = CPUAdamW(c, lr=1e-2, weight_decay=0.1)
    slow._use_fused = False  # the plain-torch formula used where the fused kernel is missing
    for o, ps in ((ref, a), (opt, b), (slow, c)):
        run(o, ps, 6)
    for x, y, z in zip(a, b, c):
        torch.testing.assert_close(y, x, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(z, x, rtol=1e-6, atol=1e-6)
    assert has_fused_adamw("cpu")


def test_bf16_params_keep_fp32_master():
    a = [p.detach().clone().requires_grad_() for p in params()]
    b = params(dtype=torch.bfloat16)
    ref = torch.optim.AdamW(a, lr=1e-3, fused=True)
    opt = CPUAdamW(b, lr=1e-3)
    # the fp32 reference sees the same bf16-rounded starting point and gradients
    with torch.no_grad():
        for x, y in zip(a, b):
            x.copy_(y.float())
    opt.load_state_dict(opt.state_dict())
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        for x, y in zip(a, b):
            grad = torch.randn(x.shape, generator=g).bfloat16()
            _accumulate(x, grad.float())
            _accumulate(y, grad)
        for o in (ref, opt):
            o.step()
            o.zero_grad()
    for gi, x in enumerate(a):
        info = opt._infos[id(b[gi])]
        master = opt._flats[0]["master"][info.offset : info.offset + info.numel]
        assert torch.equal(master.view(x.shape), x.detach())  # master is exact fp32 AdamW
        assert torch.equal(b[gi].detach(), x.detach().bfloat16())  # weight = master rounded


def test_bad_arguments():
    with pytest.raises(ValueError, match="betas"):
        CPUAdamW(params(), betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="accumulation_steps"):
        CPUAdamW(params(), accumulation_steps=0)
    with pytest.raises(ValueError, match="nvme_dir is not supported"):
        CPUAdamW(params(), fused_backward=True, nvme_dir="/tmp")
    with pytest.raises(ValueError, match="does not exist"):
        CPUAdamW(params(), nvme_dir="/nonexistent/memopt")


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


def test_nvme_optimizer_matches_in_memory(tmp_path):
    a, b = params(), params()
    ref = CPUAdamW(a, lr=1e-2, weight_decay=0.1)
    opt = CPUAdamW(b, lr=1e-2, weight_decay=0.1, nvme_dir=str(tmp_path), chunk_numel=1000)
    run(ref, a, 4, skip=2)
    run(opt, b, 4, skip=2)
    for x, y in zip(a, b):
        assert torch.equal(x, y)
    assert torch.equal(opt.from_flats(0, "exp_avg_sq"), ref.from_flats(0, "exp_avg_sq"))
    sd = opt.state_dict()
    fresh = CPUAdamW(params(), nvme_dir=str(tmp_path))
    fresh.load_state_dict(sd)
    assert torch.equal(fresh.from_flats(0, "exp_avg"), opt.from_flats(0, "exp_avg"))
    rows = opt.placement_rows()
    assert [r["where"] for r in rows] == ["cpu", "disk"]
    assert rows[1]["param_bytes"] == 2 * 4 * opt._flats[0]["master"].numel()
    assert opt._stores[0].read_bytes > 0 and opt._stores[0].write_bytes > 0
    opt.close()
    fresh.close()


def test_sequential_throughput(tmp_path):
    t = sequential_throughput(str(tmp_path), 1 << 20, block=1 << 18)
    assert t["read_Bps"] > 0 and t["write_Bps"] > 0
    assert list(tmp_path.iterdir()) == []
