"""memopt.format: short ids with a legend, readable formulas, folded parameter rows (exact text)."""

import pytest
import sympy
from torch.utils._sympy.functions import CeilToInt, FloorDiv, IntTrueDiv, PythonMod

from memopt.config import MemoptConfig
from memopt.errors import ConfigError
from memopt.format import (
    fold_kept_lines,
    fold_param_rows,
    format_param_rows,
    pretty_expr,
    shorten_ids,
)
from memopt.plan import parse_plans
from memopt.report import RegionReport, Report

LONG = "MatMul+Reshape+Reshape+Transpose+Softmax+Dropout+MatMul+Transpose+Reshape+Gemm+Add+"
SAVED = "Saved_" + "x" * 60 + "+"


def test_short_ids_keep_first_and_last_op_and_a_stable_hash():
    mapping, legend = shorten_ids([LONG, "BiasGelu+", LONG], width=30)
    assert mapping == {"BiasGelu+": "BiasGelu+", LONG: "MatMul+…+Add+#b59e"}
    assert legend == [f"MatMul+…+Add+#b59e = {LONG}"]


def test_short_ids_fit_the_width():
    for width in (14, 16, 20, 30, 40):
        mapping, legend = shorten_ids([LONG, SAVED], width=width)
        assert all(len(v) <= width for v in mapping.values()), (width, mapping)
        assert len(legend) == 2
    assert shorten_ids([LONG], 14)[0][LONG] == "MatMul+…+#b59e"
    assert shorten_ids([SAVED], 20)[0][SAVED] == "Saved_xxxxxxxx…#923b"


def test_short_ids_that_fit_are_left_alone():
    assert shorten_ids(["Gemm+", "BiasGelu+"], width=9) == (
        {"Gemm+": "Gemm+", "BiasGelu+": "BiasGelu+"},
        [],
    )


def test_short_ids_never_collide():
    # same first and last op, same length: only the hash tells them apart
    a = "MatMul+" + "Reshape+" * 5 + "Add+"
    b = "MatMul+" + "Transp+" * 5 + "Mul+" + "Add+"
    mapping, legend = shorten_ids([a, b], width=20)
    assert len(set(mapping.values())) == 2 and len(legend) == 2


def test_short_ids_refuse_a_bad_width():
    with pytest.raises(ConfigError, match="width must be positive"):
        shorten_ids(["A+"], 0)


BATCH, SEQ = sympy.symbols("batch seq", integer=True, positive=True)


@pytest.mark.parametrize(
    "expr, text",
    [
        (CeilToInt(IntTrueDiv(SEQ, 32)), "ceil(seq/32)"),
        ("CeilToInt(IntTrueDiv(seq, 32))", "ceil(seq/32)"),  # parsed back from report JSON
        (2 * BATCH * SEQ**2 + 4291348 * BATCH * SEQ + 5, "2*batch*seq^2 + 4291348*batch*seq + 5"),
        (128 * BATCH * CeilToInt(IntTrueDiv(SEQ, 32)), "128*batch*ceil(seq/32)"),
        (FloorDiv(BATCH * SEQ, 4), "batch*seq//4"),
        (PythonMod(SEQ, 8), "seq % 8"),
        (3 * SEQ / 4, "3*seq/4"),
        (BATCH / (2 * SEQ), "batch/(2*seq)"),
        ((BATCH + 1) ** 2, "(batch + 1)^2"),
        (BATCH**-2, "1/batch^2"),
        (BATCH - 2 * SEQ, "batch - 2*seq"),
        (-BATCH * SEQ, "-batch*seq"),
        (sympy.Max(BATCH, SEQ), "max(batch, seq)"),
        (sympy.Integer(4096), "4096"),
    ],
)
def test_pretty_expr(expr, text):
    assert pretty_expr(expr) == text


def _rows():
    rows = [{"name": "model.embed.weight", "param_bytes": 1 << 20, "where": "gpu"}]
    for i in range(5):
        for name, nbytes in (("attn.weight", 4 << 20), ("mlp.weight", 8 << 20)):
            where = "cpu" if i < 3 else "gpu"
            rows.append({"name": f"model.layers.{i}.{name}", "param_bytes": nbytes, "where": where})
    rows.append({"name": "lm_head.weight", "param_bytes": 1 << 20, "where": "gpu"})
    return rows


def test_fold_param_rows_per_layer_group():
    assert fold_param_rows(_rows()) == [
        {
            "name": "other parameters",
            "layers": 0,
            "params": 2,
            "param_bytes": 2 << 20,
            "where": "gpu",
        },
        {
            "name": "model.layers.0-2",
            "layers": 3,
            "params": 2,
            "param_bytes": 12 << 20,
            "where": "cpu",
        },
        {
            "name": "model.layers.3-4",
            "layers": 2,
            "params": 2,
            "param_bytes": 12 << 20,
            "where": "gpu",
        },
    ]


def test_fold_param_rows_keeps_a_different_layer_apart():
    rows = _rows()
    rows[3]["param_bytes"] = 1  # layer 1's attention is smaller
    names = [r["name"] for r in fold_param_rows(rows)]
    assert names == [
        "other parameters",
        "model.layers.0",
        "model.layers.1",
        "model.layers.2",
        "model.layers.3-4",
    ]


