"""The call budget of one autocast ``nn.Linear`` (issue 27): what ``benchmarks/count_calls.py`` counts, as shipped.

Counts of functions and files, not timings: the same on every run, so a budget can be asserted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "benchmarks", "count_calls.py")


def test_one_autocast_linear_stays_within_its_call_budget(tmp_path) -> None:
    out = tmp_path / "count_calls.json"
    env = {**os.environ, "PYTHONPATH": REPO}
    run = subprocess.run([sys.executable, SCRIPT, "--json", str(out), "-v"], capture_output=True, text=True,
                         env=env, timeout=600)
    assert run.returncode == 0, run.stderr
    counts = json.loads(out.read_text())
    forward, backward = counts["forward"], counts["backward"]
    listing = run.stdout
    assert forward["functions"] <= 42 and forward["files"] <= 14, listing
    assert backward["functions"] <= 42 and backward["files"] <= 13, listing
    # What is counted is the path itself: the op, the Cast nodes, the GEMM and its kernels, the engine.
    assert any(" gemm_bias " in f for f in forward["list"]) and any(" forward " in f and "ops/cast.py" in f
                                                                   for f in forward["list"])
    assert any("autograd/engine.py" in f for f in backward["list"]) and any(" gemm " in f for f in backward["list"])
    # No capture check and no numba-path lookup on the CPU path.
    assert not [f for f in forward["list"] + backward["list"] if "capture" in f or "cpu_path.py" in f]
