"""Records PyTorch 2.13's answers for the porting tests into tests/support/porting_references.json.

Not run by the suite (CI has no torch). Run from the repository root with torch 2.13 (CPU)::

    /work/venv/bin/python tests/support/make_porting_references.py

Each section is what PyTorch returns (orders, batches, attributes, state dicts,
optimizer trajectories) or the message it raises, for code the tests run
unchanged through tinyamp (``lib`` is ``torch`` here, ``tinyamp`` there).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from tests.support.porting_cases import CASES

OUT = Path(__file__).parent / "porting_references.json"


def main() -> None:
    refs = {"torch_version": torch.__version__}
    for name, case in CASES.items():
        refs[name] = case(torch)
    lines = [f"{json.dumps(k)}: {json.dumps(refs[k], sort_keys=True)}" for k in sorted(refs)]
    OUT.write_text("{\n" + ",\n".join(lines) + "\n}\n")  # one case a line: diffs stay readable
    print(f"wrote {OUT} ({len(refs) - 1} cases)")


if __name__ == "__main__":
    main()