def test_format_param_rows_table():
    assert format_param_rows(_rows()) == "\n".join(
        [
            "parameters                       layers params   MiB each  where",
            "other parameters                      -      2       2.00  gpu",
            "model.layers.0-2                      3      2      12.00  cpu",
            "model.layers.3-4                      2      2      12.00  gpu",
        ]
    )


def test_fold_param_rows_names_a_missing_key():
    with pytest.raises(ConfigError, match="lacks 'where'"):
        fold_param_rows([{"name": "a.0.w", "param_bytes": 4}])


_KEPT_TEXT = """activation offload: 12 host copies, 543.00 MiB per step
kept on device: saved[0] primals_1: a graph input
kept on device: saved[1] primals_4: a graph input
kept on device: saved[2] primals_5: a graph input
kept on device: saved[76] mm_default: in no detected layer
kept on device: saved[77] rsqrt: 32768 bytes < min_bytes=1048576
kept on device: saved[84] getitem_1: 524288 bytes < min_bytes=1048576
kept on device: saved[93] add_9: layer 1 is not in the sync dict
note: where: first used in backward before its reload point"""


def test_fold_kept_lines_one_line_per_reason():
    assert fold_kept_lines(_KEPT_TEXT).split("\n") == [
        "activation offload: 12 host copies, 543.00 MiB per step",
        "kept on device: 3 saved tensors, a graph input: saved[0-2] (primals_1 ... primals_5)",
        "kept on device: saved[76] mm_default: in no detected layer",
        "kept on device: 2 saved tensors, under min_bytes=1048576: saved[77,84] (rsqrt, getitem_1)",
        "kept on device: saved[93] add_9: layer 1 is not in the sync dict",
        "note: where: first used in backward before its reload point",
    ]
    assert fold_kept_lines("no kept lines\nhere") == "no kept lines\nhere"


def test_the_report_prints_the_offload_section_folded():
    region = RegionReport(
        index=0,
        symbols={},
        clusters=[],
        excluded=[],
        baseline_saved_symbolic="0",
        baseline_saved_bytes=0,
        final_saved_symbolic="0",
        final_saved_bytes=0,
        extra={"offload": {"text": _KEPT_TEXT, "total_bytes": 0}},
    )
    table = Report(MemoptConfig(), [region]).table()
    kept = [line for line in table.split("\n") if line.startswith("kept on device")]
    assert len(kept) == 4
    assert kept[0] == (
        "kept on device: 3 saved tensors, a graph input: saved[0-2] (primals_1 ... primals_5)"
    )


def test_the_heading_counts_a_long_plan_list():
    plans = parse_plans([f"Gemm+Reshape+Split+Reshape+Transpose+Mul{i}+:1:-1" for i in range(17)])
    head = Report(MemoptConfig(plans=plans), []).table().split("\n")[0]
    assert head == (
        "Memory Optimizer : OFF : Level 0, User config: 17 plan strings (their rows are ON in "
        "the table), probe level: 1"
    )
    short = Report(MemoptConfig(plans=parse_plans(["BiasGelu+:1:-1"])), []).table()
    assert short.startswith("Memory Optimizer : OFF : Level 0, User config: BiasGelu+:1:-1,")


def test_wrap_line_keeps_ids_whole_and_indents_under_the_label():
    from memopt.format import wrap_line

    ids = ", ".join(["Gemm+Reshape+Reshape+Transpose+Cast+:1:4"] * 3)
    assert wrap_line("plan: " + ids, width=100) == [
        "plan: Gemm+Reshape+Reshape+Transpose+Cast+:1:4, Gemm+Reshape+Reshape+Transpose+Cast+:1:4,",
        "      Gemm+Reshape+Reshape+Transpose+Cast+:1:4",
    ]
    assert wrap_line("Note 4: " + "ab " * 30, width=40) == [
        "Note 4: ab ab ab ab ab ab ab ab ab ab ab",
        "        ab ab ab ab ab ab ab ab ab ab ab",
        "        ab ab ab ab ab ab ab ab",
    ]
    assert wrap_line("short") == ["short"]


def test_report_and_planner_text_fit_120_columns():
    import torch

    import memopt
    from tests.helpers import MLP

    torch.manual_seed(0)
    model = MLP(n=3)
    opt = memopt.optimize(model, budget=0.3)
    for _ in range(2):
        opt(torch.randn(8, 64)).sum().backward()
    table = memopt.report(opt).table()
    assert "Budget planner" in table
    assert max(len(line) for line in table.split("\n")) <= 120


def test_an_offload_without_copies_names_no_copy_mode():
    """No copy: nothing tells whether copies would run on CUDA streams (a CPU region once said
    "copies async (CUDA streams)" with 0 copies)."""
    from memopt.offload.result import OffloadedTensor, OffloadResult
    from memopt.offload.sync import Schedule

    def first(result: OffloadResult) -> str:
        return result.summary().split("\n")[0]

    none = OffloadResult(None, None, Schedule(2, ()), (), (), (), synchronous=False)
    assert first(none) == "activation offload: 0 host copies, 0 B per step"
    one = OffloadedTensor(0, "mm", ("mm",), (3,), 1024, via_base=False)
    some = OffloadResult(None, None, Schedule(2, ()), (one,), (), (), synchronous=True)
    assert first(some).endswith("1.00 KiB per step, copies synchronous (no CUDA device)")
