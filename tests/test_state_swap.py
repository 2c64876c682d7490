"""memopt.params.StateSwap on CPU: the optimizer's states leave when the next forward reaches
the first reload point (their storage is empty), come back from the reload point's backward,
and training is bit-identical to the same optimizer without it."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from memopt.errors import ConfigError
from memopt.params.state_swap import StateSwap


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layers = nn.ModuleList(nn.Linear(64, 64) for _ in range(3))
        self.head = nn.Linear(64, 8)

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return self.head(x)


def _step(model, opt, i: int) -> torch.Tensor:
    torch.manual_seed(100 + i)
    x = torch.randn(16, 64)
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss.detach()


def _held(t: torch.Tensor) -> int:
    """A state's own bytes while its storage is in place (a moved group's states share one
    storage), 0 while it is away (its storage is empty)."""
    return t.numel() * t.element_size() if t.untyped_storage().nbytes() else 0


def _storage_bytes(opt) -> list[int]:
    return [_held(t) for s in opt.state.values() for k, t in sorted(s.items()) if k != "step"]


# one Linear(64, 64) weight in fp32: 16,384 B; its bias 256 B; the head's weight 2,048 B
WEIGHT = 64 * 64 * 4


def test_the_states_leave_at_the_reload_points_forward_come_back_at_its_backward():
    ref = Net()
    model = copy.deepcopy(ref)
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    swap = StateSwap(opt, reload_at=model.layers[2], min_bytes=WEIGHT)

    seen = []  # the moments' storage bytes at the head's forward and backward, layer 1's backward
    model.head.register_forward_pre_hook(lambda *_: seen.append(sorted(_storage_bytes(opt))))
    model.head.register_full_backward_pre_hook(lambda *_: seen.append(sorted(_storage_bytes(opt))))
    model.layers[1].register_full_backward_pre_hook(
        lambda *_: seen.append(sorted(_storage_bytes(opt)))
    )
    for i in range(4):
        assert torch.equal(_step(model, opt, i), _step(ref, opt_ref, i))
        # after step() every moment is in place (a loss read now waits for no copy)
        assert 0 not in _storage_bytes(opt)
    for a, b in zip(model.parameters(), ref.parameters(), strict=True):
        assert torch.equal(a, b)
    # step 0 had no states yet; from step 1 on the head's forward and backward (after the
    # reload point's forward, before its backward) saw the three weights' moments away, the
    # rest in place, and layer 1's backward (after the reload point's) saw them back
    away = [0] * 6 + [32, 32] + [256] * 6 + [2048, 2048]
    home = [32, 32] + [256] * 6 + [2048, 2048] + [WEIGHT] * 6
    assert seen[3:] == [away, away, home] * 3
    assert (swap.stats.tensors, swap.stats.away_bytes) == (6, 6 * WEIGHT)
    assert (swap.stats.reloads, swap.stats.late) == (3, 0)
    swap.close()
    assert 0 not in _storage_bytes(opt)


def test_a_forward_without_grad_leaves_the_states_in_place():
    model = Net()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    swap = StateSwap(opt, reload_at=model.layers[2], min_bytes=WEIGHT)
    _step(model, opt, 0)
    with torch.no_grad():
        model(torch.randn(4, 64))
    assert 0 not in _storage_bytes(opt) and swap.stats.tensors == 0
    _step(model, opt, 1)  # the next forward with grad sends them
    assert (swap.stats.tensors, swap.stats.reloads, swap.stats.late) == (6, 1, 0)


def test_without_a_reload_point_step_brings_them_back_and_counts_it_late():
    ref, model = Net(), Net()
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    swap = StateSwap(opt, min_bytes=0)
    for i in range(3):
        _step(model, opt, i), _step(ref, opt_ref, i)
    for a, b in zip(model.parameters(), ref.parameters(), strict=True):
        assert torch.equal(a, b)
    # every moment of every parameter goes (min_bytes=0); "step" counters are tensors too
    n_params = sum(p.numel() for p in model.parameters())
    assert swap.stats.away_bytes == 2 * 4 * n_params + 4 * 8
    assert (swap.stats.reloads, swap.stats.late) == (0, 2)


def test_max_bytes_takes_states_in_parameter_order_up_to_the_limit():
    model = Net()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    swap = StateSwap(opt, reload_at=model.layers[2], max_bytes=3 * WEIGHT, min_bytes=WEIGHT)
    _step(model, opt, 0)
    model(torch.randn(4, 64))  # the next forward sends them
    # layer 0's weight (two moments), then layer 1's first moment: three of 16,384 B
    assert (swap.stats.tensors, swap.stats.away_bytes) == (3, 3 * WEIGHT)
    first = opt.state[model.layers[1].weight]
    assert _held(first["exp_avg"]) == 0
    assert _held(first["exp_avg_sq"]) == WEIGHT
    assert _held(opt.state[model.layers[2].weight]["exp_avg"]) == WEIGHT


def test_state_dict_between_step_and_the_reload_point_reads_the_true_moments_and_load_works():
    ref, model = Net(), Net()
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    swap = StateSwap(opt, reload_at=model.layers[2], min_bytes=WEIGHT)
    for i in range(2):
        _step(model, opt, i), _step(ref, opt_ref, i)
    out = model(torch.randn(4, 64))  # a forward past the reload point: the moments are away
    assert swap.stats.away_bytes == 6 * WEIGHT and 0 in _storage_bytes(opt)
    got, want = opt.state_dict(), opt_ref.state_dict()
    for k, s in want["state"].items():
        for name, t in s.items():
            assert torch.equal(got["state"][k][name], t), (k, name)
    del out  # that forward is dropped (its backward never runs)
    # a checkpoint loaded mid-training: the swap goes on with the loaded tensors
    opt.load_state_dict(copy.deepcopy(want))
    for i in range(2, 4):
        _step(model, opt, i), _step(ref, opt_ref, i)
    for a, b in zip(model.parameters(), ref.parameters(), strict=True):
        assert torch.equal(a, b)
    assert swap.stats.away_bytes == 6 * WEIGHT


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"optimizer": "adamw"}, "optimizer must be a torch.optim.Optimizer, got str"),
        ({"reload_at": "layers.2"}, "reload_at must be an nn.Module"),
        ({"max_bytes": -1}, "max_bytes must be a non-negative int, got -1"),
        ({"min_bytes": 1.5}, "min_bytes must be a non-negative int, got 1.5"),
        ({"max_bytes": "auto"}, "max_bytes='auto' sizes the copies to the forward and backward"),
        ({"max_bytes": "all"}, "max_bytes must be a non-negative int, got 'all'"),
        ({"model": "net"}, "model must be an nn.Module, got str"),
        ({"model": nn.Linear(2, 2)}, "Linear has no container of repeated layers"),
        ({"model": Net(), "reload_at": nn.Linear(2, 2)}, "give reload_at= or model=, not both"),
    ],
)
def test_bad_settings_are_named(kwargs, message):
    model = Net()
    args = {"optimizer": torch.optim.AdamW(model.parameters()), **kwargs}
    with pytest.raises(ConfigError, match=message):
        StateSwap(**args)


def test_fsdp2_states_are_dtensors_whose_local_shards_move():
    """FSDP2 (``fully_shard`` per layer, world size 1 on gloo): AdamW's moments are DTensors;
    their local shards leave and come back, and training equals FSDP2 without the swap."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from memopt.params.fsdp import ensure_process_group

    ensure_process_group("cpu")
    mesh = init_device_mesh("cpu", (1,))
    ref, model = Net(), Net()
    for m in (ref, model):
        for layer in m.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(m, mesh=mesh)
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    swap = StateSwap(opt, reload_at=model.layers[2], min_bytes=WEIGHT)
    for i in range(3):
        assert torch.equal(_step(model, opt, i), _step(ref, opt_ref, i))
    assert type(opt.state[model.layers[0].weight]["exp_avg"]).__name__ == "DTensor"
    assert swap.stats.away_bytes == 6 * WEIGHT and swap.stats.reloads == 2
    for a, b in zip(model.parameters(), ref.parameters(), strict=True):
        assert torch.equal(a.full_tensor(), b.full_tensor())


