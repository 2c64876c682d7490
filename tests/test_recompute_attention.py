"""Attention kernels in recompute subgraphs (``Attention+``): found at probe level 1, left kept
by levels, recomputed by a plan string with torch.compile's gradients, and never recomputed
when the kernel drops out."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch._functorch import partitioners
from torch.fx.experimental.proxy_tensor import make_fx

import memopt
from memopt.facts import attention_dropout, op_class
from memopt.measure import measure_saved
from memopt.passes.find_recompute_subgraphs import find_recompute_subgraphs_pass
from memopt.passes.find_saved_activations import SavedGroup
from tests.helpers import tiny_llama

transformers = pytest.importorskip("transformers")

B, S, HID, HEADS, KV, LAYERS = 2, 64, 64, 4, 2, 2
#: bytes one layer's SDPA saves for backward: its output (B, HEADS, S, HID // HEADS) and its
#: logsumexp (B, HEADS, S), fp32
SDPA_BYTES = B * HEADS * S * (HID // HEADS) * 4 + B * HEADS * S * 4
#: before torch 2.14 the partitioner saves the CPU RNG state (5056 B) for each recomputed SDPA
#: kernel: the op carries the ``nondeterministic_seeded`` tag, even without dropout; from 2.14
#: an SDPA whose dropout is statically 0 is no random op (``partitioners.is_rng_op``)
_RNG = 0 if hasattr(partitioners, "is_rng_op") else torch.get_rng_state().numel()
SAVING = SDPA_BYTES - _RNG


def _llama():
    torch.manual_seed(0)
    return tiny_llama(
        hidden_size=HID,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV,
        max_position_embeddings=S,
        attn_implementation="sdpa",
    )


def _step(model, ids):
    """(loss, gradients, compiled saved bytes) of one step of ``model``."""
    exclude = [*model.parameters(), *model.buffers(), ids]
    loss, saved = measure_saved(lambda: model(input_ids=ids, labels=ids).loss, exclude)
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()], saved.compiled


def _plans(model) -> dict[str, dict]:
    return {r["cluster_id"]: r for r in memopt.report(model).to_dict()["plans"]}


@pytest.fixture(scope="module")
def reference():
    """The inputs and torch.compile's (loss, gradients, saved bytes) on them: one compile
    shared by the tests that check memopt against it."""
    ids = torch.randint(0, 128, (B, S), generator=torch.Generator().manual_seed(0))
    torch._dynamo.reset()
    loss, grads, saved = _step(torch.compile(_llama()), ids)
    torch._dynamo.reset()
    return ids, loss, grads, saved


def test_levels_keep_attention_and_a_plan_string_recomputes_it(reference):
    ids, loss_ref, grads_ref, _ = reference
    torch._dynamo.reset()
    lvl1 = memopt.optimize(_llama(), level=1)
    _step(lvl1, ids)
    row = _plans(lvl1)["Attention+"]
    # out + logsumexp of every layer, found, not enabled by the level
    assert (row["freq"], row["enabled"], row["source"]) == (2 * LAYERS, False, "default")
    assert row["saving_bytes"] == LAYERS * SAVING and row["available"] == [1]  # at most

    torch._dynamo.reset()
    lvl0 = memopt.optimize(_llama(), level=0)
    _, _, saved0 = _step(lvl0, ids)
    torch._dynamo.reset()
    att = memopt.optimize(_llama(), level=0, config=["Attention+:1:-1"])
    loss, grads, saved = _step(att, ids)
    row = _plans(att)["Attention+"]
    assert (row["enabled"], row["source"], row["saving_bytes"]) == (True, "plan", LAYERS * SAVING)
    assert saved0 - saved == LAYERS * SAVING  # measured
    (region,) = memopt.report(att).regions
    assert region.final_saved_bytes == saved  # the estimate is the measurement
    torch.testing.assert_close(loss, loss_ref, rtol=1e-5, atol=1e-6)
    for g, r in zip(grads, grads_ref):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-5)


def _sdpa_graph(dropout_p: float, as_kwarg: bool):
    op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default

    def f(q, k, v):
        if as_kwarg:
            return op(q, k, v, dropout_p=dropout_p)[0]
        return op(q, k, v, dropout_p)[0]

    q = torch.randn(1, 2, 8, 4)
    return make_fx(f, tracing_mode="fake")(q, q, q)


@pytest.mark.parametrize("as_kwarg", [False, True])
def test_an_attention_kernel_that_drops_out_is_not_recomputed(as_kwarg):
    for p, drops in ((0.0, False), (0.25, True)):
        gm = _sdpa_graph(p, as_kwarg)
        sdpa = next(
            n for n in gm.graph.nodes if op_class(n) == "attention" and "getitem" != n.name[:7]
        )
        out = next(iter(sdpa.users))
        assert attention_dropout(sdpa) is drops and attention_dropout(out) is drops
        _, (sub,) = find_recompute_subgraphs_pass(
            gm, [SavedGroup(out, (out,))], probe_level=1, max_nodes=64
        )
        if drops:
            assert sub.full.reason == (
                "op _scaled_dot_product_flash_attention_for_cpu may drop out (recomputing would "
                "change the numbers)"
            )
        else:  # the kernel and its output: one heavy op, not two
            assert sub.full.reason is None and set(sub.full.nodes) == {sdpa, out}
            _, (sub0,) = find_recompute_subgraphs_pass(
                gm, [SavedGroup(out, (out,))], probe_level=0, max_nodes=64
            )
            assert "(attention) is not in the probe-level allow-list" in sub0.full.reason


def test_attention_joins_the_matmul_count():
    """A subgraph that would rerun attention and the projection before it needs two heavy ops:
    with ``max_subgraph_matmuls=1`` it is refused."""

    def f(x, w):
        q = (x @ w).view(1, 2, 8, 4)
        return F.scaled_dot_product_attention(q, q, q)

    gm = make_fx(f, tracing_mode="fake")(torch.randn(16, 4), torch.randn(4, 4))
    out = next(n for n in gm.graph.nodes if n.name.startswith("getitem"))
    _, (sub,) = find_recompute_subgraphs_pass(
        gm, [SavedGroup(out, (out,))], probe_level=1, max_nodes=64
    )
    assert sub.full.reason == "needs more than 1 matmul(s) to recompute"
    _, (sub2,) = find_recompute_subgraphs_pass(
        gm, [SavedGroup(out, (out,))], probe_level=1, max_nodes=64, max_matmuls=2
    )
    assert sub2.full.reason is None


def my_attention(q):  # an attention kernel memopt cannot read a dropout_p from
    return q


def test_an_attention_op_without_a_schema_counts_as_dropping_out():
    g = torch.fx.Graph()
    q = g.placeholder("q")
    node = g.call_function(my_attention, (q,))
    assert op_class(node) == "attention" and attention_dropout(node)


def test_attention_recompute_with_offload_keeps_the_rng_state_in_its_slot(reference):
    # A plan that reruns attention and offloads layers: the partitioner's saved RNG state of
    # each rerun kernel reaches the backward under its own name (``rng_state_output_<i>``),
    # which the offload rewrite's slots accept (facts.is_rng_state); gradients as
    # torch.compile's (tests/helpers.py:compare's check, on the shared reference compile) and
    # layer 0's tensors moved.
    ids, loss_ref, grads_ref, before = reference
    torch._dynamo.reset()
    opt = memopt.optimize(_llama(), config="Attention+:1:-1", offload_layers=1, offload_min_bytes=0)
    loss, grads, after = _step(opt, ids)
    torch.testing.assert_close(loss, loss_ref)
    assert len(grads) == len(grads_ref)
    for g, r in zip(grads, grads_ref):
        torch.testing.assert_close(g, r)
    rep = memopt.report(opt)
    region = rep.regions[0]
    assert _plans_of(rep)["Attention+"]["enabled"]
    assert set(region.extra["offload"]["bytes_per_layer"]) == {"0"}
    assert after < before


def _plans_of(rep) -> dict[str, dict]:
    return {r["cluster_id"]: r for r in rep.to_dict()["plans"]}
