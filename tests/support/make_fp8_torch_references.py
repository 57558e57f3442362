"""Records PyTorch's fp8 casts into tests/support/fp8_torch_references.npz.

Not run by the test suite (tests must not import torch). Run once, with torch
2.13.0 (CPU wheel), from the repository root::

    PYTHONPATH=$PWD /work/venv/bin/python tests/support/make_fp8_torch_references.py

Inputs are made by :func:`inputs` (no random draws, so the test rebuilds them):
all 2^16 float16 and bfloat16 bit patterns, and every 4093rd float32 pattern
(1,049,345 of them: every binade, both signs, inf and NaN). Stored: torch's
``float8_e4m3fn`` and ``float8_e5m2`` codes (uint8) of each input, converted
from the input's own dtype (``Tensor.to``).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from tests.support import SUPPORT

OUT = SUPPORT / "fp8_torch_references.npz"
FLOAT32_STRIDE = 4093


def inputs() -> dict:
    """name -> the input array (float16, bfloat16 or float32)."""
    patterns = np.arange(1 << 16, dtype=np.uint16)
    return {"float16": patterns.view(np.float16), "bfloat16": patterns.view(ml_dtypes.bfloat16),
            "float32": np.arange(0, 1 << 32, FLOAT32_STRIDE, dtype=np.uint64).astype(np.uint32).view(np.float32)}


def main() -> None:
    import torch

    store = {"torch_version": np.array(torch.__version__)}
    for name, x in inputs().items():
        t = torch.from_numpy(x.view(np.uint16)).view(torch.bfloat16) if name == "bfloat16" else torch.from_numpy(x)
        for fmt, dtype in (("e4m3", torch.float8_e4m3fn), ("e5m2", torch.float8_e5m2)):
            store[f"{name}/{fmt}"] = t.to(dtype).view(torch.uint8).numpy().copy()
    np.savez_compressed(OUT, **store)
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
