"""Linear's gradients on the CPU from 16-bit operands: one numba call before its two GEMMs, one after.

Under autocast (or with float16/bfloat16 parameters) ``linear``'s backward on
the CPU multiplies the 16-bit output gradient ``g`` (M, N) by the weight
(``dx = g @ W``) and by the saved 16-bit input (``dW = g^T @ x``), and sums
``g`` over the batch (``db``). The general path (``Linear._backward_arrays``
through :func:`~tinyamp.kernels.gemm.gemm`) widens ``g`` and ``x`` to float32,
multiplies the widenings with float32 BLAS and rounds each float32 result
once: to the 16-bit gradient, or, for a float32 parameter that autocast
lowered, through the 16-bit dtype and back to float32 (what the Cast node's
backward gave). At batch 4 each of those steps is a few hundred nanoseconds of
call overhead around a few nanoseconds of work, so here one call widens both
operands (``widen16_pair``), the two products are the ``np.matmul`` calls
gemm's CPU path makes on those widenings (``gemm._gemm_cpu``; the operands
already fit, as Linear's forward checked), and one call rounds all three
results (``round16_triple``): the same bits. A GPU, the NumPy fallback and
non-contiguous operands take the general path.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes as dt
from .convert import convert, numba_default
from .cpu_numba import KERNELS
from .cpu_numpy import U16

# Stand-ins for an array a call does not need (the kernels skip empty arrays).
_NONE16 = np.empty((0, 0), U16)
_NONE32 = np.empty((0, 0), dt.float32)
_NONE16_1D = np.empty(0, U16)
_NONE32_1D = np.empty(0, dt.float32)

# round16_triple's modes: skip, round into a 16-bit array, round through 16 bits in place (float32 result).
_SKIP, _INTO_16, _THROUGH_16 = 0, 1, 2


def linear_grads16(g: Any, x: Any, w: Any, w_widened: Any, needs: "tuple[bool, ...]", dw_float32: bool,
                   db_float32: bool) -> "tuple[Any, Any, Any] | None":
    """(dx, dW, db) of ``y = x @ W^T + b``, each None when not needed; None when this path does not apply.

    ``g`` (M, N), ``x`` (M, K; may be None when dW is not needed) and ``w``
    (N, K; may be None when dx is not needed): 2-D float16 or bfloat16 NumPy
    arrays of one dtype, as Linear's forward checked them. ``w_widened``:
    ``w`` as float32 when the caller holds it (the weight-cast cache's), else
    None. ``needs``: which of dx, dW, db are wanted (db only with a third
    entry). ``dw_float32``/``db_float32``: that gradient is
    float32(round16(...)), for a float32 parameter autocast lowered, rather
    than 16-bit. Not applying: numba unavailable, or a non-contiguous ``g`` or
    ``x``.
    """
    need_dx, need_dw = needs[0], needs[1]
    need_db = len(needs) == 3 and needs[2]
    if not (numba_default() and g.flags.c_contiguous and (not need_dw or x.flags.c_contiguous)):
        return None
    dtype, bf16 = g.dtype, g.dtype == dt.bfloat16
    g32 = np.empty(g.shape, dt.float32)
    x32 = np.empty(x.shape, dt.float32) if need_dw else _NONE32
    KERNELS["widen16_pair"](g.view(U16), g32, x.view(U16) if need_dw else _NONE16, x32, bf16)
    dx = dx16 = dw = dw16 = db = db16 = None  # float32 results, and their 16-bit roundings
    if need_dx:
        dx = np.matmul(g32, convert(w, dt.float32) if w_widened is None else w_widened)
        dx16 = np.empty(dx.shape, dtype)
    if need_dw:
        dw = np.matmul(g32.T, x32)
        dw16 = None if dw_float32 else np.empty(dw.shape, dtype)
    if need_db:
        # As the Sum op: float32 accumulation, one rounding. With two or more columns NumPy adds row by
        # row into each column, from g or from its exact widening g32 alike (the same bits, without the
        # cast); a single column is summed pairwise, in blocks that the cast changes, so from g itself.
        db = np.add.reduce(g32, 0) if g.shape[1] > 1 else g.sum(axis=0, dtype=dt.float32)
        db16 = None if db_float32 else np.empty(db.shape, dtype)
    # The 16-bit results are allocated in their dtype and written through uint16 views, so the arrays
    # handed back own their memory (the engine copies a view before storing it in a leaf's .grad).
    KERNELS["round16_triple"](_NONE32 if dx is None else dx, _NONE16 if dx16 is None else dx16.view(U16),
                              _INTO_16 if need_dx else _SKIP,
                              _NONE32 if dw is None else dw, _NONE16 if dw16 is None else dw16.view(U16),
                              _SKIP if not need_dw else _THROUGH_16 if dw_float32 else _INTO_16,
                              _NONE32_1D if db is None else db, _NONE16_1D if db16 is None else db16.view(U16),
                              _SKIP if not need_db else _THROUGH_16 if db_float32 else _INTO_16, bf16)
    return dx16, dw if dw_float32 else dw16, db if db_float32 else db16
