"""The AMP core a student reads first stays within its budget (issue 27: <= 2,000 code lines).

The core is the table "The AMP core" of docs/ARCHITECTURE.md, which benchmarks/core_size.py reads.
"""

from __future__ import annotations

from benchmarks import core_size


def test_the_core_table_names_files_that_exist() -> None:
    names = core_size.core_files()
    assert "tinyamp/tensor.py" in names and "tinyamp/amp/grad_scaler.py" in names and len(names) >= 12
    missing = [n for n in names if not (core_size.ROOT / n).is_file()]
    assert not missing, missing


def test_the_core_is_within_its_budget() -> None:
    code = sum(core_size.count((core_size.ROOT / n).read_text())["code"] for n in core_size.core_files())
    assert code <= core_size.BUDGET, f"the AMP core has {code} code lines (budget {core_size.BUDGET})"
