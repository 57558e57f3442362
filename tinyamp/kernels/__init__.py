"""Array kernels: arrays in, arrays out; no Tensor, no tape (docs/ARCHITECTURE.md, "Where kernels live").

The layout says what each file is:

- here, the **reference numerics and their dispatch**: what every path must
  compute, bit for bit, and which path runs for the arrays at hand.
  ``convert.py`` (float32/float16/bfloat16 conversions, ``astype``'s bits),
  ``gemm.py`` (the GEMM with float32 accumulation every LOWER contraction
  reaches: float32 BLAS on the CPU, cuBLAS on a GPU), ``cross_entropy.py``
  (cross-entropy of 2-D logits in one pass each way), ``loss_scale.py`` (unscale
  with inf/nan detection, the dynamic scale rule), ``gelu.py`` (erf and GELU, exact
  and tanh, one pass each way);
- ``cpu/``, the **CPU kernels**: the choice of CPU path and the numba and NumPy
  fast paths (conversions, ReLU, the GEMM epilogue, the optimizers' loops; the
  transformer ops' numba loops in ``nn_numba.py``, called by ``gelu_cpu.py`` and its siblings);
- ``cuda/``, the **CUDA kernels**: launching and counting, cuBLAS/cuBLASLt
  called directly, and the fused kernels (conversions, ReLU, cross-entropy,
  loss scale, optimizers).

Every module here imports only NumPy, ml_dtypes and the modules below the
tensor (``tinyamp.backend``, ``tinyamp.dtypes``, ``tinyamp.precision``); CuPy and
numba only through them or lazily.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from . import convert as _convert
from .cpu import cpu_path as _cpu_path
from .cpu import gelu_cpu
from .cpu.elementwise_cpu import bias_act_convert, relu_backward_lowp, relu_lowp

__all__ = ["warmup"]


def warmup() -> str:
    """Load and compile every CPU kernel of the chosen path now; return ``cpu_path.BACKEND``.

    With numba the first call of each kernel otherwise compiles it (about
    0.3-0.5 s, or a few ms from numba's on-disk cache).
    """
    if _cpu_path.BACKEND == "numba" and _cpu_path.numba_available():
        a32 = np.zeros(4, dt.float32)
        a16 = np.zeros(4, dt.float16)
        ab = np.zeros(4, dt.bfloat16)
        for src in (a32, a16, ab):
            for target in (dt.float32, dt.float16, dt.bfloat16):
                if src.dtype != target:
                    _convert.convert(src, target, backend="numba")
        relu_lowp(a16, backend="numba")
        relu_backward_lowp(a16, a16, backend="numba")
        y = np.zeros((2, 2), dt.float32)
        b = np.zeros(2, dt.float32)
        bias_act_convert(y, b, dt.float16, relu=True, backend="numba")
        bias_act_convert(y, b, dt.bfloat16, relu=True, backend="numba")
        for src in (a32, a16, ab):
            for approximate in ("none", "tanh"):
                gelu_cpu.gelu_backward(src, gelu_cpu.gelu(src, approximate), approximate)
            gelu_cpu.erf(src, src.dtype)
    return _cpu_path.BACKEND
