"""memopt.measure: what the tests and benchmarks compare the report's estimates against."""

import torch

from memopt.measure import measure_saved


def test_a_storage_freed_in_the_forward_does_not_hide_the_next_one_at_its_address():
    """FSDP2's pattern: a layer's all-gathered weight is saved for backward, then its memory is
    freed (``resize_(0)``) after the layer's forward; the next layer's all-gather often gets
    the same address. Each of the eight saves counts (8 × 256 fp32 = 8,192 B); keyed by address
    alone, the measure counted 1,024 B and varied with the allocator from step to step."""
    weights = [torch.randn(256, requires_grad=True) for _ in range(8)]

    def forward():
        out, addresses = 0, []
        for w in weights:
            full = w * 2  # the all-gather: a fresh buffer, saved by the product below
            addresses.append(full.untyped_storage().data_ptr())
            out = out + torch.dot(full, w)
            full.untyped_storage().resize_(0)  # reshard after forward: the memory is free
        return addresses

    addresses, measured = measure_saved(forward, exclude=weights)
    assert measured.total == 8 * 256 * 4
    assert [t.shape for t in measured.tensors] == [(256,)] * 8
    assert len(addresses) == 8


def test_views_of_one_storage_count_once():
    x = torch.randn(64, 32, requires_grad=True)

    def forward():
        y = x.exp()  # saves its output
        return (y[:32] * y[32:]).sum()  # saves two views of that same storage

    _, measured = measure_saved(forward, exclude=[x])
    assert measured.total == 64 * 32 * 4 and len(measured.tensors) == 1


def test_dynamo_never_traces_the_measure_hooks():
    """A frame Dynamo runs eagerly (here: a graph break inside a loop) calls the pack hook under
    Dynamo's frame callback; traced, the hook recompiled per saved tensor's layout into the
    recompile limit (DBRX, the third sweep). The hooks are disabled for Dynamo: no compiled
    entry for them, and the eager saves are still counted."""
    from torch._C._dynamo.eval_frame import _debug_get_cache_entry_list

    import memopt.measure as M

    torch._dynamo.reset()
    torch.manual_seed(0)
    lins = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(3))

    def f(x):
        out = torch.zeros_like(x)
        for lin in lins:
            out = out + torch.tanh(lin(x))
            torch._dynamo.graph_break()
        return out.sum()

    cf = torch.compile(f)
    for n in (4, 5):
        _, m = M.measure_saved(lambda n=n: cf(torch.randn(n, 8, requires_grad=True)))
    codes = [c for c in M.measure_saved.__code__.co_consts if getattr(c, "co_name", "") == "pack"]
    codes.append(M._unpack.__code__)
    assert len(codes) == 2 and [len(_debug_get_cache_entry_list(c)) for c in codes] == [0, 0]
    # per linear: its input (x, shared), its output's tanh (5 x 8 fp32) and linear's weight
    # is a parameter (measured: no exclude given, so counted once, 3 x 256 B)
    assert m.compiled == 0 and m.eager == 5 * 8 * 4 + 3 * (5 * 8 * 4) + 3 * 8 * 8 * 4
