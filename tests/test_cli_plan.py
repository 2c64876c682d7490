"""memopt plan on tiny configs: the predicted activation bytes equal what a real CPU run of
the same configuration saves, and the output shows the table and the peak."""

from __future__ import annotations

import contextlib
import io
import json
import re
import resource
from typing import Any

import pytest
import torch
import torch.nn as nn

from memopt import _torch_compat as compat
from memopt.cli import models
from memopt.cli.main import main
from memopt.config import resolve_config
from memopt.measure import measure_saved_activation_bytes
from memopt.partitioner import MemoptPartitioner, MemoptState

TINY_LLAMA = [
    "hidden_size=64",
    "intermediate_size=128",
    "num_hidden_layers=2",
    "num_attention_heads=4",
    "num_key_value_heads=2",
    "vocab_size=128",
]


def mlp(batch: int = 4, seq: int = 8):
    """A factory: Linear(bias) -> GELU -> Linear on (batch, seq, 32)."""
    model = nn.Sequential(nn.Linear(32, 128), nn.GELU(), nn.Linear(128, 32))
    return model, (torch.randn(batch, seq, 32),)


def video(batch: int = 2, seq: int = 8):
    """A factory whose input has 2 frames: at batch 2 the frames are the batch's size."""
    model = nn.Sequential(nn.Conv3d(4, 8, 3, padding=1), nn.GELU(), nn.Conv3d(8, 4, 1))
    return model, (torch.randn(batch, 4, 2, seq, seq),)


class _Gram(nn.Module):
    """``lin2``'s weight gradient (16 elements) reads ``h`` (8 * batch): equal at batch 2."""

    def __init__(self):
        super().__init__()
        self.lin1, self.lin2 = nn.Linear(8, 8), nn.Linear(8, 2)

    def forward(self, x):
        h = self.lin1(x)
        return self.lin2(h).sum() + nn.functional.gelu(h).pow(2).sum()


def gram(batch: int = 2):
    return _Gram(), (torch.randn(batch, 8),)


class _Flat(nn.Module):
    """Tokens flattened to ``(batch*seq, 8)`` before a graph break: the loss's region gets
    them as an input whose size dynamo names apart (transformers' MoE router logits)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 4)

    def forward(self, x):
        logits = self.b(self.a(x).relu().reshape(-1, 8))
        torch._dynamo.graph_break()
        return (logits.softmax(-1) * logits.sigmoid()).sum()


def flat(batch: int = 2, seq: int = 6):
    return _Flat(), (torch.randn(batch, seq, 8),)


def flat_fixed(batch: int = 2):
    """:func:`flat` with 16 tokens per row, no sequence to ask for."""
    return _Flat(), (torch.randn(batch, 16, 8),)


class _Frozen(nn.Module):
    """DETR's decoder queries: the batch read as an int before a graph break, then
    ``repeat(batch_size, 1, 1)`` in the resumed frame, where it is a constant."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)
        self.queries = nn.Embedding(4, 8)

    def forward(self, x):
        n = x.shape[0]
        h = self.a(x).relu()
        torch._dynamo.graph_break()
        q = self.queries.weight.unsqueeze(0).repeat(n, 1, 1)
        return h.sum() + self.b(q).relu().sum()


def frozen(batch: int = 2):
    return _Frozen(), (torch.randn(batch, 16, 8),)


class _PadConv(nn.Module):
    """EfficientNet's stem: ``ZeroPad2d`` on the input, then a strided convolution (Inductor
    lays the graph out channels-last and keeps a channels-last copy of a saved input)."""

    def __init__(self):
        super().__init__()
        self.pad, self.conv = nn.ZeroPad2d((0, 1, 0, 1)), nn.Conv2d(3, 8, 3, stride=2)

    def forward(self, x):
        return self.conv(self.pad(x)).relu().mean()


def padconv(batch: int = 2):
    return _PadConv(), (torch.randn(batch, 3, 32, 32),)


