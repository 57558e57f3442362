"""The transformer kernels (issue 28) against PyTorch 2.13, through the stored answers of tests/support/
kernel_references.npz (made by make_kernel_references.py; CI has no torch).

Each case (tests/support/kernel_cases.py: erf, GELU exact and tanh, layer_norm, softmax, log_softmax,
causal scaled_dot_product_attention, embedding) runs through tinyamp's public functions, forward and
backward, on the same inputs as PyTorch:

- in float64, tinyamp agrees with PyTorch's float64 answer to 1e-12 (relative to the values' scale);
- in float32 and bfloat16 (the inputs are bfloat16 values, exact in both), tinyamp's error against
  the float64 answer is at most PyTorch's own error plus ``SLACK`` (two float32 roundings, or one
  bfloat16 rounding: the reasons beside it), both measured normwise.
"""

from __future__ import annotations

import numpy as np
import pytest

import tinyamp as ta
from tinyamp import dtypes as dt
from tests.support import SUPPORT
from tests.support.kernel_cases import CASES

REFS = np.load(SUPPORT / "kernel_references.npz")
EPS = {"float32": 2.0 ** -23, "bfloat16": 2.0 ** -7}  # one unit in the last place at 1
# How much more error than PyTorch's a result may have (normwise, at the largest magnitude): in float32 two
# roundings (2 x 0.5 ulp: tinyamp's erf backward is composed of float32 ops where PyTorch fuses it, and its
# attention's dk is summed over query blocks in float32; measured 1.35 vs 1.05 and 2.01 vs 1.42 ulp); in
# bfloat16 one rounding of the format (its results are float32 values rounded once, as PyTorch's are).
SLACK = {"float32": 2.0 ** -23, "bfloat16": 2.0 ** -8}


def _stored(key: str, fmt: str) -> np.ndarray:
    a = REFS[key]
    return a.view(dt.bfloat16).astype(np.float64) if fmt == "bfloat16" else a.astype(np.float64)


def _run(name: str, fmt: str) -> dict:
    """tinyamp's output and gradients for case ``name`` on its inputs rounded to ``fmt``, as float64."""
    case = CASES[name]
    dtype = getattr(ta, fmt)
    tensors = {}
    for key in case.inputs:
        a = REFS[f"{name}/in/{key}"]
        tensors[key] = ta.tensor(a) if a.dtype.kind == "i" else ta.tensor(a, dtype=dtype)  # exact: bfloat16 values
    for key in case.grads:
        tensors[key].requires_grad_()
    out = case.call(ta, tensors)
    assert out.dtype == dtype
    (out * ta.tensor(REFS[f"{name}/cot"], dtype=dtype)).sum().backward()
    got = {"out": out.detach().numpy().astype(np.float64)}
    for key in case.grads:
        assert tensors[key].grad.dtype == dtype
        got[f"grad/{key}"] = tensors[key].grad.numpy().astype(np.float64)
    return got


def test_the_references_are_pytorch_2_13() -> None:
    assert str(REFS["torch_version"]).startswith("2.13"), REFS["torch_version"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_float64_agrees_with_pytorch(name: str) -> None:
    got = _run(name, "float64")
    for key, value in got.items():
        want = REFS[f"{name}/float64/{key}"]
        scale = max(np.max(np.abs(want)), 1e-300)
        assert np.max(np.abs(value - want)) <= 1e-12 * scale, (key, np.max(np.abs(value - want)) / scale)


def errors(name: str, fmt: str) -> dict:
    """{output or gradient: (tinyamp's error, PyTorch's error)}, each the largest absolute error against the
    float64 answer over the largest magnitude of that answer (normwise: softmax's and attention's gradients
    cancel, so elementwise relative errors say more about the cancelling than about a kernel)."""
    out = {}
    for key, value in _run(name, fmt).items():
        exact = REFS[f"{name}/float64/{key}"]  # the inputs are bfloat16 values: the exact answer of every format
        scale = np.max(np.abs(exact))
        theirs = _stored(f"{name}/{fmt}/{key}", fmt)
        out[key] = (np.max(np.abs(value - exact)) / scale, np.max(np.abs(theirs - exact)) / scale)
    return out


@pytest.mark.parametrize("fmt", ["float32", "bfloat16"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_as_accurate_as_pytorch(name: str, fmt: str) -> None:
    for key, (ours, theirs) in errors(name, fmt).items():
        assert ours <= theirs + SLACK[fmt], (key, ours / EPS[fmt], theirs / EPS[fmt])