def test_under_torch_compile_the_reload_point_still_fires():
    """The forward hook on ``reload_at`` runs inside a compiled model (Dynamo graph-breaks
    around it or traces it): the reloads are counted and training is unchanged."""
    ref, model = Net(), Net()
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    swap = StateSwap(opt, reload_at=model.layers[2], min_bytes=WEIGHT)
    cm, cr = torch.compile(model, backend="aot_eager"), torch.compile(ref, backend="aot_eager")
    for i in range(3):
        assert torch.equal(_step(cm, opt, i), _step(cr, opt_ref, i))
    assert (swap.stats.reloads, swap.stats.late, swap.stats.tensors) == (2, 0, 6)
    for a, b in zip(model.parameters(), ref.parameters(), strict=True):
        assert torch.equal(a, b)


def test_under_torch_compile_the_hooks_run_eagerly(monkeypatch):
    """Dynamo would trace a module hook's frame (a CUDA event recorded in its graph is not the
    one the hook kept: "Both events must be recorded", H100, seventieth session): what the
    hooks call (the send, the calibration's marks) never runs while Dynamo compiles."""
    seen = []
    for name in ("_mark", "_send_away"):
        orig = getattr(StateSwap, name)

        def spy(self, *a, _orig=orig, _name=name):
            seen.append((_name, torch.compiler.is_compiling()))
            return _orig(self, *a)

        monkeypatch.setattr(StateSwap, name, spy)
    model = Net()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    StateSwap(opt, model=model, max_bytes="auto", min_bytes=WEIGHT)
    cm = torch.compile(model, backend="eager")
    for i in range(3):
        _step(cm, opt, i)
    assert seen[:4] == [("_mark", False)] * 3 + [("_mark", False)]  # step 1 timed, 2 begins
    assert seen[4:] == [("_send_away", False)] + [("_mark", False)] * 2


