"""HostAdamW and its update kernels on plain CPU tensors (no process group)."""

from __future__ import annotations

import os
import threading

import pytest
import torch

from memopt.params import HostAdamW
from memopt.params import adamw_kernel as k
from memopt.params import adamw_native as an

#: the native loop needs a C compiler with OpenMP (present on CI and the GPU host)
needs_cc = pytest.mark.skipif(not an.available(), reason="no C compiler with OpenMP here")
STEP = k.AdamWStep(lr=1e-2, beta1=0.9, beta2=0.99, eps=1e-8, weight_decay=0.1, step=3)


def _state(n: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    w, grad = torch.randn(n, generator=g), torch.randn(n, generator=g)
    m, v = torch.randn(n, generator=g), torch.rand(n, generator=g)
    return w, grad, m, v


def _torch_reference(w, grad, m, v, step: k.AdamWStep):
    """torch.optim.AdamW(fused=True) from the same state, ``step - 1`` steps already taken."""
    p = torch.nn.Parameter(w.clone())
    p.grad = grad.clone()
    opt = torch.optim.AdamW(
        [p], lr=step.lr, betas=(step.beta1, step.beta2), eps=step.eps,
        weight_decay=step.weight_decay, fused=True,
    )  # fmt: skip
    opt.state[p] = {"step": torch.tensor(float(step.step - 1)), "exp_avg": m.clone(),
                    "exp_avg_sq": v.clone()}  # fmt: skip
    opt.step()
    return p.detach(), opt.state[p]["exp_avg"], opt.state[p]["exp_avg_sq"]


def test_torch_update_in_pieces_is_torch_fused_bitwise(monkeypatch):
    monkeypatch.setattr(k, "CHUNK", 1000)  # 3 pieces and a tail
    w, grad, m, v = _state(3500)
    ref = _torch_reference(w, grad.bfloat16().float(), m, v, STEP)
    out = torch.empty(3500, dtype=torch.bfloat16)
    k.torch_update(w, grad.bfloat16(), m, v, out, STEP)
    for got, want in zip((w, m, v), ref):
        assert torch.equal(got, want)
    assert torch.equal(out, w.bfloat16())


@pytest.mark.parametrize(
    "grad_dtype,write_back,maximize",
    [(torch.float32, False, False), (torch.bfloat16, True, False), (torch.bfloat16, False, True),
     (torch.float32, True, True)],
)  # fmt: skip
@needs_cc
def test_native_update_is_torch_fused_bitwise(grad_dtype, write_back, maximize):
    """One call over three tensors split over three threads (pieces cross the tensors'
    borders) gives torch's fused update bit for bit, and the bf16 write-back is torch's cast."""
    from dataclasses import replace

    step = replace(STEP, maximize=maximize)
    sizes = (70_016, 64, 100_032)
    states = [_state(n, seed=i) for i, n in enumerate(sizes)]
    grads = [g.to(grad_dtype) for _, g, _, _ in states]
    refs = []
    for (w, _, m, v), g in zip(states, grads):
        w2, m2, v2 = w.clone(), m.clone(), v.clone()
        k.torch_update(w2, g, m2, v2, None, step)
        refs.append((w2, m2, v2))
    outs = [torch.empty(n, dtype=torch.bfloat16) if write_back else None for n in sizes]
    an.group_update(
        [s[0] for s in states], grads, [s[2] for s in states], [s[3] for s in states], outs,
        [step.tensor()] * 3, threads=3,
    )  # fmt: skip
    for (w, _, m, v), ref, out in zip(states, refs, outs):
        for got, want in zip((w, m, v), ref):
            assert torch.equal(got, want)
        assert out is None or torch.equal(out.view(torch.int16), w.bfloat16().view(torch.int16))


@needs_cc
@pytest.mark.parametrize("beta1", [0.0, 0.5, 0.3])
def test_native_update_follows_torchs_lerp_for_any_beta1(beta1):
    """torch's ``exp_avg.lerp_(g, 1 - beta1)`` starts from ``g`` when the weight is >= 0.5: at
    beta1 0 an ``m`` of 1 and a gradient of 1e-8 give 1e-8, not 0."""
    from dataclasses import replace

    step = replace(STEP, beta1=beta1)
    w, g, m, v = _state(4096, seed=7)
    m[:8], g[:8] = 1.0, 1e-8
    ref = [t.clone() for t in (w, m, v)]
    k.torch_update(*ref[:1], g, *ref[1:], None, step)
    an.group_update([w], [g], [m], [v], [None], [step.tensor()], threads=2)
    for got, want in zip((w, m, v), ref):
        assert torch.equal(got, want)
    if beta1 == 0.0:
        assert m[:8].tolist() == [pytest.approx(1e-8)] * 8


@needs_cc
def test_native_update_on_a_size_torch_ends_in_its_scalar_loop():
    """87 elements: torch updates the last ``87 % vector width`` in a scalar loop whose ``v``
    may round an ulp apart; ``w`` and ``m`` stay bitwise, ``v`` within an ulp."""
    w, g, m, v = _state(87, seed=3)
    ref = [t.clone() for t in (w, m, v)]
    k.torch_update(ref[0], g, ref[1], ref[2], None, STEP)
    an.group_update([w], [g], [m], [v], [None], [STEP.tensor()], threads=1)
    assert torch.equal(m, ref[1])
    torch.testing.assert_close(v, ref[2], rtol=2.4e-7, atol=0)
    torch.testing.assert_close(w, ref[0], rtol=2.4e-7, atol=1e-9)


@needs_cc
def test_native_gradient_buffer_pass_is_torch_ops_bitwise():
    """memopt.params.grad_acc's one-pass fold and check against torch's ops on an fp32 buffer and
    bf16 gradients (a size that does not divide the threads' pieces); clipping's sum of squares
    against a double sum."""
    n = 100_003
    g = torch.Generator().manual_seed(1)
    acc, old = torch.randn(n, generator=g), (torch.randn(n, generator=g) * 3).bfloat16()
    new = torch.randn(n, generator=g).bfloat16()
    a, out = acc.clone(), new.clone()  # fold into an exact buffer whose .grad is unchanged
    vis = acc.bfloat16()
    assert an.acc_pass(a, vis, 2, out, out, 4) == 0
    assert torch.equal(a, acc + new.float()) and torch.equal(out, (acc + new.float()).bfloat16())
    a = torch.empty(n)  # the first fold: from the bf16 gradient
    assert an.acc_pass(a, old, 1, new, None, 3) == 0
    assert torch.equal(a, old.float().add_(new))
    vis[7], vis[99_999] = 5.0, -2.0  # changed outside: those elements are taken from .grad
    a = acc.clone()
    assert an.acc_pass(a, vis, 2, threads=4) == 2
    want = acc.clone()
    want[7], want[99_999] = 5.0, -2.0
    assert torch.equal(a, want)
    xs = [acc, old, torch.empty(0), acc[:5]]
    want = sum(float(x.double().square().sum()) for x in xs)
    for threads in (1, 3, 16):  # a double sum: every order agrees to ~1e-15
        assert abs(an.sumsq(xs, threads) - want) <= 1e-13 * want
    assert an.sumsq(xs, 3) == an.sumsq(xs, 3)
    with pytest.raises(ValueError, match="contiguous fp32 or bf16"):
        an.sumsq([acc.half()], 2)


@needs_cc
def test_native_write_back_rounds_like_torch():
    """lr 0 keeps w, so out = bf16(w): ties to even, NaN, infinities, overflow, subnormals."""
    bits = [0x3F808000, 0x3F818000, 0x3F808001, 0x7F7FFFFF, 0x7F800000, 0xFF800000,
            0x7FC00001, 0xFFA00000, 0x80000000, 0x00000001, 0x00018000, 0x3F7FFFFF]  # fmt: skip
    w = torch.tensor(bits, dtype=torch.int64).to(torch.int32).view(torch.float32)
    n = w.numel()
    out = torch.empty(n, dtype=torch.bfloat16)
    zero = k.AdamWStep(lr=0.0, beta1=0.9, beta2=0.99, eps=1e-8, weight_decay=0.0, step=1)
    want = w.bfloat16().view(torch.int16)
    an.group_update([w], [torch.zeros(n)], [torch.zeros(n)], [torch.zeros(n)], [out],
                    [zero.tensor()], threads=1)  # fmt: skip
    nan = w.isnan()  # a NaN stays NaN; its bits differ between torch's own paths (0x7FC0, 0xFFFF)
    assert nan.tolist() == [False] * 6 + [True, True] + [False] * 4
    assert out[nan].isnan().all() and out.view(torch.int16)[~nan].tolist() == want[~nan].tolist()


@needs_cc
def test_kernel_choice_and_a_missing_compiler(monkeypatch, tmp_path):
    p = torch.nn.Parameter(torch.randn(64))
    assert HostAdamW([p]).kernel == "native" and HostAdamW([p], kernel="torch").kernel == "torch"
    monkeypatch.setattr(an, "_LIB", [])  # forget the built loop; restored after the test
    monkeypatch.setenv("MEMOPT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    with pytest.raises(an.NativeKernelError, match="no-such-cc"):
        HostAdamW([p], kernel="native")
    with pytest.warns(UserWarning, match="using torch's fused CPU kernel"):
        assert HostAdamW([p]).kernel == "torch"
    with pytest.raises(ValueError, match="kernel='fast' must be one of 'auto', 'native'"):
        HostAdamW([p], kernel="fast")


def test_host_adamw_trains_like_torch_and_loads_its_state_dict():
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    model.load_state_dict(ref.state_dict())
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2, fused=True)
    opt = HostAdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)
    ref_sched = torch.optim.lr_scheduler.StepLR(ref_opt, 1, gamma=0.5)
    x = torch.randn(32, 8)
    for _ in range(3):
        for mod, o, sc in ((ref, ref_opt, ref_sched), (model, opt, sched)):
            mod(x).square().mean().backward()
            o.step()
            o.zero_grad()
            sc.step()
    for a, b in zip(model.parameters(), ref.parameters()):
        assert torch.equal(a, b)
    fresh = HostAdamW(model.parameters(), lr=1e-2)
    fresh.load_state_dict(ref_opt.state_dict())
    assert fresh.param_groups[0]["lr"] == 1e-2 / 8
    assert torch.equal(
        fresh.state[model[0].weight]["exp_avg"], ref_opt.state[ref[0].weight]["exp_avg"]
    )


