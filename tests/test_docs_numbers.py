"""Docs that stay true: the generated tables of the docs equal what docs/data renders."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import docs_numbers, docs_prose, docs_tables  # noqa: E402


def test_docs_agree_with_their_data(capsys):
    rc = docs_numbers.main(["--check"])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert err == ""


def test_a_changed_number_is_found_and_rewritten():
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    row = "| memopt level 1 | 84.1 | +16.8% | **6.95** | | 2.0372 |"
    assert row in text
    stale = text.replace(row, row.replace("84.1", "80.0"))
    new, names = docs_numbers.rewrite(stale)
    assert new == text
    assert "fsdp_step_per_run" in names


def test_every_generated_section_is_in_a_doc_and_every_data_file_has_a_producer():
    assert docs_numbers.check(write=False) == []
    for f in docs_numbers.data_files():
        p = docs_numbers.producer_of(f)
        assert p is not None and p.device in ("cpu", "gpu", "gpu-x2"), f
    assert docs_numbers.producer_of("zoo_cpu.json").device == "cpu"
    assert docs_numbers.producer_of("fsdp_step_v1.json").device == "gpu"


def test_unknown_section_names_the_registry():
    with pytest.raises(KeyError, match="add it to SECTIONS"):
        docs_numbers.rewrite("<!-- generated: nope -->\nx\n<!-- end generated: nope -->\n")


def test_rendered_numbers_come_from_the_json():
    # the budget row of the FSDP2 step: 9,392,624,128 B measured, 9,090,601,472 B predicted
    md = docs_tables.render("fsdp_step_per_run", docs_numbers.DATA)
    line = next(ln for ln in md.splitlines() if "torch 0.5's peak" in ln)
    assert line == (
        "| memopt `budget=` torch 0.5's peak (8.72 GiB) | 77.8 | +7.9% | 8.75 "
        "| 8.47 (with a measured correction) | 2.0353 |"
    )


def _copy_docs(tmp_path: Path) -> Path:
    (tmp_path / "docs").mkdir()
    for doc in docs_numbers.docs():
        (tmp_path / doc.relative_to(ROOT)).write_text(doc.read_text())
    return tmp_path


def test_a_changed_prose_number_fails_the_check_and_is_rewritten(tmp_path, monkeypatch):
    root = _copy_docs(tmp_path)
    readme = root / "README.md"
    marked = "<!-- n:fsdp:s8:k1:over -->-1.2%<!-- /n -->"
    text = readme.read_text()
    assert marked in text
    readme.write_text(text.replace(marked, marked.replace("-1.2%", "-2.1%")))
    monkeypatch.setattr(docs_numbers, "ROOT", root)
    problems = [p for p in docs_numbers.check(write=False) if p.startswith("README.md")]
    assert len(problems) == 1 and problems[0].startswith("README.md disagrees with docs/data")
    assert "-2.1%" in problems[0] and "-1.2%" in problems[0]
    docs_numbers.check(write=True)
    assert readme.read_text() == text


def test_prose_numbers_come_from_the_json():
    assert docs_prose.value("fsdp:s8:k1:over") == "-1.2%"  # 71.8 ms against 72.7
    assert docs_prose.value("fsdp:s8ab:b0.5n:overbudget") == "0.35%"
    assert docs_prose.value("fsdp_vs:s8ab:b0.1n:t0.1:share") == "0.41"
    assert docs_prose.value("zoo:met") == "4" and docs_prose.value("zoo:points") == "15"
    assert docs_prose.value("peers_range:memopt:2") == "0.360\u20130.377"
    _, keys = docs_numbers.rewrite("a <!-- n:cli:0:wall -->99<!-- /n --> s")
    assert keys == ["n:cli:0:wall"]


def test_an_unknown_prose_key_names_the_registry():
    with pytest.raises(KeyError, match="add it to docs_prose.VALUES"):
        docs_numbers.rewrite("<!-- n:nope:1 -->3<!-- /n -->")
    with pytest.raises(KeyError, match="no row alias"):
        docs_numbers.rewrite("<!-- n:fsdp:s8:zz:over -->3<!-- /n -->")


def test_prose_numbers_of_the_reference_docs_come_from_the_json():
    # docs/cli.md, offload.md, steps.md, planner.md: recorded CLI output, runs, fronts, copies
    assert docs_prose.value("fsdp:s8:l1:runs") == "`[0]*8 + [1, 2]`"
    assert docs_prose.value("fsdp:s8:b0.1:offlayers") == "layers 0–6"
    assert docs_prose.value("cli:2:peak:left") == "19.79"  # 70 GiB less 50.21 GiB of states
    assert docs_prose.value("cli:4:fit:planner") == "56"  # 45 in the 2026-11-25 recording
    assert docs_prose.value("pareto:pareto_v5:over") == "1 plan 2.8 MiB"
    assert docs_prose.value("copies:llama:both") == "1.7–3.0%"
    assert docs_prose.value("batch:lb_v2:memopt-budget:oom:16:free") == "2.47"
    md = docs_tables.render("cli_peak", docs_numbers.DATA)
    assert md.startswith("```\nPredicted peak of one training step: 130.32 GiB")
    assert md.splitlines()[-2].lstrip().startswith("total")


def test_older_benchmark_sections_come_from_the_json():
    # docs/benchmarks.md from the sixth session down: the largest-batch table and prose numbers
    md = docs_tables.render("largest_batch_expandable", docs_numbers.DATA)
    lines = md.splitlines()
    assert lines[2] == "| torch.compile | 9 (10: OOM) | 149,250 | 100% | 15.54 |"
    assert "| memopt budget=13.52 GiB, batch 18 (2× compile's) | fits | 141,122 | **94.6%** |" in md
    assert docs_prose.value("lbatch:lb_exp:memopt-budget:times") == "2.67"
    assert docs_prose.value("lbatch:lb_v2:memopt-budget:oom") == "12, 14, 15 and 16"
    assert docs_prose.value("freeze:nplans") == "10"  # the frozen plan's strings
    assert docs_prose.value("copy_at:llama:h2d:64") == "-1.2%"
    assert docs_prose.value("pareto_all:pareto_gpt2_b32.json:mms") == "2.14/1.82/3.90/5.67"
    assert docs_prose.value("pareto_pt:pareto_v5:0.8:halfsrc") == "+1.8%"  # reused torch rows
    assert docs_prose.value("offspan:llama8:d2hpct") == "96–100%"
    assert docs_prose.value("stability:gpt6_v2:growth") == "+0"
    assert docs_prose.value("adamw24:step") == "0.34"  # 22.2 ms per 64 Mi elements x 1.033 B
    assert docs_prose.value("peers_busy") == "0.338–0.395"
    assert docs_prose.value("floor_calc:step") == "0.315"


def test_zoo_prose_comes_from_the_json():
    # docs/zoo.md: level 1's shares on CPU (zoo_cpu.json) and DiT's GPU budget points
    assert docs_prose.value("zoo_cpu:resnet:l1share") == "45%"  # 84% before conv recompute
    assert docs_prose.value("zoo_cpu:wav2vec2:l1share") == "34%"
    assert docs_prose.value("zoo_cpu:all:minutes") == "18"  # the rows' seconds, summed
    assert docs_prose.value("zoo_pts:dit:faster") == "3.6-13.5"
    assert docs_prose.value("zoo_pts:dit:overrun") == "1.9-2.6"  # not 2.6 at every budget
    assert docs_prose.value("zoo_pts:dit:under") == "5"
    assert docs_prose.value("zoo_row:dit:level1:over") == "-10.6%"


def test_stated_code_constants_equal_the_code():
    # docs/plans.md states these defaults and constants
    from memopt.config import MemoptConfig
    from memopt.planner.chains import MAX_RECOMPUTE_DEPTH

    md = (docs_numbers.DATA.parent / "plans.md").read_text()
    assert f"MAX_RECOMPUTE_DEPTH = {MAX_RECOMPUTE_DEPTH}`" in md
    assert f"`max_subgraph_nodes` ({MemoptConfig.max_subgraph_nodes})" in md
    assert f"`max_subgraph_matmuls`, default {MemoptConfig.max_subgraph_matmuls}" in md
