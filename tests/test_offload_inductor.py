"""The offload rewrite through Inductor: its reordering passes keep the sync points, the
numerics stay bitwise equal, and the saved tensors handed to backward are the host copies."""

import re

import pytest
import torch
from test_offload_rewrite import MiB, Net
from torch._inductor.utils import run_and_get_code

from memopt.offload import ops
from tests.offload_partitioner import LayerOffloadPartitioner

D = 512


@pytest.fixture(autouse=True)
def _deterministic():
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(False)


def _calls(code: str) -> list[tuple[str, int]]:
    """The memopt copy ops of one generated module, each with the number of matmul kernels
    launched before it."""
    out, matmuls = [], 0
    for line in code.splitlines():
        if re.search(r"extern_kernels\.(mm|addmm|bmm)\(", line):
            matmuls += 1
        m = re.search(r"= torch\.ops\.memopt\.(offload|wait_offload|reload|wait_reload)\.", line)
        if m:
            out.append((m.group(1), matmuls))
    return out


def test_inductor_keeps_sync_points_and_numerics():
    torch.manual_seed(0)
    m, x = Net(5), torch.randn(D, D)

    def step(compiled):
        m.zero_grad(set_to_none=True)
        saved = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
            loss = compiled(x)
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in m.parameters()], saved

    loss0, g0, _ = step(torch.compile(m))
    torch._dynamo.reset()
    P = LayerOffloadPartitioner(offload_layers=2)
    (loss1, g1, saved), codes = run_and_get_code(
        step, torch.compile(m, options={"custom_partitioner_fn": P})
    )
    assert torch.equal(loss0, loss1)
    assert all(torch.equal(a, b) for a, b in zip(g0, g1))
    fw_code, bw_code = codes
    # Forward: 1 input matmul + 2 per layer. Each offload is issued right after its
    # producer's matmul; layer 0's copies are waited on after layer 2's last matmul (7),
    # layer 1's after layer 3's (9) -- not hoisted, not sunk.
    assert _calls(fw_code) == [
        ("offload", 1),
        ("offload", 2),
        ("offload", 3),
        ("offload", 4),
        ("wait_offload", 7),
        ("wait_offload", 7),
        ("wait_offload", 9),
        ("wait_offload", 9),
    ]
    # Backward: 4 matmuls per layer, from layer 4 down. Layer 1 is reloaded when layer 3's
    # backward begins (after 4), layer 0 when layer 2's begins (after 8); each wait sits at
    # the matmul that first reads the copy, in the backward of its layer (layer 1: matmuls
    # 13..16, layer 0: 17..20).
    bw = _calls(bw_code)
    assert [c for c in bw if c[0] == "reload"] == [("reload", 4)] * 2 + [("reload", 8)] * 2
    waits = [n for kind, n in bw if kind == "wait_reload"]
    assert len(waits) == 4 and all(12 <= n < 16 for n in waits[:2])
    assert all(16 <= n < 20 for n in waits[2:])
    hosts = [t for t in saved if ops.POOL.owns(t)]
    assert len(hosts) == 4 and all(t.numel() * t.element_size() == MiB for t in hosts)
    assert ops.pending_copies() == 0


def _buffer_plans(partitioner) -> list:
    """Inductor's buffer plans of one training step of ``Net(5)`` compiled with
    ``partitioner`` (caches off: a cache hit generates no code to read)."""
    import torch._functorch.config as fconfig
    import torch._inductor.config as iconfig

    from memopt._torch_compat import inductor_plan

    torch.manual_seed(0)
    m, x, graphs = Net(5), torch.randn(D, D), []
    torch._dynamo.reset()
    with (
        iconfig.patch(fx_graph_cache=False),
        fconfig.patch(enable_autograd_cache=False),
        inductor_plan.wrapper_plans(graphs.append),
        inductor_plan.eager_backward(),
    ):
        torch.compile(m, options={"custom_partitioner_fn": partitioner})(x).backward()
    return graphs


def test_buffer_plan_counts_the_copy_ops_aliases_once():
    """``wait_offload``, ``wait_reload`` and ``barrier`` return their first argument: Inductor
    reads their result through a MultiOutput the wrapper never allocates, so the buffer plan
    must alias it, not count a new tensor (it did: on CUDA every barrier doubled a matmul
    input and every wait a reloaded tensor, which put ViT's offloading plans 21% over the
    measured peak). The only fresh tensors an extern kernel makes here are the offloads'
    host copies and the reloads' device tensors."""
    from memopt import inductor_buffers as buffers

    plans = _buffer_plans(LayerOffloadPartitioner(offload_layers=2))
    for g in plans:
        count = {op: sum(n.target is op for n in g.module.graph.nodes) for op in ops.ALL_OPS}
        fresh = [e for e in g.events if e.kind == "alloc" and e.kernel and e.nbytes]
        assert len(fresh) == 4 and all(e.nbytes == MiB for e in fresh)
        made = ops.reload if g.backward else ops.offload
        assert count[made] == 4 and count[ops.barrier] >= 8
    # On a CPU the host copies are memory of the graph's device too: offloading 4 tensors
    # adds at most their 4 MiB to the forward (each device tensor still dies, at its wait).
    offload = buffers.section(plans, tangents_held=True)
    keep = buffers.section(_buffer_plans(LayerOffloadPartitioner(offload_layers=0)),
                           tangents_held=True)  # fmt: skip
    assert keep["fwd_peak"] <= offload["fwd_peak"] <= keep["fwd_peak"] + 4 * MiB


def test_only_a_return_with_an_alias_set_is_read_as_an_alias():
    """A fallback op can alias some arguments and still return new tensors: batch norm's
    three outputs are new though it mutates (aliases) the running statistics; memopt's
    ``wait_offload`` returns its host argument."""
    from types import SimpleNamespace as NS

    from memopt._torch_compat.inductor_plan import _aliased_by_multi_output

    def node(name):
        return NS(get_name=lambda: name)

    def out(op, args, aliased, index=None):
        kernel = NS(
            op_overload=op,
            inputs=args,
            constant_args=(),
            unflatten_args=lambda inputs, constants: (list(inputs), {}),
            get_inputs_that_alias_output=lambda: aliased,
        )
        return NS(inputs=[kernel], indices=[] if index is None else [(tuple, index)])

    bn = torch.ops.aten._native_batch_norm_legit.default
    args = [node(n) for n in ("x", "w", "b", "running_mean", "running_var")]
    for i in range(3):
        assert _aliased_by_multi_output(out(bn, args, ["running_mean", "running_var"], i)) is None
    wait = out(ops.wait_offload, [node("host"), [node("t")], node("after")], ["host"])
    assert _aliased_by_multi_output(wait) == "host"
    assert _aliased_by_multi_output(out(ops.offload, [node("t")], [])) is None
    unknown = out(NS(), [node("a")], ["a"])  # no schema to read: the aliased input
    assert _aliased_by_multi_output(unknown) == "a"
