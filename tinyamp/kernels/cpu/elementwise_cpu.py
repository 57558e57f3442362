"""ReLU forward and backward for float16/bfloat16 on the CPU, on the 16-bit patterns, bit-exact.

NumPy's float16 ufuncs run a scalar loop; these run a numba loop on the int16
views (``kernels/elementwise.py`` dispatches here). The path (numba or plain
NumPy) is :func:`tinyamp.kernels.cpu.cpu_path.resolve`'s choice; each function
also takes ``backend=`` (``"numba"``, ``"astype"``) to force one. Both are
bit-exact against the NumPy expression:

:func:`relu_lowp`
    ``np.maximum(x, 0)`` for float16/bfloat16 on the 16-bit integer view.
    NaN propagates with its bits, as with ``np.maximum``; -0.0 gives +0.0
    (NumPy's float16 loop returns -0.0 there, its float32 and bfloat16 loops
    +0.0; the values are equal).
:func:`relu_backward_lowp`
    ``np.where(x > 0, grad, 0)`` for float16/bfloat16 (NaN in ``x`` masks).

The work itself is a numba kernel (``cpu_numba``); this file checks the
inputs, lays out the destination and calls it.
"""

from __future__ import annotations

import numpy as np

from .cpu_path import resolve
from .cpu_numba import I16, INF16, KERNELS, flat

# ---------------------------------------------------------------------------
# ReLU forward / backward on 16-bit float bit patterns
# ---------------------------------------------------------------------------

def relu_lowp(x, out=None, backend=None):
    """ReLU of a float16/bfloat16 array: ``np.maximum(x, 0)`` on bit patterns.

    Bit-identical to ``np.maximum(x, 0)`` except that -0.0 gives +0.0 (NumPy's
    float16 loop returns -0.0 there; its float32/bfloat16 loops return +0.0).
    NaNs propagate unchanged (sign and payload), as with ``np.maximum``.
    Other dtypes and non-NumPy arrays use ``np.maximum(x, 0)``.
    """
    if type(x) is not np.ndarray or x.dtype not in INF16 or x.size == 0:
        return np.maximum(x, 0, out=out) if out is not None else np.maximum(x, 0)
    path = resolve(backend)
    if path == "astype":
        return np.maximum(x, 0, out=out) if out is not None else np.maximum(x, 0)
    inf = INF16[x.dtype]
    if not (x.flags.c_contiguous or x.flags.f_contiguous):
        x = np.ascontiguousarray(x)
    res = _prepare_out(out, x, x.dtype, (x,))
    KERNELS["relu16"](flat(x).view(I16), flat(res).view(I16), np.int16(inf))
    if res is not out and out is not None:
        np.copyto(out, res)
        return out
    return res


def relu_backward_lowp(grad, x, out=None, backend=None):
    """``np.where(x > 0, grad, 0)`` for float16/bfloat16, bit-exact.

    ``x`` is the ReLU input or output (both give the same mask), ``grad`` the
    incoming gradient, both of the same 16-bit dtype and shape. A NaN or
    -0.0 in ``x`` masks to +0.0; NaNs in ``grad`` pass where ``x > 0``.
    Anything else (mixed dtypes, broadcasting, non-NumPy arrays) uses
    ``np.where(x > 0, grad, 0)``.
    """
    if (
        type(x) is not np.ndarray
        or type(grad) is not np.ndarray
        or x.dtype not in INF16
        or grad.dtype != x.dtype
        or grad.shape != x.shape
        or x.size == 0
    ):
        return _where_fallback(grad, x, out)
    path = resolve(backend)
    if path == "astype":
        return _where_fallback(grad, x, out)
    inf = INF16[x.dtype]
    # Both must be flattened in the same element order.
    both_c = x.flags.c_contiguous and grad.flags.c_contiguous
    if not (both_c or (x.flags.f_contiguous and grad.flags.f_contiguous)):
        x = np.ascontiguousarray(x)
        grad = np.ascontiguousarray(grad)
    res = _prepare_out(out, x, x.dtype, (x, grad))
    KERNELS["relu_bwd16"](flat(grad).view(I16), flat(x).view(I16), flat(res).view(I16), np.int16(inf))
    if res is not out and out is not None:
        np.copyto(out, res)
        return out
    return res


def _where_fallback(grad, x, out):
    r = np.where(x > 0, grad, 0)
    if out is None:
        return r
    out[...] = r
    return out


def _prepare_out(out, like, dtype, inputs):
    """A destination with the memory order of ``like``; ``out`` if usable."""
    if out is not None:
        if type(out) is not np.ndarray or out.dtype != dtype or out.shape != like.shape:
            raise ValueError(f"out must be a numpy array of dtype {dtype} and shape {like.shape}")
        order_ok = (like.flags.c_contiguous and out.flags.c_contiguous) or (
            like.flags.f_contiguous and out.flags.f_contiguous and not like.flags.c_contiguous
        )
        # Elementwise in-place (out is exactly an input) is safe; any other
        # overlap goes through a temporary.
        overlap = any(np.may_share_memory(out, a) and not _same_buffer(out, a) for a in inputs)
        if order_ok and not overlap:
            return out
    return np.empty_like(like, dtype=dtype)


def _same_buffer(a, b):
    return (
        a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
        and a.strides == b.strides
        and a.itemsize == b.itemsize
    )