class _TwoRegions(nn.Module):
    """Two linears with a graph break between them: the second region's input is an
    activation the first made (WavLM's feature encoder output, across its break)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 16), nn.Linear(16, 16)

    def forward(self, x):
        h = self.a(x).relu()
        torch._dynamo.graph_break()
        return self.b(h).sigmoid().sum()


def two_regions(batch: int = 2):
    return _TwoRegions(), (torch.randn(batch, 256, 16),)


def _cli(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(argv)
    return code, out.getvalue()


def _eager_memopt(level: int):
    """memopt.optimize's compile path (Inductor's compile_fx with memopt's partitioner) with
    the partitioned graphs run as FX code instead of generated kernels: the same saved
    tensors, without a C++ compile."""
    config = resolve_config(level=level)
    state = MemoptState(config)

    def run_graph(gm, example_inputs, **kwargs):
        def run(*args):
            if len(args) == 1 and isinstance(args[0], list):
                args = tuple(args[0])
            return gm(*args)

        return run

    def backend(gm, example_inputs):
        return compat.compile_fx(
            gm,
            example_inputs,
            inner_compile=run_graph,
            config_patches={"custom_partitioner_fn": MemoptPartitioner(config, state)},
        )

    return backend


def measured_saved(source: models.ModelSource, level: int, batch: int, seq: int) -> int:
    """Saved-activation bytes of one real forward on CPU (parameters, buffers, inputs out)."""
    torch.manual_seed(0)
    built = source.materialize(batch=batch, seq=seq, dtype=torch.float32)
    torch._dynamo.reset()
    compiled = torch.compile(built.model, backend=_eager_memopt(level))
    model = built.model
    exclude = [*model.parameters(), *model.buffers(), *built.args, *built.kwargs.values()]

    def step() -> Any:
        out = compiled(*built.args, **built.kwargs)
        return out if isinstance(out, torch.Tensor) else out.loss

    _, nbytes = measure_saved_activation_bytes(step, exclude=exclude)
    torch._dynamo.reset()
    return nbytes


@pytest.fixture(scope="module")
def llama_plan() -> dict:
    code, out = _cli(
        ["plan", "hf:llama", "--config", *TINY_LLAMA, "--batch", "4", "--seq", "64"]
        + ["--device-kind", "cpu", "--dtype", "fp32", "--level", "1", "--json"]
    )
    assert code == 0
    return json.loads(out)


def test_llama_predicted_activation_bytes_equal_measured(llama_plan):
    report = llama_plan["report"]
    assert llama_plan["traced_depths"] == [None] and llama_plan["symbolic"]
    assert report["symbols"] == {"batch": 4, "seq": 64}
    source = models.resolve("hf:llama", models.split_overrides(TINY_LLAMA)[0])
    assert report["saved_bytes_before"] == measured_saved(source, 0, 4, 64)
    assert report["saved_bytes_after"] == measured_saved(source, 1, 4, 64)
    assert report["saved_bytes_after"] < report["saved_bytes_before"]


def test_llama_peak_breakdown_sums_to_the_peak(llama_plan):
    peak = llama_plan["peak"]
    parts = peak["components"]
    assert set(parts) == {
        "parameters",
        "gradients",
        "optimizer states",
        "activations",
        "temporaries",
        "inputs",
    }
    assert sum(p["bytes"] for p in parts.values()) == peak["peak_bytes"]
    n = llama_plan["parameters"]
    assert parts["parameters"]["bytes"] == 4 * n  # fp32
    assert parts["optimizer states"]["bytes"] == 8 * n + 4 * len(_param_shapes())
    assert peak["saved_activations_bytes"] == llama_plan["report"]["saved_bytes_after"]
    assert "batch*seq" in peak["peak_symbolic"]


def _param_shapes() -> list:
    source = models.resolve("hf:llama", models.split_overrides(TINY_LLAMA)[0])
    return [p.shape for p in source.build(batch=2, seq=3, dtype=None).model.parameters()]


def test_factory_symbols_and_exact_bytes():
    code, out = _cli(
        ["plan", "tests.test_cli_plan:mlp", "--batch", "3", "--seq", "10"]
        + ["--device-kind", "cpu", "--config", "BiasGelu+:1:-1", "--json"]
    )
    assert code == 0
    d = json.loads(out)
    rows = {p["cluster_id"]: p for p in d["report"]["plans"]}
    assert rows["BiasGelu+"]["enabled"]
    assert rows["BiasGelu+"]["saving_symbolic"] == "512*batch*seq"  # GELU out, fp32 x 128
    source = models.resolve("tests.test_cli_plan:mlp", {})
    before = measured_saved(source, 0, 3, 10)
    assert d["report"]["saved_bytes_before"] == before
    assert d["report"]["saved_bytes_after"] == before - 512 * 3 * 10


def test_only_a_leading_dimension_of_the_batchs_size_is_the_batch():
    """UNet3D's 2 frames at batch 2 were traced as a second batch: ``batch^2`` bytes."""
    code, out = _cli(["plan", "tests.test_cli_plan:video", "--batch", "2", "--seq", "6"]
                     + ["--device-kind", "cpu", "--json"])  # fmt: skip
    assert code == 0
    region = json.loads(out)["report"]["regions"][0]
    # the GELU's input and output: 2 x 8 channels x 2 frames x seq x seq, float32
    assert region["baseline_saved_symbolic"] == "128*batch*seq**2"
    source = models.resolve("tests.test_cli_plan:video", {})
    assert measured_saved(source, 0, 3, 6) == 128 * 3 * 6**2


