"""detect_layers_pass: layers from the module stacks of forward and backward nodes."""

import pytest
import torch
import torch.fx as fx
import torch.nn as nn

from memopt._torch_compat import aot_eager_backend
from memopt.meta_keys import LAYER
from memopt.passes.detect_layers import detect_layers_pass, normalize_module_path
from tests.offload_partitioner import LayerOffloadPartitioner


@pytest.mark.parametrize(
    "raw, want",
    [
        ("L['self'].model.layers.3", "model.layers.3"),
        ("L['self'].model.layers[3].mlp", "model.layers.3.mlp"),
        ("L['mod'].h._modules['11'].attn", "h.11.attn"),
        ("getattr(L['self'].layers, '2')", "layers.2"),
        ("model.layers.0", "model.layers.0"),
        ("L['self']", ""),
        # transformers >= 5.24 decorates forward: dynamo sees the model as args[0]
        ("L['args'][0].model.layers.0", "model.layers.0"),
        ("L['kwargs']['model'].h[3].attn", "h.3.attn"),
        ("L['self']._orig_mod.layers._checkpoint_wrapped_module", "layers"),
    ],
)
def test_normalize_module_path(raw, want):
    assert normalize_module_path(raw) == want


def _graph(stacks: list[tuple[str, list[str] | None, bool]]) -> fx.GraphModule:
    """A chain of relu nodes; each gets ``nn_module_stack`` (or ``fwd_nn_module_stack`` when
    the flag says backward) with the given module paths."""
    g = fx.Graph()
    x = g.placeholder("x")
    for name, paths, backward in stacks:
        x = g.call_function(torch.relu, (x,), name=name)
        if paths is not None:
            key = "fwd_nn_module_stack" if backward else "nn_module_stack"
            x.meta[key] = {f"k{i}": (p, nn.Module) for i, p in enumerate(paths)}
    g.output(x)
    return fx.GraphModule(nn.Module(), g)


def _tags(gm: fx.GraphModule) -> dict[str, int | None]:
    return {n.name: n.meta[LAYER] for n in gm.graph.nodes if n.op == "call_function"}


def test_forward_and_backward_nodes_are_tagged():
    gm = _graph(
        [
            ("embed", ["L['self'].embed"], False),
            ("l0_norm", ["L['self'].layers.0", "L['self'].layers.0.norm"], False),
            ("l1_mlp", ["L['self'].layers.1", "L['self'].layers.1.mlp"], False),
            ("l2", ["L['self'].layers.2"], False),
            ("head", ["L['self'].head"], False),
            ("g_l2", ["L['self'].layers.2"], True),
            ("g_l1", ["L['self'].layers.1", "L['self'].layers.1.mlp"], True),
            ("loose", None, False),
        ]
    )
    assert detect_layers_pass(gm) == ["layers.0", "layers.1", "layers.2"]
    assert _tags(gm) == {
        "embed": None,
        "l0_norm": 0,
        "l1_mlp": 1,
        "l2": 2,
        "head": None,
        "g_l2": 2,
        "g_l1": 1,
        "loose": None,
    }


def test_outer_list_beats_nested_experts():
    # 8 experts inside each of 2 layers: the outermost integer path of a node counts.
    stacks = []
    for layer in range(2):
        for e in range(8):
            base = f"L['self'].model.layers.{layer}"
            stacks.append((f"n{layer}_{e}", [base, f"{base}.moe.experts.{e}"], False))
    gm = _graph(stacks)
    assert detect_layers_pass(gm) == ["model.layers.0", "model.layers.1"]
    assert _tags(gm)["n1_5"] == 1


def test_prefix_override_and_numbering_by_index():
    gm = _graph(
        [
            ("enc3", ["L['self'].encoder.3"], False),
            ("dec0", ["L['self'].decoder.blocks.0"], False),
            ("enc7", ["L['self'].encoder.7"], False),
            ("dec1", ["L['self'].decoder.blocks.1"], False),
            ("dec2", ["L['self'].decoder.blocks.2"], False),
        ]
    )
    assert detect_layers_pass(gm) == [
        "decoder.blocks.0",
        "decoder.blocks.1",
        "decoder.blocks.2",
    ]
    # layers are numbered by index, whatever indices the graph holds
    assert detect_layers_pass(gm, prefix="L['self'].encoder") == ["encoder.3", "encoder.7"]
    assert _tags(gm) == {"enc3": 0, "dec0": None, "enc7": 1, "dec1": None, "dec2": None}
    assert detect_layers_pass(gm, prefix="missing") == []
    assert set(_tags(gm).values()) == {None}


class _Blocks(nn.Module):
    def __init__(self, n: int = 4, d: int = 16):
        super().__init__()
        self.inp = nn.Linear(d, d)
        self.blocks = nn.Sequential(*(nn.Sequential(nn.Linear(d, d), nn.Tanh()) for _ in range(n)))

    def forward(self, x):
        return self.blocks(self.inp(x)).sum()


def test_real_graph_sequential_children():
    P = LayerOffloadPartitioner(offload_layers=0)
    m = _Blocks()
    torch.compile(m, backend=aot_eager_backend(P))(torch.randn(3, 16)).backward()
    assert P.layer_names == ["blocks.0", "blocks.1", "blocks.2", "blocks.3"]