def test_host_adamw_bf16_parameter_keeps_fp32_master_and_state_across_load():
    p = torch.nn.Parameter(torch.randn(64).bfloat16())
    opt = HostAdamW([p], lr=1e-2)
    master = opt.state[p]["master_param"]
    assert master.dtype == torch.float32 and torch.equal(master.bfloat16(), p.detach())
    p.grad = torch.randn(64).bfloat16()
    opt.step()
    assert torch.equal(opt.state[p]["master_param"].bfloat16(), p.detach())
    sd = opt.state_dict()
    opt2 = HostAdamW([p], lr=1e-2)
    opt2.load_state_dict(sd)
    for key in ("exp_avg", "exp_avg_sq", "master_param"):
        assert opt2.state[p][key].dtype == torch.float32
        assert torch.equal(opt2.state[p][key], opt.state[p][key])
    rows = opt.placement_rows()
    assert [(r["name"], r["param_bytes"]) for r in rows] == [
        ("optimizer group 0: exp_avg+exp_avg_sq", 512),
        ("optimizer group 0: fp32 master", 256),
    ]


@pytest.mark.parametrize("kernel,maximize", [("native", False), ("native", True), ("torch", False)])
def test_host_adamw_clips_like_torch(kernel, maximize):
    """The norm is torch's (to an fp32 rounding: the host sum is in double), the update is
    bitwise torch's clip then fused AdamW; ``.grad`` of host shards is left unscaled; a second
    call measures the clipped gradients; ``zero_grad`` drops the factor."""
    if kernel == "native" and not an.available():
        pytest.skip("no C compiler")
    torch.manual_seed(0)
    a = [torch.nn.Parameter(torch.randn(n)) for n in (64, 128, 1024)]  # no scalar tails
    b = [torch.nn.Parameter(t.detach().clone()) for t in a]
    kw = dict(lr=0.1, weight_decay=0.01, maximize=maximize)
    ref = torch.optim.AdamW(b, fused=True, **kw)
    opt = HostAdamW(a, kernel=kernel, **kw)

    def grads():
        raw = [torch.randn(p.numel()) * 3 for p in a]
        for pa, pb, r in zip(a, b, raw):
            pa.grad, pb.grad = r.clone(), r.clone()
        return raw

    for calls in (1, 2):  # one clip: bitwise; two: the factors multiply (an fp32 rounding)
        raw = grads()
        for _ in range(calls):
            want = torch.nn.utils.clip_grad_norm_(b, 1.0)
            torch.testing.assert_close(opt.clip_grad_norm_(1.0), want, rtol=2e-6, atol=0)
        for pa, r in zip(a, raw):
            assert torch.equal(pa.grad, r)
        ref.step()
        opt.step()
        for pa, pb in zip(a, b):
            tol = 0 if calls == 1 else 1e-5
            torch.testing.assert_close(pa, pb, rtol=tol, atol=tol * 1e-2)
        for pa, pb in zip(a, b):  # the next round starts from the same state
            pa.data.copy_(pb.data)
            for key in ("exp_avg", "exp_avg_sq"):
                opt.state[pa][key].copy_(ref.state[pb][key])
    grads()  # a factor measured, then zero_grad and new gradients: the step is unscaled
    opt.clip_grad_norm_(1e-3)
    opt.zero_grad()
    grads()
    opt.step()
    ref.step()
    for pa, pb in zip(a, b):
        torch.testing.assert_close(pa, pb, rtol=0, atol=0)
    with pytest.raises(ValueError, match="kernel="):
        HostAdamW(a, kernel="fast")