def test_a_size_equal_to_a_batch_sized_one_at_the_traced_batch_does_not_fix_the_batch():
    """memopt's memory model compared a batch-sized numel (8 * batch) with a static one (16) by
    ``!=`` on SymInts: a guard ``Eq(8*s0, 16)`` at batch 2 made the batch the constant 2, and
    every formula after it stopped scaling (ALBERT, LeViT, Latte at ``--batch 2``)."""
    for batch in (2, 4):
        code, out = _cli(["plan", "tests.test_cli_plan:gram", "--batch", str(batch)]
                         + ["--device-kind", "cpu", "--json"])  # fmt: skip
        assert code == 0
        peak = json.loads(out)["peak"]
        # the input x and the GELU's saved input h: 8 float32 per row each
        assert peak["components"]["inputs"]["symbolic"] == "32*batch"
        assert peak["saved_activations_symbolic"] == "32*batch"


def test_a_later_regions_flattened_tokens_are_batch_times_seq():
    """The loss region's input ``(batch*seq, 4)`` has a symbol of its own (value 2 x 6 = 12 in
    the trace): it is named ``batch*seq``, so the formulas scale with both."""
    code, out = _cli(["plan", "tests.test_cli_plan:flat", "--batch", "2", "--seq", "6"]
                     + ["--device-kind", "cpu", "--json"])  # fmt: skip
    assert code == 0
    regions = json.loads(out)["report"]["regions"]
    assert len(regions) == 2
    # the second region saves its input logits (for softmax and sigmoid's backward) and
    # the softmax and sigmoid outputs: 4 float32 per token each
    texts = [r["baseline_saved_symbolic"] for r in regions]
    assert all("inputs" not in t and "L_" not in t and "s" != t[:1] for t in texts), texts
    assert any("batch*seq" in t for t in texts), texts
    # a factory without a sequence: the flattened rows are 16 per batch row
    code, out = _cli(["plan", "tests.test_cli_plan:flat_fixed", "--batch", "2"]
                     + ["--device-kind", "cpu", "--json"])  # fmt: skip
    assert code == 0
    regions = json.loads(out)["report"]["regions"]
    texts = [r["baseline_saved_symbolic"] for r in regions]
    assert texts == ["640*batch", "256*batch"], texts
    # the loss region's saved input (its logits, 16*batch x 4 float32) and its symbol table
    # are named too (they kept the raw ``16*inputs_logits_dim0`` and ``{"16*batch": 32}``)
    rows = [(e["symbolic"], e["bytes"]) for e in regions[1]["extra"]["saved_inputs"]]
    assert rows == [("256*batch", 512)], rows
    assert [r["symbols"] for r in regions] == [{"batch": 2}, {"batch": 2}]


