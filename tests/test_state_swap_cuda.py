"""memopt.params.StateSwap on CUDA (GPU only): the moments' device memory is free between
step() and the reload point, it comes back in the compute stream's pool (where the
activations can reuse it), and AdamW(fused=True) trains bit-identically with and without the
swap."""

from __future__ import annotations

import gc

import pytest
import torch
from torch import nn

from memopt.params.state_swap import CALIBRATION_STEPS, StateSwap

pytestmark = pytest.mark.gpu

DIM, LAYERS, STEPS = 1024, 6, 5
WEIGHT = DIM * DIM * 4  # one fp32 weight: 4 MiB, and each has two moments


def _train(swap_it: bool):
    torch.manual_seed(0)
    layers = nn.ModuleList(nn.Linear(DIM, DIM) for _ in range(LAYERS)).cuda()
    opt = torch.optim.AdamW(layers.parameters(), lr=1e-3, fused=True)
    swap = StateSwap(opt, reload_at=layers[2], min_bytes=WEIGHT) if swap_it else None
    probes, losses = [], []
    base = torch.cuda.memory_allocated()  # what the other run left (freed or not) is not ours
    for i in range(STEPS):
        torch.manual_seed(10 + i)
        x = torch.randn(256, DIM, device="cuda")
        for layer in layers:
            x = torch.relu(layer(x))
        loss = x.square().mean()
        torch.cuda.synchronize()
        torch.empty(1, device="cuda")  # the allocator settles the copies' events
        probes.append(torch.cuda.memory_allocated() - base)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    torch.cuda.synchronize()
    if swap is not None:
        swap.close()
    weights = [p.detach().clone() for p in layers.parameters()]
    moments = [opt.state[p][k].clone() for p in layers.parameters() for k in ("exp_avg",)]
    return layers, opt, swap, probes, losses, weights, moments


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_the_moments_memory_is_free_until_the_reload_point_and_training_is_identical():
    _train(False)  # cuBLAS's workspace (about 32 MiB) is made by the first matmul
    gc.collect()
    ref = _train(False)
    probes_ref, losses_ref, w_ref, m_ref = ref[3:]
    w_ref, m_ref = [t.cpu() for t in w_ref], [t.cpu() for t in m_ref]
    del ref
    gc.collect()
    layers, opt, swap, probes, losses, w, m = _train(True)
    w, m = [t.cpu() for t in w], [t.cpu() for t in m]
    assert losses == losses_ref
    assert all(torch.equal(a.cpu(), b) for a, b in zip(w, w_ref, strict=True))
    assert all(torch.equal(a.cpu(), b) for a, b in zip(m, m_ref, strict=True))
    assert swap.stats.away_bytes == 2 * LAYERS * WEIGHT and swap.stats.tensors == 2 * LAYERS
    assert (swap.stats.reloads, swap.stats.late) == (STEPS - 1, 0)
    # at the loss of steps 1-4 the six weights' moments (48 MiB) are on the host
    assert probes[0] == probes_ref[0]
    assert [r - p for p, r in zip(probes[1:], probes_ref[1:])] == [swap.stats.away_bytes] * (
        STEPS - 1
    )
    # the reloaded moments were allocated on the compute stream: freed, their blocks serve the
    # same sizes there without reserving more
    reserved = torch.cuda.memory_reserved()
    opt.state.clear()
    gc.collect()
    again = [torch.empty(DIM, DIM, device="cuda") for _ in range(2 * LAYERS)]
    assert torch.cuda.memory_reserved() == reserved and len(again) == 2 * LAYERS


class _Stack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(DIM, DIM) for _ in range(LAYERS))

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x.square().mean()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_auto_bytes_under_torch_compile_times_the_windows_and_trains_identically():
    """``model=`` and ``max_bytes="auto"`` through torch.compile: the calibration step's CUDA
    events are the ones recorded (the hooks run eagerly), the limit comes from them, and
    training is bit-identical to the same compiled model whose swap moves nothing."""
    runs = []
    for swap_it in (False, True):
        torch._dynamo.reset()  # the compiled code of the first run does not see the hooks
        torch.manual_seed(0)
        model = _Stack().cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
        # the reference has the same hooks (so the same graph breaks) and moves nothing
        size = "auto" if swap_it else 0
        swap = StateSwap(opt, model=model, max_bytes=size, min_bytes=WEIGHT)
        losses = _steps(torch.compile(model), opt, STEPS, lambda: None)
        swap.close()
        runs.append((losses, [p.detach().cpu() for p in model.parameters()], swap))
    (losses_ref, w_ref, _), (losses, w, swap) = runs
    assert losses == losses_ref
    assert all(torch.equal(a, b) for a, b in zip(w, w_ref, strict=True))
    auto = swap.stats.auto
    assert auto["forward_ms"] > 0 and auto["backward_ms"] > 0 and auto["h2d_Bps"] > 0
    # the limit follows the timed windows (a few states here); whatever went came back hidden
    assert swap.stats.away_bytes <= swap.max_bytes and swap.stats.late == 0
    timed = 1 + CALIBRATION_STEPS  # step 0 has no states, then the timed steps
    assert swap.stats.reloads == (STEPS - timed if swap.stats.tensors else 0)


def _steps(compiled, opt, n: int, each) -> list[float]:
    """``n`` steps of ``compiled`` on (4096, DIM) inputs; ``each()`` after each step()."""
    losses = []
    for i in range(n):
        torch.manual_seed(10 + i)
        loss = compiled(torch.randn(4096, DIM, device="cuda"))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        each()
    return losses


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_a_coupled_auto_swap_that_buys_the_plan_nothing_is_priced_and_declined():
    """A memopt byte budget with room for everything on tests/test_state_swap.py's BrokenNet
    (a graph break after each layer: several regions, planned as a step): the step plan
    recomputes nothing with the swap or without it, so the swap's measured price decides, and
    it is declined (memopt.step_swap): steps 1-2 are timed without moves, 3-4 with them, the
    step plan is made as step 5 begins, and from step 6 nothing moves. Losses as without it."""
    import memopt
    from memopt.api import _STATES
    from tests.test_state_swap import WEIGHT as SMALL
    from tests.test_state_swap import BrokenNet

    class Net(BrokenNet):
        def forward(self, x):
            return super().forward(x[:, :64]).square().mean()

    runs = []
    for swap_it in (False, True):
        torch._dynamo.reset()
        model = Net().cuda()
        compiled = memopt.optimize(model, budget=1 << 40)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
        swap = StateSwap(opt, model=model, max_bytes="auto", min_bytes=SMALL) if swap_it else None
        moved = []
        count = lambda m=moved, s=swap: m.append(s.stats.tensors if s else 0)  # noqa: E731
        losses = _steps(compiled, opt, 8, count)
        runs.append((losses, moved, swap, _STATES[model]))
    (losses_ref, _, _, _), (losses, moved, swap, state) = runs
    torch.testing.assert_close(losses, losses_ref)
    assert swap.stats.price_ms is not None and swap.stats.price_ms >= 0
    assert swap.stats.declined.startswith("StateSwap declined by the step plan: without it")
    assert swap.stats.declined in state.notes
    assert moved[:3] == [0, 0, 0] and moved[3] > 0 and moved[-2:] == [0, 0], moved
    swap.close()
