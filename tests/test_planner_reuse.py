"""Inductor's in-place buffer reuse in the backward, in the planner's memory model.

``Scheduler.decide_inplace_update`` lets a generated kernel write its output into a buffer it
reads last when the graph owns that buffer (``PythonWrapperCodegen.can_reuse``: never a graph
input, except a saved tensor AOTAutograd donates) and the two match in dtype and storage size
(``can_match_buffer_size``). Recomputed, the logits are such a buffer: the log-softmax backward
writes the logits gradient into them; saved, they are also the user's ``logits`` output, so not
donated, and the gradient is a new buffer. Units: a 512 x 512 fp32 tensor is 1 MiB.
"""

from __future__ import annotations

import torch
import torch.fx

from memopt.passes.build_planning_problem import Sizes, donated_saved, writes_in_place
from memopt.plan import Strategy
from memopt.planner import memory_profile
from memopt.planner.problem import Candidate, PlanningProblem, StepTimeline

aten = torch.ops.aten
MiB = 1 << 20


def _curve(strategy: Strategy, *, recomputed: bool, kept: bool) -> tuple[int, ...]:
    c = Candidate(
        name="logits", cluster_id="MatMul+In_lm_head+", occurrence=0, layer=None, nbytes=MiB,
        produce_pos=1, last_fwd_use_pos=2, first_bwd_use_pos=0, last_bwd_use_pos=1,
        recomputable=True, reused_when_recomputed=recomputed, reused_when_kept=kept,
    )  # fmt: skip
    # the backward's own values: the logits tangent at 0..1, their gradient made at 1
    tl = StepTimeline(fwd_op_s=(0.0,) * 3, bwd_op_s=(0.0,) * 3, fwd_live_bytes=(0,) * 3,
                      bwd_live_bytes=(MiB, 2 * MiB, MiB))  # fmt: skip
    problem = PlanningProblem(candidates=(c,), timeline=tl)
    return memory_profile(problem, {"logits": strategy}).curve


def test_a_reused_recomputed_tensor_is_gone_at_its_last_reader():
    # before: 3 MiB at the loss backward (recomputed logits, tangent, gradient) either way
    assert _curve(Strategy.RECOMPUTE, recomputed=False, kept=False)[3:] == (2 * MiB, 3 * MiB, MiB)
    assert _curve(Strategy.RECOMPUTE, recomputed=True, kept=False)[3:] == (2 * MiB, 2 * MiB, MiB)
    # kept and not donated (the user's logits output), the gradient is a new buffer
    assert max(_curve(Strategy.KEEP, recomputed=True, kept=False)) == 3 * MiB
    assert max(_curve(Strategy.KEEP, recomputed=True, kept=True)) == 2 * MiB


def _val(shape, dtype=torch.float32):
    return torch.empty(shape, dtype=dtype, device="meta")


def _graphs(return_logits: bool):
    """fw: logits = x @ w (returned to the user when ``return_logits``) and h = x @ v, both
    saved; bw: the logits gradient g = logits * t (a generated kernel), h's reader an mm."""
    fw = torch.fx.Graph()
    x, w, v = fw.placeholder("x"), fw.placeholder("w"), fw.placeholder("v")
    logits = fw.create_node("call_function", aten.mm.default, (x, w), name="mm")
    h = fw.create_node("call_function", aten.mm.default, (x, v), name="mm_1")
    fw.output(((logits,) if return_logits else ()) + (logits, h))
    bw = torch.fx.Graph()
    bl, bh = bw.placeholder("mm"), bw.placeholder("mm_1")
    t = bw.placeholder("tangents_1")
    g = bw.call_function(aten.mul.Tensor, (bl, t))
    gh = bw.call_function(aten.mm.default, (bh, bh))
    half = bw.call_function(aten.mul.Tensor, (g, 0.5))
    bw.output((g, gh, half))
    for n in (x, w, v, logits, h, bl, bh, t, g, gh):
        n.meta["val"] = _val((512, 512))
    half.meta["val"] = _val((512, 512), torch.bfloat16)
    return torch.fx.GraphModule({}, fw), torch.fx.GraphModule({}, bw), (bl, bh, g, gh, half)


def test_only_donated_saved_tensors_are_reused():
    # the logits returned to the user are not donated (AOTAutograd's
    # collect_fw_donated_buffer_idxs), the saved-only matmul output is
    fw, bw, _ = _graphs(return_logits=True)
    assert donated_saved(fw, bw) == {"mm_1"}
    fw, bw, _ = _graphs(return_logits=False)
    assert donated_saved(fw, bw) == {"mm", "mm_1"}
    with torch._functorch.config.patch(donated_buffer=False):
        assert donated_saved(fw, bw) == set()


def test_only_a_generated_kernel_of_the_same_dtype_and_bytes_writes_in_place():
    fw, bw, (bl, bh, g, gh, half) = _graphs(return_logits=True)
    sizes = Sizes(lambda e: int(e))
    logits = next(n for n in fw.graph.nodes if n.name == "mm")
    assert writes_in_place(g, logits, sizes)  # pointwise kernel, same fp32 bytes
    assert not writes_in_place(gh, logits, sizes)  # an extern mm allocates its output
    assert not writes_in_place(half, logits, sizes)  # bf16: another dtype and size