def test_a_parameter_whose_state_appears_later_goes_too_and_close_is_not_late():
    """The head has no gradient in step 0 (AdamW makes no state for it); step 1's forward
    sends the layers' moments, and from step 2 on the head's two go as well. ``close()``
    brings the states back without counting a late reload."""
    model = Net()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    swap = StateSwap(opt, reload_at=model.layers[2], min_bytes=2048)
    model.head.weight.requires_grad_(False)
    _step(model, opt, 0)
    model.head.weight.requires_grad_(True)
    _step(model, opt, 1)
    assert (swap.stats.tensors, swap.stats.away_bytes) == (6, 6 * WEIGHT)
    _step(model, opt, 2)
    assert (swap.stats.tensors, swap.stats.away_bytes) == (8, 6 * WEIGHT + 2 * 2048)
    model(torch.randn(4, 64))  # sent again; close() brings them back
    swap.close()
    assert (swap.stats.reloads, swap.stats.late) == (2, 0)
    assert 0 not in _storage_bytes(opt)


def test_several_reload_points_each_bring_back_their_share_in_order():
    """``reload_at=[layers[2], layers[1], layers[0]]``: the six weight moments (in parameter
    order) are cut into three groups of two; layers[2]'s backward brings back layer 0's
    moments, layers[0]'s brings back layer 2's, so at layers[1]'s backward the first are back
    and the last still away."""
    ref, model = Net(), Net()
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    points = [model.layers[2], model.layers[1], model.layers[0]]
    swap = StateSwap(opt, reload_at=points, min_bytes=WEIGHT)

    def moments(layer):
        s = opt.state.get(model.layers[layer].weight, {})
        return [_held(s[k]) for k in ("exp_avg", "exp_avg_sq") if k in s]

    seen = []
    model.layers[1].register_full_backward_pre_hook(
        lambda *_: seen.append((moments(0), moments(2)))
    )
    for i in range(3):
        assert torch.equal(_step(model, opt, i), _step(ref, opt_ref, i))
    assert seen[1:] == [([WEIGHT, WEIGHT], [0, 0])] * 2
    assert (swap.stats.reloads, swap.stats.late, swap.stats.tensors) == (2, 0, 6)
    for a, b in zip(model.parameters(), ref.parameters(), strict=True):
        assert torch.equal(a, b)


