"""Docs that stay true: the generated tables of the docs equal what docs/data renders."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import docs_numbers, docs_tables  # noqa: E402


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
        assert p is not None and p.device in ("cpu", "gpu"), f
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
