"""Round float32 values through float16 or bfloat16 and back: a gradient in place, a weight's copies.

Under autocast a float32 weight enters a LOWER op as its 16-bit copy, so its
gradient is the 16-bit gradient widened to float32: ``float32(round16(acc))``
where ``acc`` is the float32 accumulator of the GEMM (dW) or the float32 sum
over the batch (db). When the op computes ``acc`` in float32 itself, this
epilogue turns it into that gradient without a 16-bit temporary and a second
conversion: ``y[...] = y.astype(dtype).astype(float32)``, bit for bit.

- CPU: one numba pass on the float32 bit patterns (``cpu_numba``), else the
  NumPy conversions of ``convert.py`` (two passes).
- CUDA: one ``ElementwiseKernel`` launch (the PTX float16 conversion and
  bfloat16's bit rounding of ``cuda_launch``, both to nearest even, as ``astype``).

:class:`LowCopy` is the other direction, for a float32 weight under autocast:
its 16-bit copy and, on the CPU, that copy widened back to float32 (the operand
the CPU GEMM multiplies), both rewritten in one pass after each update.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes as dt
from . import cuda_launch
from .convert import convert, numba_default, resolve
from .cpu_numba import KERNELS
from .cpu_numpy import U16, U32, flat

# The kernels have float32 parameters only, so CuPy gives them no float16/bfloat16 type: the
# rounding is written on bit patterns (cuda_launch's conversions), as astype rounds (nearest even).
ROUND_THROUGH = {
    dt.float16: cuda_launch.KernelSpec("tinyamp_round_through_f16", "float32 x", "float32 y",
                                       "y = tinyamp_f16_to_f32(tinyamp_f32_to_f16(x));",
                                       cuda_launch.F16_CONVERSIONS),
    dt.bfloat16: cuda_launch.KernelSpec("tinyamp_round_through_bf16", "float32 x", "float32 y",
                                        "y = tinyamp_bf16_to_f32(tinyamp_f32_to_bf16(x));",
                                        cuda_launch.BF16_CONVERSIONS),
}


_NUMBA_ROUND = {dt.float16: "round_f16", dt.bfloat16: "round_bf16"}


def round_through(y: Any, dtype: Any, backend: "str | None" = None) -> Any:
    """``y[...] = y.astype(dtype).astype(float32)`` in place for a float32 ``y``; returns ``y``.

    ``dtype`` is float16 or bfloat16; ``backend`` forces a CPU path as in
    ``convert.convert`` (``"numba"``, ``"numpy"``, ``"astype"``).
    """
    if backend is None and type(y) is np.ndarray and y.flags.c_contiguous and numba_default() \
            and y.dtype == dt.float32 and dtype in _NUMBA_ROUND:
        # The common call (a weight's gradient on the CPU): one numba pass, no checks left to make.
        KERNELS[_NUMBA_ROUND[dtype]](y.reshape(-1).view(U32))
        return y
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


# lower_widen's passes on arrays of any shape, flattened inside numba (a Python reshape costs more).
_NUMBA_LOWER_WIDEN_ND = {dt.float16: "lower_widen_f16_nd", dt.bfloat16: "lower_widen_bf16_nd"}


def lower_widened(source: Any, dtype: Any) -> "tuple[Any, Any]":
    """(float32 ``source`` converted to ``dtype``, that copy widened back to float32, or None).

    On the CPU with numba both come from one pass (``lower_widen``); elsewhere
    (a GPU, which multiplies 16-bit operands itself, no numba, an odd layout)
    the conversion alone. The widening is exact: a CPU GEMM given it computes
    the bits it computes from the copy.
    """
    if type(source) is np.ndarray and source.flags.c_contiguous and numba_default() \
            and source.dtype == dt.float32 and dtype in _NUMBA_LOWER_WIDEN_ND:
        low, wide = np.empty(source.shape, dtype), np.empty(source.shape, dt.float32)
        KERNELS[_NUMBA_LOWER_WIDEN_ND[dtype]](source, low.view(U16), wide)  # flattened inside numba
        return low, wide
    return convert(source, dtype), None


# The largest weight (elements) whose float32 widening LowCopy keeps. Below it a GEMM's own
# widening costs more in per-call overhead than the kept array; above it the extra float32 array
# costs more in memory traffic than the widening it saves (a step of MLP 784-H-10 at batch 4 is
# 4% faster at H=16..128 with the widening kept, 7-20% slower at H=256..1024; RESULTS.md).
WIDEN_MAX = 1 << 17


class LowCopy:
    """A float32 array's 16-bit copy ``low`` and, on the CPU, ``wide = float32(low)``, rewritable in place.

    The weight-cast cache keeps one per float32 weight and dtype. ``low`` is the
    16-bit copy a LOWER op computes with. ``wide`` is exact (every 16-bit value
    is a float32), so a CPU GEMM given it (``gemm(..., b_widened=...)``)
    computes the bits it computes from ``low`` without widening the weight on
    every call, at the cost of a float32 array per weight; it is made on first
    request (:meth:`widened`), for weights of at most ``WIDEN_MAX`` elements,
    and None otherwise and on a GPU, where cuBLAS reads ``low``.
    :meth:`rewrite` refreshes the copies from the weight's current values: with
    numba one pass over bit views prepared once, so re-lowering a weight after
    a CPU optimizer step is a single kernel call.
    """

    __slots__ = ("source", "low", "wide", "_pass")

    def __init__(self, source: Any, low: Any) -> None:
        self.source, self.low, self.wide, self._pass = source, low, None, None

    @classmethod
    def of(cls, source: Any, dtype: Any) -> "LowCopy":
        """``source`` converted to ``dtype`` now."""
        return cls(source, convert(source, dtype))

    def widened(self) -> Any:
        """``low`` as float32 on the CPU (made on first use, rewritten with ``low`` afterwards); None for a
        weight of more than ``WIDEN_MAX`` elements and on a GPU."""
        if self.wide is None and self.low.size <= WIDEN_MAX and not cuda_launch.on_gpu(self.low):
            self.wide = convert(self.low, dt.float32)
            source = self.source
            if type(source) is np.ndarray and source.flags.c_contiguous and resolve(None) == "numba":
                kernel = KERNELS["lower_widen_f16" if self.low.dtype == dt.float16 else "lower_widen_bf16"]
                self._pass = (kernel, (source.reshape(-1).view(U32), self.low.reshape(-1).view(U16),
                                       self.wide.reshape(-1).view(U32)))
        return self.wide

    def rewrite(self, source: Any) -> bool:
        """Recompute the copies from ``source`` (the weight's array now), in place on the CPU; True when done.

        New arrays when the weight's array itself was replaced (whoever kept the
        old copies keeps the old values). False, and nothing done, for copies on
        a GPU: there the optimizer writes them, and a stale one is converted
        anew by the caller (a captured CUDA graph may still read the old one).
        """
        prepared = self._pass
        if prepared is not None and source is self.source:
            # The common call (a CPU weight after each optimizer step): the prepared numba pass alone.
            prepared[0](*prepared[1])
            return True
        if cuda_launch.on_gpu(self.low):
            return False
        if source is not self.source:
            wide = self.wide
            self.__init__(source, convert(source, self.low.dtype))
            if wide is not None:
                self.widened()
        else:
            convert(source, self.low.dtype, out=self.low)
            if self.wide is not None:
                convert(self.low, dt.float32, out=self.wide)
        return True