def test_a_size_the_factory_does_not_take_is_an_error_and_the_header_names_its_own():
    """``gram`` has no ``seq`` parameter: ``--seq`` would change nothing, so it is refused (it
    was ignored, and the header said ``x seq 2048``); without it the header names the batch
    alone and ``--batch`` still scales the formulas."""
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = main(["plan", "tests.test_cli_plan:gram", "--seq", "64", "--device-kind", "cpu"])
    assert code == 2
    assert "--seq: factory tests.test_cli_plan:gram has no seq parameter" in err.getvalue()
    code, out = _cli(["plan", "tests.test_cli_plan:gram", "--batch", "3", "--device-kind", "cpu"])
    assert code == 0
    head = out.splitlines()[0]
    assert "batch 3, for cpu" in head and "seq" not in head, head
    assert "symbolic batch, in" in out.splitlines()[1]
    code, out = _cli(["plan", "tests.test_cli_plan:gram", "--device-kind", "cpu", "--json"])
    assert code == 0
    d = json.loads(out)
    assert (d["batch"], d["seq"]) == (8, None)


def test_a_recompute_charged_for_a_layout_copy_has_a_named_saving():
    """The padded input's recompute would make Inductor save a channels-last copy of the
    input: its saving is the padded copy less that copy, whose bytes kept dynamo's raw symbol
    (EfficientNet: ``? 50700*batch - 49152*s97``, a row without a value)."""
    code, out = _cli(["plan", "tests.test_cli_plan:padconv", "--batch", "2"]
                     + ["--device-kind", "cpu", "--json"])  # fmt: skip
    assert code == 0
    rows = [p for p in json.loads(out)["report"]["plans"] if "ConstantPadNd" in p["cluster_id"]]
    assert rows, out
    # the padded input (3 x 33 x 33 float32 a row) less the input's copy (3 x 32 x 32)
    assert [(p["saving_symbolic"], p["saving_bytes"]) for p in rows] == [("780*batch", 1560)]


def test_an_activation_handed_over_a_break_is_no_input_and_its_gradient_no_parameters():
    """The second region's input gradient was a "gradient" live to the optimizer step and its
    input an "input" (token ids and labels): WavLM's gradients row grew with the batch past
    all its parameters' gradients, its inputs row was 8x the user's input (sweep 6b, bug 5)."""
    code, out = _cli(["plan", "tests.test_cli_plan:two_regions", "--batch", "3"]
                     + ["--device-kind", "cpu", "--json"])  # fmt: skip
    assert code == 0
    peak = json.loads(out)["peak"]
    rows = peak["components"]
    assert peak["all_gradients_bytes"] == 2 * (16 * 16 + 16) * 4
    # only parameter gradients, none of them growing with the batch
    assert "batch" not in rows["gradients"]["symbolic"], rows["gradients"]
    assert rows["gradients"]["bytes"] <= peak["all_gradients_bytes"]
    assert rows["inputs"]["symbolic"] == "16384*batch"  # x: 256 x 16 float32 a row


