"""The stored PyTorch 2.13 answers of tests/support/porting_cases.py, and the check that tinyamp gives them."""

from __future__ import annotations

import json
from pathlib import Path

import tinyamp as ta
from tests.support.porting_cases import CASES

REFS = json.loads((Path(__file__).parent / "porting_references.json").read_text())


def check(name: str) -> None:
    """Run case ``name`` with tinyamp and compare with PyTorch's recorded answer, key by key."""
    assert REFS["torch_version"].startswith("2.13"), REFS["torch_version"]
    ours, theirs = CASES[name](ta), REFS[name]
    if isinstance(theirs, dict):
        assert sorted(ours) == sorted(theirs), f"{name}: keys differ"
        for key in theirs:
            assert ours[key] == theirs[key], f"{name}[{key!r}]: tinyamp {ours[key]!r} vs PyTorch {theirs[key]!r}"
    else:
        assert ours == theirs, f"{name}: tinyamp {ours!r} vs PyTorch {theirs!r}"
