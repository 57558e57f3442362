"""Array kernels: arrays in, arrays out; no Tensor, no tape (docs/ARCHITECTURE.md, "Where kernels live").

CPU and CUDA side by side, one responsibility per file:

- ``convert.py``: bit-exact float32/float16/bfloat16 conversions; ``cpu_path.py``
  the choice of CPU path (numba, NumPy bit recipes or ``astype``); ``cpu_numba.py``
  and ``cpu_numpy.py`` are the two fast paths' kernels.
- ``elementwise_cpu.py``: ReLU forward/backward on 16-bit bit patterns and the
  fused GEMM epilogue (bias in float32 + optional ReLU + downcast).
- ``gemm.py``: the GEMM with float32 accumulation every LOWER contraction
  reaches (float32 BLAS on the CPU, cuBLAS ``gemmEx`` on a GPU).
- ``loss_scale.py``: the loss-scale math (unscale with inf/nan detection, the
  dynamic scale rule) on NumPy or CuPy arrays.
- ``cross_entropy.py``: cross-entropy of 2-D logits, forward and backward in
  one pass each (NumPy; ``cuda_loss.py`` holds the CUDA kernels).
- ``cpu_optim.py``: SGD and Adam/AdamW on one float32 parameter in one numba
  pass (the CPU twin of ``cuda_optim.py``).
- ``cuda_launch.py``: compiling, launching and counting CUDA kernels;
  ``cuda_scaler.py`` and ``cuda_optim.py`` are the fused loss-scale and
  optimizer kernels; ``cuda_epilogue.py`` ReLU's backward for mixed dtypes.

Every module here imports only NumPy, ml_dtypes, ``tinyamp.backend`` and
``tinyamp.dtypes`` (CuPy and numba only through them or lazily).
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from . import convert as _convert
from . import cpu_path as _cpu_path
from .elementwise_cpu import bias_act_convert, relu_backward_lowp, relu_lowp

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
    return _cpu_path.BACKEND
