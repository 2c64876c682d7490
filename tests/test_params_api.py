"""memopt.optimize(model, param_offload=f) + memopt.HostAdamW through the public entry point
(FSDP2 at world size 1 on the CPU: memopt creates the process group; the test removes it)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.distributed as dist

import memopt
from tests.helpers import tiny_llama


@pytest.fixture
def no_process_group():
    assert not dist.is_initialized()
    yield
    if dist.is_initialized():
        dist.destroy_process_group()


def test_optimize_fsdp_param_offload_trains_like_adamw_and_reports_placement(no_process_group):
    torch.manual_seed(0)
    ref = tiny_llama(num_hidden_layers=4)
    model = copy.deepcopy(ref)
    ids = torch.randint(1, 128, (2, 12))
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2, fused=True)
    opt_model = memopt.optimize(model, param_offload=0.5, device="cpu")
    rec = memopt.param_offload_handle(opt_model)
    assert rec is memopt.param_offload_handle(model) and dist.get_world_size() == 1
    # 4 layers of 147,968 B, the untied lm_head (32,768 B) as its own group and a 33,024 B root:
    # 3 of the 5 groups before the root, spread, reach half of 657,664 B.
    assert rec.head == "lm_head" and rec.plan.group_bytes[4:] == (32_768, 33_024)
    assert rec.plan.on_host == (True, True, False, True, False, False)
    assert rec.plan.host_bytes == 443_904
    opt = memopt.HostAdamW(model.parameters(), lr=1e-2, offload=rec)
    for _ in range(2):
        ref_opt.zero_grad()
        want = ref(input_ids=ids, labels=ids).loss
        want.backward()
        ref_opt.step()
        opt.zero_grad()
        loss = opt_model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        torch.testing.assert_close(loss, want, rtol=1e-6, atol=1e-6)
    rep = memopt.report(opt_model, optimizer=opt)
    rows = rep.to_dict()["placement"]
    assert [r["name"] for r in rows if r.get("host")] == [f"model.layers.{i}" for i in (0, 1, 3)]
    assert "total MiB:" in rep.table()


def test_param_offload_fraction_validated():
    with pytest.raises(memopt.ConfigError, match=r"param_offload=1.5 must be a number in \[0, 1\]"):
        memopt.optimize(tiny_llama(), param_offload=1.5)


def test_optimize_param_offload_auto_grows_after_measuring_and_trains_like_adamw(
    no_process_group,
):
    from memopt.params import HostRates

    torch.manual_seed(0)
    ref = tiny_llama(num_hidden_layers=4)
    model = copy.deepcopy(ref)
    ids = torch.randint(1, 128, (2, 12))
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2, fused=True)
    # at most 300,000 B of the 657,664 B of parameters on the device: share 0.544 needed,
    # 3 layers of 147,968 B; an AdamW at 1e15 B/s hides the rest's update too (the untied
    # lm_head, 32,768 B, and the root, 33,024 B, are groups of their own)
    opt_model = memopt.optimize(
        model, param_offload="300000B", device="cpu", host_rates=HostRates(1e15)
    )
    rec = memopt.param_offload_handle(opt_model)
    start = (True, True, False, True, False, False)  # 4 layers, lm_head, root: 3 spread groups
    assert rec.plan.on_host == start and rec.auto.need == pytest.approx(1 - 300_000 / 657_664)
    opt = memopt.HostAdamW(model.parameters(), lr=1e-2, offload=rec, overlap=True)
    # steps 3-5 timed: the first estimate asks for every group; the probe moves half of what it
    # adds (share 0.900: layer 2); steps 6-8 time the host AdamW under training, then the rest
    placed = {4: (True,) * 4 + (False, False), 7: (True,) * 6}
    for step in range(9):
        ref_opt.zero_grad()
        want = ref(input_ids=ids, labels=ids).loss
        want.backward()
        ref_opt.step()
        opt.zero_grad()
        loss = opt_model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        torch.testing.assert_close(loss, want, rtol=1e-5, atol=1e-5)
        want_plan = next((v for k, v in sorted(placed.items(), reverse=True) if step >= k), None)
        assert rec.plan.on_host == (want_plan or start), step
    table = memopt.report(opt_model, optimizer=opt).table()
    assert (
        "param_offload auto: chosen after step 8 (probe of 1 group(s) after step 5; host AdamW"
        in table
    )
    assert " under training, " in table and " used): 2 more group(s) moved to the host" in table
    assert "host share 1.000 (need 0.544, free 1.000), prefetch 1" in table
    auto = opt.host_stats()["auto"]
    assert auto["probe_host_share"] == pytest.approx(4 * 147_968 / 657_664)
    assert len(auto["probe_busy_s"]) == 3 and auto["loaded_adam_Bps"] < 1e15
    # the rate used is the slower of the timed-alone one and the one measured under training
    assert auto["loaded_adam_Bps"] == min(auto["rates"]["adam_Bps"], auto["probe_adam_Bps"])
    opt.close()


def test_world_size_1_bf16_host_shards_are_exact_and_reduce_in_bf16(no_process_group):
    """At world size 1 host_dtype="auto" keeps bf16 host shards with fp32 masters (mp_policy
    bf16) and reduces their gradients in bf16: the same numbers as fp32 shards (the default)
    reduced in fp32, bit for bit (FSDP2 computes in bf16 either way; one rank's reduction is the
    identity), with 2 B/param host copies."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    from memopt.params import shard_with_offload

    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    ids = torch.randint(1, 128, (2, 12), generator=torch.Generator().manual_seed(0))
    runs = []
    for host_dtype in (None, "auto"):
        torch.manual_seed(0)
        model = tiny_llama(num_hidden_layers=2)
        rec = shard_with_offload(model, 0.5, mp_policy=mp, host_dtype=host_dtype)
        opt = memopt.HostAdamW(model.parameters(), lr=1e-2, offload=rec, overlap=True)
        losses = []
        for _ in range(3):
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
        opt.wait()  # the last update runs on the worker until the next forward needs it
        w = model.model.layers[0].mlp.up_proj.weight
        runs.append((losses, w.to_local().float(), rec))
        opt.close()
    (a, wa, ra), (b, wb, rb) = runs
    assert ra.host_dtype is None and ra.host_reduce_dtype == torch.float32
    assert rb.host_dtype == torch.bfloat16 and rb.host_reduce_dtype == torch.bfloat16
    assert rb.plan.on_host[0] and wb.dtype == torch.float32
    assert a == b and torch.equal(wa.bfloat16().float(), wb)
    with pytest.raises(ValueError, match="host_dtype='fp8' must be a torch dtype"):
        shard_with_offload(tiny_llama(), 0.5, host_dtype="fp8")
    with pytest.raises(memopt.ConfigError, match="host_dtype='auto' applies to param_offload"):
        memopt.optimize(tiny_llama(), host_dtype="auto")
    with pytest.raises(memopt.ConfigError, match="mp_policy=.* applies to param_offload"):
        memopt.optimize(tiny_llama(), mp_policy=mp)
    with pytest.raises(memopt.ConfigError, match="host_rates=.* applies to param_offload"):
        memopt.optimize(tiny_llama(), host_rates=memopt.params.HostRates(adam_Bps=1e10))