def test_host_adamw_threads_apply_to_its_worker_only():
    torch.get_num_threads()
    before = torch.get_num_threads()
    p = torch.nn.Parameter(torch.randn(64))
    opt = HostAdamW([p], lr=1e-2, threads=1)
    p.grad = torch.randn(64)
    opt.step()
    assert opt.worker_threads == 1 and opt.threads == 1
    assert torch.get_num_threads() == before
    assert opt.host_stats()["tasks"] == 1
    opt.close()
    with pytest.raises(ValueError, match="threads="):
        HostAdamW([p], threads="many")
    with pytest.raises(ValueError, match="batch="):
        HostAdamW([p], batch="layer")


@pytest.mark.skipif(not hasattr(os, "setpriority"), reason="needs os.setpriority (Linux)")
def test_host_adamw_nice_lowers_its_worker_and_team_only():
    # the update worker runs at nice 7, with its OpenMP team (a team of 2 runs a parallel
    # loop); the calling thread keeps its priority; the update is the same as at nice 0
    ps = [torch.nn.Parameter(torch.ones(1 << 16)) for _ in range(2)]
    opts = [HostAdamW([p], lr=1e-2, threads=2, nice=n) for p, n in zip(ps, (0, 7))]
    for p, opt in zip(ps, opts):
        p.grad = torch.full_like(p, 0.5)
        opt.step()
        opt.wait()
    assert torch.equal(ps[0], ps[1])
    mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    workers = []
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/comm") as f:
            if f.read().startswith("memopt-adamw"):
                workers.append(os.getpriority(os.PRIO_PROCESS, int(tid)))
    # the nice one and its team member; the other and workers other tests left running
    assert workers.count(mine + 7) == 2 and workers.count(mine) >= 2
    assert set(workers) == {mine, mine + 7}
    for opt in opts:
        opt.close()
    with pytest.raises(ValueError, match="nice=20 must be an int in 0..19"):
        HostAdamW(ps[:1], nice=20)