def test_gpt_text_output_without_allocating_parameters():
    # ~600M parameters (1.2 GB in bf16): planned with fake tensors, nothing is allocated
    big = ["n_embd=4096", "n_layer=2", "n_head=32", "n_positions=256"]
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    code, out = _cli(["plan", "hf:gpt2", "--config", *big, "--batch", "2", "--seq", "256"])
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert code == 0
    assert grown_mib < 600, f"RSS grew by {grown_mib:.0f} MiB"
    assert "Memory Optimizer : OFF : Level 0" in out
    assert "for cuda (traced on fake CPU tensors with the GPU's attention kernels)" in out
    assert "Predicted peak of one training step:" in out
    assert "BiasGelu+" in out and "*batch*seq" in out
    for part in ("parameters", "gradients", "optimizer states", "activations", "temporaries"):
        assert f"\n  {part} " in out


def test_a_budget_plan_fuses_the_loss_and_plans_as_training_does():
    """``memopt plan --budget`` fuses the LM head and its loss as ``memopt.optimize(model,
    budget=...)`` does by default, so it answers with training's plan: the same plan strings,
    the same saved bytes before and after, and the fused-loss section in the report."""
    import memopt

    code, out = _cli(
        ["plan", "hf:llama", "--config", *TINY_LLAMA, "--batch", "4", "--seq", "64"]
        + ["--device-kind", "cpu", "--dtype", "fp32", "--budget", "0.5", "--json"]
    )
    assert code == 0
    cli = json.loads(out)["report"]
    region = cli["regions"][0]
    assert "fused_loss" in region["extra"]

    source = models.resolve("hf:llama", models.split_overrides(TINY_LLAMA)[0])
    torch.manual_seed(0)
    built = source.materialize(batch=4, seq=64, dtype=torch.float32)
    torch._dynamo.reset()
    opt = memopt.optimize(built.model, budget=0.5)
    opt(*built.args, **built.kwargs).loss.backward()
    trained = memopt.report(opt).to_dict()
    torch._dynamo.reset()
    got = trained["regions"][0]
    assert "fused_loss" in got["extra"]
    want = got["extra"]["planner"]
    assert region["extra"]["planner"]["plan_strings"] == want["plan_strings"]
    assert cli["saved_bytes_before"] == trained["saved_bytes_before"]
    assert cli["saved_bytes_after"] == trained["saved_bytes_after"]


def test_a_batch_frozen_after_a_graph_break_is_said_with_the_numbers():
    """The resumed frame's ``repeat(n, ...)`` is traced with ``n`` = 2: the query rows'
    bytes are a constant of that batch. A second trace at batch 3 saves one more sample's
    query bytes than the formulas say there: the Linear's input (4 x 8 fp32, 128 B) and its
    ReLU's mask (32 B), and the plan says so with both numbers."""
    code, out = _cli(["plan", "tests.test_cli_plan:frozen", "--batch", "2", "--device-kind", "cpu"])
    assert code == 0
    notes = [line for line in out.splitlines() if "hold at the traced batch only" in line]
    assert len(notes) == 1, out
    got, said = (int(x.replace(",", "")) for x in re.findall(r"([\d,]+) B", notes[0]))
    assert (got - said, "at batch 3" in notes[0]) == (160, True), notes[0]
    # a model without the int keeps its formulas and gets no such note
    code, out = _cli(["plan", "tests.test_cli_plan:flat_fixed", "--batch", "2"]
                     + ["--device-kind", "cpu"])  # fmt: skip
    assert code == 0 and "hold at the traced batch only" not in out


def test_a_guessed_size_is_kept_only_where_a_second_batch_confirms_it():
    """``_confirm``: a symbol worth 8 at batch 2 and 3 is the number 8 (it was ``4*batch``);
    32 and 48 are ``16*batch``; 5 and 7 stay raw; names not in doubt are kept."""
    from memopt.cli.analyze import _confirm

    names = {"a": "4*batch", "b": "batch", "c": "16*batch"}
    at2, at3 = {"a": 8, "b": 2, "c": 32, "d": 5}, {"a": 8, "b": 3, "c": 48, "d": 7}
    got = _confirm(names, ["a", "c", "d"], at2, at3, 2, 3)
    assert got == {"b": "batch", "a": "8", "c": "16*batch"}