def test_split_cuts_in_order_by_bytes():
    from memopt.params.state_swap import _split

    def cut(sizes, parts):
        return _split(list(sizes), list(sizes), parts)

    assert cut((4, 4, 4, 4, 4, 4), 3) == [[4, 4], [4, 4], [4, 4]]
    assert cut((10, 1, 1, 1), 2) == [[10], [1, 1, 1]]
    assert cut((1, 1, 1, 10), 2) == [[1, 1, 1, 10]]
    assert cut((3, 3), 1) == [[3, 3]]
    assert cut((5,), 4) == [[5]]


def test_gradient_accumulation_reloads_once_per_step():
    """Two micro-batches per step: the first backward brings the states back, the second
    finds them in place; training equals the same accumulation without the swap."""
    ref, model = Net(), Net()
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    swap = StateSwap(opt, reload_at=[model.layers[2], model.layers[0]], min_bytes=WEIGHT)
    for i in range(3):
        for m, o in ((model, opt), (ref, opt_ref)):
            for j in range(2):
                torch.manual_seed(100 * i + j)
                m(torch.randn(16, 64)).square().mean().backward()
            o.step()
            o.zero_grad()
    assert (swap.stats.reloads, swap.stats.late, swap.stats.tensors) == (2, 0, 6)
    for a, b in zip(model.parameters(), ref.parameters(), strict=True):
        assert torch.equal(a, b)


def test_model_reloads_from_every_layer_in_backward_order():
    """``model=``: the points are the model's layers (memopt's numbering), last layer first,
    as ``reload_at=[layers[2], layers[1], layers[0]]``."""
    model = Net()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    swap = StateSwap(opt, model=model, min_bytes=WEIGHT)

    def first_moment(k):
        return opt.state[model.layers[k].weight].get("exp_avg", torch.empty(0))

    seen = []
    model.layers[1].register_full_backward_pre_hook(
        lambda *_: seen.append([_held(first_moment(k)) for k in (0, 2)])
    )
    for i in range(3):
        _step(model, opt, i)
    # layers[2]'s backward brought back layer 0's moments; layer 2's come at layers[0]'s
    assert seen == [[0, 0]] + [[WEIGHT, 0]] * 2
    assert (swap.stats.reloads, swap.stats.late, swap.stats.tensors) == (2, 0, 6)


def test_auto_bytes_on_cpu_times_one_step_then_moves_every_state():
    """``max_bytes="auto"`` times the first step with states (nothing moves in it); with no
    CUDA copy engine to size for, every state goes from the next step on."""
    ref, model = Net(), Net()
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    swap = StateSwap(opt, model=model, max_bytes="auto", min_bytes=WEIGHT)
    for i in range(2):
        _step(model, opt, i), _step(ref, opt_ref, i)
    assert swap.stats.tensors == 0 and swap.max_bytes is None  # step 1 was the timed one
    _step(model, opt, 2), _step(ref, opt_ref, 2)
    assert (swap.stats.tensors, swap.stats.reloads, swap.stats.late) == (6, 1, 0)
    for a, b in zip(model.parameters(), ref.parameters(), strict=True):
        assert torch.equal(a, b)


def test_auto_bytes_is_what_both_copies_move_while_hidden():
    from memopt.params.state_swap import auto_bytes

    # 20 ms of forward at 54 GB/s away, 40 ms of backward at 50 GB/s back: 0.9 x 1.08 GB
    assert auto_bytes(0.020, 0.040, 54e9, 50e9) == 972_000_000
    # a short backward limits it: 0.9 x 5 ms x 50 GB/s
    assert auto_bytes(0.020, 0.005, 54e9, 50e9) == 225_000_000
    assert auto_bytes(0.0, 0.040, 54e9, 50e9) == 0


