"""Parameter offload through FSDP2 on the CPU: gloo, world size 2, one spawn for all checks
(started when collection ends: tests/early.py).

Each check runs inside both ranks (``torch.multiprocessing.spawn``); a failing assert on a rank
fails the test. The model is a small residual MLP stack (a ModuleList of layers, as in a
transformer) so the two processes start in seconds.
"""

from __future__ import annotations

import os

import pytest
import torch
from torch import nn

from memopt.params.host_plan import plan_host_groups
from tests import early
from tests.helpers import spawn_gloo_job

VOCAB, DIM, LAYERS = 64, 32, 4


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(DIM)
        self.up = nn.Linear(DIM, 4 * DIM)
        self.down = nn.Linear(4 * DIM, DIM)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


class Stack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.layers = nn.ModuleList(Block() for _ in range(LAYERS))
        self.head = nn.Linear(DIM, VOCAB)

    def forward(self, ids):
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x)
        logits = self.head(x).float()
        return nn.functional.cross_entropy(logits.flatten(0, 1), ids.flatten())


def _model() -> Stack:
    torch.manual_seed(0)
    return Stack()


def _batch(step: int, rank: int) -> torch.Tensor:
    return torch.randint(
        0, VOCAB, (4, 16), generator=torch.Generator().manual_seed(step * 7 + rank)
    )


def _train(model, opt, steps, rank, *, clip=None, first=0, micro=1, sched=None):
    """Losses (and clip norms) of ``steps`` optimizer steps of ``micro`` micro-batches each."""
    out = []
    for s in range(first, first + steps):
        for k in range(micro):
            loss = model(_batch(micro * s + k, rank))
            (loss / micro).backward()
        if clip == "torch":
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            out.append(float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm))
        elif clip == "memopt":
            out.append(float(opt.clip_grad_norm_(0.5)))
        opt.step()
        opt.zero_grad()
        if sched is not None:
            sched.step()
        out.append(loss.item())
    return out


def _fsdp_plain(model, mp_policy=None):
    from torch.distributed.fsdp import fully_shard

    kw = {} if mp_policy is None else {"mp_policy": mp_policy}
    for layer in model.layers:
        fully_shard(layer, **kw)
    return fully_shard(model, **kw)


def _reference(rank, steps, **kw):
    """FSDP2 without offload + torch.optim.AdamW(fused=True)."""
    model = _fsdp_plain(_model(), kw.pop("mp_policy", None))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=True)
    return _train(model, opt, steps, rank, **kw)


def _memopt(rank, fraction, **kw):
    from memopt.params import HostAdamW, shard_with_offload

    model = kw.pop("model", None) or _model()
    mp_policy = kw.pop("mp_policy", None)
    hd = kw.pop("host_dtype", "auto")
    rec = shard_with_offload(model, fraction, mp_policy=mp_policy, host_dtype=hd)
    kw.setdefault("kernel", "torch")
    opt = HostAdamW(model.parameters(), lr=1e-2, offload=rec, **kw)
    return model, opt, rec


