"""Records PyTorch 2.13's results for the transformer kernels (issue 28) into tests/support/kernel_references.npz.

Not run by the suite (CI has no torch). Run from the repository root with torch 2.13 (CPU)::

    PYTHONPATH=$PWD /work/venv/bin/python tests/support/make_kernel_references.py

For each case (``kernel_cases.CASES``: erf, GELU exact and tanh, layer_norm, softmax, log_softmax,
causal scaled_dot_product_attention, embedding): the float64 inputs and cotangent (seeded NumPy
draws, bfloat16 values so that every format holds them exactly); PyTorch's output and the gradients
of ``sum(out * cot)`` in float64 (the answer every format's error is measured against), float32 and
bfloat16 (stored as its bits, uint16).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from tests.support import SUPPORT
from tests.support.kernel_cases import CASES, draw

OUT = SUPPORT / "kernel_references.npz"
FORMATS = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16}


def as_stored(t: torch.Tensor) -> np.ndarray:
    """Results in their own format: float64, float32, or a bfloat16 result's 16 bits (uint16)."""
    t = t.detach()
    return t.view(torch.int16).numpy().view(np.uint16) if t.dtype == torch.bfloat16 else t.numpy()


def run(case: Any, inputs: dict, cot: np.ndarray, dtype: Any) -> dict:
    """The output and gradients of ``case`` in ``dtype``."""
    tensors = {k: torch.from_numpy(v).to(dtype) if v.dtype.kind == "f" else torch.from_numpy(v)
               for k, v in inputs.items()}  # the draws are bfloat16 values: every conversion here is exact
    for k in case.grads:
        tensors[k].requires_grad_()
    out = case.call(torch, tensors)
    results = {"out": as_stored(out)}
    (out * torch.from_numpy(cot).to(dtype)).sum().backward()
    for k in case.grads:
        results[f"grad/{k}"] = as_stored(tensors[k].grad)
    return results


def main() -> None:
    store = {"torch_version": np.array(torch.__version__)}
    for name, case in CASES.items():
        inputs, cot = draw(case)
        for key, value in inputs.items():  # bfloat16 values: float32 holds them exactly, in half the bytes
            store[f"{name}/in/{key}"] = value.astype(np.float32) if value.dtype.kind == "f" else value
        store[f"{name}/cot"] = cot.astype(np.float32)
        # The inputs are bfloat16 values, so one float64 answer is the exact one for every format's run.
        for fmt, dtype in (("float64", torch.float64), ("float32", torch.float32), ("bfloat16", torch.bfloat16)):
            store.update({f"{name}/{fmt}/{k}": v for k, v in run(case, inputs, cot, dtype).items()})
    np.savez_compressed(OUT, **store)
    print(f"wrote {OUT} ({len(CASES)} cases, {OUT.stat().st_size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