def test_model_finds_the_layers_through_compile_and_hf_wrappers():
    """``model=`` takes the model as the user holds it: a compiled wrapper's layers are the
    original's, and a transformers model's are its decoder layers."""
    from memopt.api import model_layers

    net = Net()
    assert model_layers(torch.compile(net)) == list(net.layers)
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2,
    )  # fmt: skip
    llama = transformers.LlamaForCausalLM(cfg)
    assert model_layers(llama) == list(llama.model.layers)


class _Ev:
    """A CUDA event stand-in: a time in ms, done unless told."""

    def __init__(self, t: float, done: bool = True) -> None:
        self.t, self.done = t, done

    def elapsed_time(self, other: _Ev) -> float:
        return other.t - self.t

    def query(self) -> bool:
        return self.done

    def synchronize(self) -> None:
        self.done = True


def test_auto_bytes_sizes_from_the_shortest_windows_so_a_compiling_step_never_does(monkeypatch):
    """The first timed step here takes 14.5 s to its reload point (memopt compiling its step
    plan, H100, seventieth session: it sized 24 GB and every state went, unhidden). Two steps
    are timed before anything moves, and the shortest windows seen size the copies; later
    steps are read once their events are done, never waited for."""
    import types

    import memopt.params.rates as rates

    fixed = types.SimpleNamespace(d2h_Bps=1e6, h2d_Bps=2e6)
    monkeypatch.setattr(rates, "host_rates", lambda dev: fixed)
    windows = iter([(14500, 500), (30, 40), (25, 50), (20, 10), (30, 40)])  # ms
    clock, pending = [0.0], []

    def mark(self, name):
        if name == "send":
            self._fwd, self._bwd = next(windows)
            clock[0] = 0
        elif name == "reload":
            clock[0] += self._fwd
        else:
            clock[0] += self._bwd
        ev = _Ev(clock[0], done=self._timed != 3)  # step 4's events are not done at its step()
        if not ev.done:
            pending.append(ev)
        self._marks[name] = ev

    monkeypatch.setattr(StateSwap, "_mark", mark)
    monkeypatch.setattr(StateSwap, "_device", lambda self: torch.device("cpu"))
    model = Net()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    swap = StateSwap(opt, model=model, max_bytes="auto", min_bytes=WEIGHT)
    moved = []
    for i in range(6):
        _step(model, opt, i)
        moved.append((swap.stats.tensors, swap.max_bytes))
        if i == 4:
            for ev in pending:
                ev.done = True
    # steps 1-2 timed (nothing moves): 0.9 * min(1e6 * 0.030, 2e6 * 0.040) = 27,000 B; step
    # 3 moves one 16,384 B state and its 25 ms make 22,500 B
    assert moved[:4] == [(0, None), (0, None), (0, 27000), (1, 22500)]
    # step 4's events are read at step 5 (its 20 ms and 10 ms: 18,000 B)
    assert moved[4:] == [(1, 22500), (1, 18000)]
    assert swap.stats.auto == dict(forward_ms=20.0, backward_ms=10.0, d2h_Bps=1e6, h2d_Bps=2e6)


def test_hooks_the_compiled_code_does_not_see_are_named(recwarn):
    """Registered after the model's class was compiled, the hooks never run
    (torch._dynamo.config.skip_nnmodule_hook_guards): step() says so instead of moving
    nothing in silence."""
    torch._dynamo.reset()
    ref = Net()
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    cr = torch.compile(ref, backend="eager")
    _step(cr, opt_ref, 0)
    model = Net()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    swap = StateSwap(opt, model=model, min_bytes=WEIGHT)
    cm = torch.compile(model, backend="eager")
    for i in range(3):
        _step(cm, opt, i)
    torch._dynamo.reset()
    texts = [str(w.message) for w in recwarn if "StateSwap" in str(w.message)]
    assert swap.stats.tensors == 0 and texts
    assert "skip_nnmodule_hook_guards" in texts[0] and "torch._dynamo.reset()" in texts[0]