def test_host_adamw_nvme_tier_is_bitwise_the_in_memory_update(tmp_path):
    torch.manual_seed(0)
    shapes = [(33, 7), (5,), (64, 16)]
    runs = []
    for nvme in (None, str(tmp_path)):
        ps = [torch.nn.Parameter(torch.randn(sh, generator=torch.Generator().manual_seed(i)))
              for i, sh in enumerate(shapes)]  # fmt: skip
        opt = HostAdamW(ps, lr=1e-2, weight_decay=0.1, nvme_dir=nvme)
        for step in range(3):
            for i, p in enumerate(ps):
                p.grad = torch.randn(
                    p.shape, generator=torch.Generator().manual_seed(99 * step + i)
                )
            opt.step()
        runs.append(([p.detach().clone() for p in ps], opt.state_dict(), opt.placement_rows()))
        if nvme is not None:
            assert "exp_avg" not in opt.state[ps[0]]  # only in the file
            assert len(list(tmp_path.iterdir())) == 1
            opt.load_state_dict(runs[0][1])  # loads torch's format back into the file
            assert torch.equal(opt.state_dict()["state"][2]["exp_avg_sq"],
                               runs[0][1]["state"][2]["exp_avg_sq"])  # fmt: skip
        opt.close()
    (w0, sd0, _), (w1, sd1, rows1) = runs
    assert all(torch.equal(a, b) for a, b in zip(w0, w1))
    for i in range(len(shapes)):
        for key in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(sd0["state"][i][key], sd1["state"][i][key])
    disk = [r for r in rows1 if r["where"] == "disk"]
    assert [r["param_bytes"] for r in disk] == [8 * (33 * 7 + 5 + 64 * 16)]
    assert not list(tmp_path.iterdir())  # the file is deleted on close


