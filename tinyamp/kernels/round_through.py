"""Round float32 values through float16 or bfloat16 and back, in place: one pass, CPU or CUDA.

Under autocast a float32 weight enters a LOWER op as its 16-bit copy, so its
gradient is the 16-bit gradient widened to float32: ``float32(round16(acc))``
where ``acc`` is the float32 accumulator of the GEMM (dW) or the float32 sum
over the batch (db). When the op computes ``acc`` in float32 itself, this
epilogue turns it into that gradient without a 16-bit temporary and a second
conversion: ``y[...] = y.astype(dtype).astype(float32)``, bit for bit.

- CPU: one numba pass on the float32 bit patterns (``cpu_numba``), else the
  NumPy conversions of ``convert.py`` (two passes).
- CUDA: one ``ElementwiseKernel`` launch (CuPy's float16/bfloat16 rounding, as
  ``astype``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes as dt
from . import cuda_launch
from .convert import convert, resolve
from .cpu_numba import KERNELS
from .cpu_numpy import U32, flat

ROUND_THROUGH = {
    dt.float16: cuda_launch.KernelSpec("tinyamp_round_through_f16", "float32 x", "float32 y",
                                "y = static_cast<float>(static_cast<float16>(x));"),
    dt.bfloat16: cuda_launch.KernelSpec("tinyamp_round_through_bf16", "float32 x", "float32 y",
                                 "y = static_cast<float>(static_cast<bfloat16>(x));"),
}


def round_through(y: Any, dtype: Any, backend: "str | None" = None) -> Any:
    """``y[...] = y.astype(dtype).astype(float32)`` in place for a float32 ``y``; returns ``y``.

    ``dtype`` is float16 or bfloat16; ``backend`` forces a CPU path as in
    ``convert.convert`` (``"numba"``, ``"numpy"``, ``"astype"``).
    """
    low = np.dtype(dtype)
    if y.dtype != dt.float32 or low not in ROUND_THROUGH:
        raise ValueError(f"round_through: expected a float32 array and float16 or bfloat16, got "
                         f"{y.dtype} {list(y.shape)} through {low}")
    if y.size == 0:
        return y
    if cuda_launch.on_gpu(y):
        with cuda_launch._device(y):
            cuda_launch.elementwise(ROUND_THROUGH[low], y, y)
        return y
    path = resolve(backend)  # one numba pass at any size: cheaper than two conversions and an errstate
    if path == "numba" and y.flags.c_contiguous:
        KERNELS["round_f16" if low == dt.float16 else "round_bf16"](flat(y).view(U32))
        return y
    with np.errstate(all="ignore"):
        y[...] = convert(convert(y, low, backend=None if path == "astype" else path), dt.float32,
                         backend=None if path == "astype" else path)
    return y