def check_offload_matches_fsdp(rank):
    ref = _reference(rank, 3, clip="torch")
    model, opt, rec = _memopt(rank, 0.4)
    assert rec.plan.on_host == (True, False, True, False, False)
    host = [r for r in rec.placement_rows() if r["host"]]
    assert [r["name"] for r in host] == ["layers.0", "layers.2"]
    assert all(r["param_bytes"] == 33_664 // 2 for r in host)  # this rank's half of a layer
    got = _train(model, opt, 3, rank, clip="memopt")
    torch.testing.assert_close(got, ref, rtol=1e-6, atol=1e-6)


def check_user_sharded_model(rank):
    ref = _reference(rank, 2)
    model, opt, rec = _memopt(rank, 0.4, model=_fsdp_plain(_model()))
    assert rec.user_sharded and rec.plan.on_host == (True, False, True, False, False)
    assert opt.state[model.layers[0].up.weight]["exp_avg"].to_local().device.type == "cpu"
    torch.testing.assert_close(_train(model, opt, 2, rank), ref, rtol=1e-6, atol=1e-6)


def check_overlap_and_accumulation(rank):
    from memopt.params import HostAdamW, shard_with_offload

    runs, weights = [], []
    # one task per FSDP2 group per update (4 layers + root), or one per parameter (6 per
    # layer, embed + head weight and bias); 2 optimizer steps
    settings = [(False, "group", None, 10), (True, "group", None, 10), (True, "param", 1, 54)]
    for overlap, batch, threads, tasks in settings:
        model = _model()
        rec = shard_with_offload(model, 1.0)
        opt = HostAdamW(
            model.parameters(),
            lr=1e-2,
            offload=rec,
            overlap=overlap,
            accumulation_steps=2,
            kernel="torch",
            batch=batch,
            threads=threads,
        )
        runs.append(_train(model, opt, 2, rank, micro=2))
        if overlap:
            with pytest.raises(RuntimeError, match="overlap=True"):
                opt.clip_grad_norm_(1.0)
        assert opt.pipelined == overlap
        weights.append(model.state_dict()["layers.3.up.weight"].to_local())  # waits for updates
        assert opt.host_stats()["tasks"] == tasks
        opt.close()
    assert runs[0] == runs[1] == runs[2]  # same kernel, same order of updates: bitwise
    assert torch.equal(weights[0], weights[1]) and torch.equal(weights[0], weights[2])
    ref_model = _fsdp_plain(_model())
    ref_opt = torch.optim.AdamW(ref_model.parameters(), lr=1e-2, fused=True)
    ref = _train(ref_model, ref_opt, 2, rank, micro=2)
    torch.testing.assert_close(runs[0], ref, rtol=1e-6, atol=1e-6)


def check_prefetch_depth(rank):
    from memopt.params import HostAdamW, shard_with_offload

    runs = []
    for prefetch in (None, 2):
        model = _model()
        rec = shard_with_offload(model, 1.0, prefetch=prefetch)
        opt = HostAdamW(model.parameters(), lr=1e-2, offload=rec, overlap=True)
        runs.append(_train(model, opt, 2, rank))
        opt.close()
    assert runs[0] == runs[1]  # prefetch changes when copies run, not what is computed


def check_nvme_tier(rank, tmp):
    from memopt.params import HostAdamW, shard_with_offload

    runs = []
    for nvme in (None, tmp):
        model = _model()
        rec = shard_with_offload(model, 0.5)
        opt = HostAdamW(model.parameters(), lr=1e-2, offload=rec, overlap=True, nvme_dir=nvme)
        losses = _train(model, opt, 3, rank)
        state = opt.state_dict()["state"]  # host shards' moments read back from the file
        moments = [state[i][k].to_local() for i in state for k in ("exp_avg", "exp_avg_sq")]
        runs.append((losses, moments, model.state_dict()["layers.2.up.weight"].to_local()))
        if nvme is not None:
            # gloo: every local shard is a CPU tensor, so all moments are in the file: this
            # rank's half of the 37,824 parameters, 8 B each (m and v)
            disk = [r["param_bytes"] for r in opt.placement_rows() if r["where"] == "disk"]
            assert disk == [37_824 // 2 * 8]
        opt.close()
    assert runs[0][0] == runs[1][0] and torch.equal(runs[0][2], runs[1][2])
    assert all(torch.equal(a, b) for a, b in zip(runs[0][1], runs[1][1]))


def check_bf16_host_shards(rank):
    from torch.distributed.fsdp import MixedPrecisionPolicy

    mp_policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    ref = _reference(rank, 3, mp_policy=mp_policy)
    runs = {}
    _, _, rec = _memopt(rank, 0.4, mp_policy=mp_policy)  # "auto" at world size 2: fp32 shards
    assert rec.host_dtype is None and rec.host_reduce_dtype == torch.float32
    from memopt.params import adamw_native

    kernels = ("torch", "native") if adamw_native.available() else ("torch",)
    for kernel in kernels:  # the C loop in one pass, torch's kernel in three
        model, opt, rec = _memopt(rank, 0.4, mp_policy=mp_policy, kernel=kernel, host_dtype="16bit")
        assert opt.kernel == kernel and rec.host_reduce_dtype == torch.float32  # world 2: fp32
        w = model.layers[0].up.weight
        assert w.dtype == torch.bfloat16 and model.layers[1].up.weight.dtype == torch.float32
        master = opt.state[w]["master_param"].to_local()
        assert master.dtype == torch.float32 and torch.equal(master.bfloat16(), w.to_local())
        got = _train(model, opt, 3, rank)
        torch.testing.assert_close(got, ref, rtol=0, atol=2e-2)  # bf16 shards vs fp32 shards
        assert torch.equal(opt.state[w]["master_param"].to_local().bfloat16(), w.to_local())
        runs[kernel] = (got, w.to_local().clone(), opt.state[w]["exp_avg_sq"].to_local())
    if "native" in runs:
        (a, wa, va), (b, wb, vb) = runs["torch"], runs["native"]
        assert a == b and torch.equal(wa, wb) and torch.equal(va, vb)  # bitwise the same update


def check_checkpoint_round_trip(rank, tmp):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    from memopt.params import HostAdamW, shard_with_offload

    def build():
        model = _model()
        rec = shard_with_offload(model, 0.5)
        opt = HostAdamW(model.parameters(), lr=1e-2, offload=rec, kernel="torch")
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
        return model, opt, sched

    model, opt, sched = build()
    _train(model, opt, 2, rank, sched=sched)
    msd, osd = get_state_dict(model, opt)
    dcp.save({"model": msd, "optim": osd, "sched": sched.state_dict()}, checkpoint_id=tmp)
    after = _train(model, opt, 2, rank, first=2, sched=sched)
    model2, opt2, sched2 = build()
    msd2, osd2 = get_state_dict(model2, opt2)
    state = {"model": msd2, "optim": osd2, "sched": sched2.state_dict()}
    dcp.load(state, checkpoint_id=tmp)
    set_state_dict(model2, opt2, model_state_dict=state["model"], optim_state_dict=state["optim"])
    sched2.load_state_dict(state["sched"])
    assert opt2.param_groups[0]["lr"] == 1e-2 / 4
    assert _train(model2, opt2, 2, rank, first=2, sched=sched2) == after


def check_auto_placement(rank):
    """param_offload="auto" and a byte budget: the placement grows after the 5th step (shards
    and moments move to the host mid-training) and the losses stay FSDP2's."""
    from memopt.params import HostAdamW, shard_with_offload
    from memopt.params.rates import HostRates

    ref = _reference(rank, 10)
    # auto: nothing on the host at first; timed alone, an AdamW so fast that every group's
    # update is free: a probe moves half the bytes after step 5, steps 6-8 time the AdamW
    # under training (a real CPU rate, still far faster than these tiny updates need), then
    # the rest move. budget: at most 45,000 B of this rank's 75,648 B of shards on the device
    # -> share 0.405 needed (layers 0 and 2: 0.445); an AdamW of 1 B/s frees nothing more, so
    # the choice is made at once (nothing to probe)
    for mode, rates, first, final in [
        ("auto", HostRates(1e15), (False,) * 5, (True,) * 5),
        (45_000, HostRates(1.0), (True, False, True, False, False), None),
    ]:
        model = _model()
        rec = shard_with_offload(model, mode, rates=rates)
        assert rec.plan.on_host == first
        opt = HostAdamW(model.parameters(), lr=1e-2, offload=rec, overlap=True)
        got = _train(model, opt, 4, rank)
        assert rec.auto.choice is None and rec.auto.status == "measuring"
        got += _train(model, opt, 3, rank, first=4)
        assert len(rec.auto.step_s) == 3
        if final:
            probe = rec.auto.probe
            assert rec.auto.status == "probing" and rec.plan.on_host == probe.on_host
            assert 0 < sum(probe.on_host) < 5 and probe.host_share >= 0.5
            got += _train(model, opt, 3, rank, first=7)
            assert rec.plan.on_host == final and len(rec.auto.probe_busy_s) == 3
            moved = sum(final) - sum(probe.on_host)
            assert rec.auto.status.startswith(
                f"chosen after step 8 (probe of {sum(probe.on_host)} group(s) after step 5; "
                "host AdamW "
            ) and rec.auto.status.endswith(f"{moved} more group(s) moved to the host")
        else:
            got += _train(model, opt, 3, rank, first=7)
            assert rec.plan.on_host == first and rec.auto.probe is None
            assert rec.auto.status == "chosen after step 5: 0 group(s) moved to the host"
        w = model.layers[1].up.weight
        assert opt.state[w]["exp_avg"].to_local().device.type == "cpu"
        stats = opt.host_stats()
        assert stats["auto"]["choice"]["host_share"] == rec.plan.host_share
        assert stats["host_pinned_bytes"] == 0  # gloo: nothing is pinned
        torch.testing.assert_close(got, ref, rtol=1e-6, atol=1e-6)
        opt.close()


def check_device_overlap(rank):
    """Device shards updated as each group's reduce-scatter lands (CPU shards taken for device
    ones: on the CPU every shard is a host shard): FSDP2 + torch's fused AdamW's losses, and no
    gradient left after any backward."""
    from memopt.params import HostAdamW

    ref = _reference(rank, 3)
    on_host = HostAdamW.__dict__["_on_host"]
    HostAdamW._on_host = staticmethod(lambda p: False)
    try:
        model = _fsdp_plain(_model())
        opt = HostAdamW(model.parameters(), lr=1e-2, overlap=True, device_overlap=True, model=model)
        left = []
        orig_step = opt.step

        def step():
            left.append(sum(p.grad is not None for p in model.parameters()))
            return orig_step()

        opt.step = step
        got = _train(model, opt, 3, rank)
        torch.testing.assert_close(got, ref, rtol=1e-6, atol=1e-6)
        assert left == [0, 0, 0] and opt._device.updates == 3 * (LAYERS * 6 + 3)
        opt.close()
    finally:
        HostAdamW._on_host = on_host


def check_state_swap(rank: int) -> None:
    """memopt.params.StateSwap at world size 2: the local shards of AdamW's moments move and
    the sharded training is bitwise that of FSDP2 without the swap (tests/test_state_swap.py
    has the rest)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from memopt.params.state_swap import StateSwap
    from tests.test_state_swap import WEIGHT, Net, _step

    mesh = init_device_mesh("cpu", (2,))
    ref, model = Net(), Net()
    for m in (ref, model):
        for layer in m.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(m, mesh=mesh)
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    points = [model.layers[2], model.layers[1]]
    swap = StateSwap(opt, reload_at=points, min_bytes=WEIGHT // 2)
    for i in range(4):
        assert torch.equal(_step(model, opt, 10 * rank + i), _step(ref, opt_ref, 10 * rank + i))
    # each rank holds half of every weight's moments: six halves of 16 KiB go, in two groups
    # whose local shards share one storage each once back (the DTensors' own local tensors)
    assert (swap.stats.tensors, swap.stats.away_bytes) == (6, 6 * WEIGHT // 2)
    assert (swap.stats.reloads, swap.stats.late) == (3, 0)
    local = [opt.state[model.layers[k].weight][m].to_local() for k in range(3)
             for m in ("exp_avg", "exp_avg_sq")]  # fmt: skip
    ptrs = [t.untyped_storage().data_ptr() for t in local]
    assert len(set(ptrs[:3])) == 1 and len(set(ptrs[3:])) == 1 and ptrs[0] != ptrs[3]
    for a, b in zip(model.parameters(), ref.parameters(), strict=True):
        assert torch.equal(a.full_tensor(), b.full_tensor())


def _checks(rank: int, tmp: str) -> None:
    check_offload_matches_fsdp(rank)
    check_user_sharded_model(rank)
    check_overlap_and_accumulation(rank)
    check_prefetch_depth(rank)
    check_nvme_tier(rank, tmp)
    check_bf16_host_shards(rank)
    check_checkpoint_round_trip(rank, os.path.join(tmp, "ckpt"))
    check_auto_placement(rank)
    check_device_overlap(rank)
    check_state_swap(rank)


JOB = ("params_fsdp", spawn_gloo_job("tests.test_params_fsdp"), 1800)


def start_early(items) -> None:
    """The spawn starts when collection ends and overlaps the suite (tests/early.py)."""
    if early.selected(items, __name__, "test_fsdp_offload_gloo_world_size_2"):
        early.submit(*JOB)


def test_fsdp_offload_gloo_world_size_2():
    """Losses equal FSDP2 without offload; clipping equals clip_grad_norm_; DCP round trip."""
    done = early.result(*JOB)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]


def test_fsdp_host_plan_picks_fewest_spread_groups():
    names = ["l0", "l1", "l2", "l3", ""]
    sizes = [100, 100, 100, 100, 50]
    assert plan_host_groups(names, sizes, 0.0).on_host == (False,) * 5
    assert plan_host_groups(names, sizes, 0.2).on_host == (True, False, False, False, False)
    half = plan_host_groups(names, sizes, 0.4)
    assert half.on_host == (True, False, True, False, False) and half.host_bytes == 200
    assert plan_host_groups(names, sizes, 0.9).on_host == (True, True, True, True, True)
    assert plan_host_groups(names, sizes, 1.0).host_share == 1.0
    with pytest.raises(ValueError, match="must be in"):
        plan_host_groups(names, sizes, 1.5)