def test_rehome_gives_a_dtensor_parameter_a_host_shard_in_place():
    """FSDP2 assigns host gradients to a group moved to the host: the parameter object (held
    by the optimizer) must become a host DTensor, hooks kept. 'meta' stands in for CUDA."""
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor, Shard, init_device_mesh

    from memopt.params._fsdp_compat import rehome

    created = not dist.is_initialized()
    if created:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        local = torch.zeros(4, 3, device="meta")
        p = torch.nn.Parameter(DTensor.from_local(local, mesh, [Shard(0)], run_check=False))
        seen = []
        p.register_post_accumulate_grad_hook(lambda t: seen.append(t.grad.device.type))
        held = {p: "optimizer state"}
        rehome(p, torch.arange(12.0).view(4, 3))
        assert held[p] == "optimizer state" and p.device.type == "cpu" and p.requires_grad
        assert p.shape == (4, 3) and p.to_local().sum().item() == 66.0
        p.grad = DTensor.from_local(torch.ones(4, 3), mesh, [Shard(0)], run_check=False)
        assert len(p._post_accumulate_grad_hooks) == 1  # the hook came along
        same = torch.ones(4, 3)
        rehome(p, same)  # same device: only the local tensor changes
        assert p._local_tensor is same
    finally:
        if created:
            dist.destroy_process_group()


def test_auto_threads_share_the_host_between_local_ranks(monkeypatch):
    """Default "auto": this process's cores over torchrun's local ranks, less one."""
    from memopt.params import threads

    monkeypatch.setattr(threads, "host_cores", lambda: 32)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert threads.resolve_threads("auto") == 31
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert threads.resolve_threads("auto") == 15
    assert HostAdamW([torch.nn.Parameter(torch.zeros(4))]).threads == 15
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "64")
    assert threads.resolve_threads("auto") == 1
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "x")  # not torchrun's: one process
    assert threads.resolve_threads("auto") == 31
