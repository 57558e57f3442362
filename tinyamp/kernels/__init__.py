"""Array kernels: arrays in, arrays out; no Tensor, no tape (docs/ARCHITECTURE.md, "Where kernels live").

The pattern: one dispatching function per kernel at the top of ``kernels/`` is
the only place a device or dtype is chosen. It takes raw arrays, tests which
path applies (``type(x) is np.ndarray`` and ``cpu_path`` for the CPU's numba
loops, ``cuda_vector.takes``/``cuda_launch.on_gpu`` for a CUDA kernel), and
otherwise runs the plain NumPy/CuPy expression every path reproduces bit for
bit. The kernels themselves live beneath: ``cpu/`` (numba loops) and ``cuda/``
(RawKernels, cuBLAS, cuBLASLt), which never import each other. An op's forward
is an ``xp`` expression or one call of a function here; op and optimizer
modules import nothing from ``cpu/`` or ``cuda/`` (tests/test_architecture.py).

At the top: ``convert.py`` (float32/float16/bfloat16 conversions, ``astype``'s
bits), ``gemm.py`` (``gemm``, and ``gemm_bias``: linear's forward on every
device), ``elementwise.py`` (``relu``, ``relu_backward``, ``column_sum``),
``cross_entropy.py`` (one pass each way), ``loss_scale.py`` (unscale with
inf/nan detection, the dynamic scale rule), ``updates.py`` (SGD and Adam, one
call per parameter group), ``gelu.py`` (erf and GELU, exact and tanh),
``layer_norm.py``, ``softmax.py``, ``attention.py``, ``embedding.py`` (the
transformer ops), ``fp8.py``, ``fp8_quantize.py``, ``fp8_gemm.py`` (fp8 casts,
scaling, GEMMs). In ``cpu/``, the transformer ops' numba loops are
``nn_numba.py``, called by ``gelu_cpu.py`` and its siblings.

Every module here imports only NumPy, ml_dtypes and the modules below the
tensor (``tinyamp.backend``, ``tinyamp.dtypes``, ``tinyamp.precision``); CuPy and
numba only through them or lazily.
"""

from __future__ import annotations

import numpy as np

from .. import dtypes as dt
from . import convert as _convert
from .cpu import cpu_numba as _cpu_numba
from .cpu import cpu_path as _cpu_path
from .cpu import gelu_cpu
from .cpu.elementwise_cpu import relu_backward_lowp, relu_lowp

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
        for name in ("bias_round_f16", "bias_round_bf16"):  # linear's 16-bit bias epilogue (gemm_bias)
            _cpu_numba.KERNELS[name](y, b, np.empty((2, 2), np.uint16))
        for src in (a32, a16, ab):
            for approximate in ("none", "tanh"):
                gelu_cpu.gelu_backward(src, gelu_cpu.gelu(src, approximate), approximate)
            gelu_cpu.erf(src, src.dtype)
    return _cpu_path.BACKEND