class BrokenNet(Net):
    """Net with a graph break after each layer (unrolled: a break inside a loop leaves the
    frame eager): a step of several compiled regions."""

    def forward(self, x):
        x = torch.relu(self.layers[0](x))
        torch._dynamo.graph_break()
        x = torch.relu(self.layers[1](x))
        torch._dynamo.graph_break()
        x = torch.relu(self.layers[2](x))
        torch._dynamo.graph_break()
        return self.head(x)


@pytest.mark.parametrize("swapped", [False, "model", "reload_at"])
def test_a_memopt_budget_plans_the_step_once_the_swap_has_sized_and_sent(swapped):
    """memopt's step plan waits for the swap on the same model (memopt.step_waits): step 0
    compiles; the swap ("auto") times step 1 (on CPU: every state), sends at step 2; the step
    plan is made as step 3 begins, from step 2's readings. Without the swap it is made as
    step 1 begins. ``reload_at=`` modules of the optimized model couple as ``model=`` does.
    Losses as torch.compile's."""
    import memopt
    from memopt.api import _STATES

    ref = BrokenNet()
    model = copy.deepcopy(ref)
    compiled = memopt.optimize(model, budget=0.5)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    where = {"model": {"model": model}, "reload_at": {"reload_at": list(model.layers[::-1])}}
    swap = StateSwap(opt, max_bytes="auto", min_bytes=WEIGHT, **where[swapped]) if swapped else None
    calibrations = []
    if swapped:  # coupled, "auto" sizes once: no timing after it
        calibrate = swap._calibrate
        swap._calibrate = lambda: (calibrations.append(swap._timed), calibrate())
    ref_c = torch.compile(ref)
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    state, planned = _STATES[model], []
    for i in range(5):
        torch.testing.assert_close(_step(compiled, opt, i), _step(ref_c, opt_ref, i))
        planned.append(state._planned_for is not None)
    assert planned == ([False] * 3 + [True] * 2 if swapped else [False] + [True] * 4)
    assert state.waits.waited == (2 if swapped else 0)
    if swapped:
        assert swap.ready() and (swap.stats.tensors, swap.stats.late) == (6, 0)
        assert calibrations == [0]  # step 1 only (on a CPU one timing sizes it)


def test_a_moved_group_is_one_copy_each_way_after_its_first_return():
    """Three reload points, three groups of two weight moments: the first send copies state
    by state, the first reload puts each group's states in one storage (offsets on ALIGN
    bytes); from then on a step copies each group once each way (uint8 copies), and never a
    state alone. Training is bit-identical to AdamW alone."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from memopt.params.state_swap import ALIGN

    class Copies(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.dtypes = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten.copy_.default and args[0].numel() >= WEIGHT // 4:
                self.dtypes.append(args[0].dtype)
            return func(*args, **(kwargs or {}))

    ref, model = Net(), Net()
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    StateSwap(opt, reload_at=[model.layers[2], model.layers[1], model.layers[0]], min_bytes=WEIGHT)
    counts = []
    for i in range(4):
        with Copies() as seen:
            assert torch.equal(_step(model, opt, i), _step(ref, opt_ref, i))
        counts.append((seen.dtypes.count(torch.uint8), seen.dtypes.count(torch.float32)))
    # step 0: no states; step 1: six state copies out, three group copies back; then 3 + 3
    assert counts == [(0, 0), (3, 6), (6, 0), (6, 0)]
    for layer in model.layers:
        a, b = (opt.state[layer.weight][k] for k in ("exp_avg", "exp_avg_sq"))
        assert a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
        assert a.untyped_storage().nbytes() == 2 * WEIGHT  # 16,384 B is a multiple of ALIGN
        assert (a.storage_offset() * 4, b.storage_offset() * 4) == (
            0,
            WEIGHT,
        ) and WEIGHT % ALIGN == 0
    for a, b in zip(model.parameters(), ref.parameters(), strict=True):
        assert torch.equal(a, b)
