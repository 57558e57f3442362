"""CPU elementwise kernels for float16/bfloat16 around a GEMM, bit-exact.

NumPy's float16 ufuncs run a scalar loop; these work on the
16-bit patterns or fuse the GEMM's float32 epilogue with the downcast. The path
(numba, NumPy bit recipes, plain NumPy) is :func:`tinyamp.kernels.cpu.cpu_path.resolve`'s
choice; each function also takes ``backend=`` (``"numba"``, ``"numpy"``,
``"astype"``) to force one. All are bit-exact against the unfused NumPy
expression:

:func:`relu_lowp`
    ``np.maximum(x, 0)`` for float16/bfloat16 on the 16-bit integer view.
    NaN propagates with its bits, as with ``np.maximum``; -0.0 gives +0.0
    (NumPy's float16 loop returns -0.0 there, its float32 and bfloat16 loops
    +0.0; the values are equal).
:func:`relu_backward_lowp`
    ``np.where(x > 0, grad, 0)`` for float16/bfloat16 (NaN in ``x`` masks).
:func:`bias_act_convert`
    Forward GEMM epilogue: ``convert(np.maximum(y + bias, 0), dtype)`` (or
    without the ReLU) in one pass over the float32 GEMM output. ``linear``
    uses it for its bias under autocast; the ReLU is for a fused
    linear + ReLU layer.

The work itself is a numba kernel (``cpu_numba``) or a NumPy bit recipe
(``cpu_numpy``); this file checks the inputs, lays out the destination and
dispatches.
"""

from __future__ import annotations

import numpy as np

from ... import dtypes as dt
from . import cpu_numpy as npb
from ..convert import SMALL, convert
from .cpu_path import numba_default, resolve
from .cpu_numba import KERNELS
from .cpu_numpy import I16, INF16, U16, flat

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
    xv, rv = flat(x).view(I16), flat(res).view(I16)
    if path == "numba":
        KERNELS["relu16"](xv, rv, np.int16(inf))
    else:
        npb.relu16(xv, rv, inf)
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
    xv, gv, rv = flat(x).view(I16), flat(grad).view(I16), flat(res).view(I16)
    if path == "numba":
        KERNELS["relu_bwd16"](gv, xv, rv, np.int16(inf))
    else:
        npb.relu_bwd16(gv, xv, rv, inf)
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


# ---------------------------------------------------------------------------
# The GEMM epilogue: bias add + ReLU + downcast
# ---------------------------------------------------------------------------


_EPILOGUE = {dt.float16: "bias_act_f16", dt.bfloat16: "bias_act_bf16"}  # numba kernel by output dtype


def bias_act_convert(y, bias=None, dtype=dt.float16, relu=False, out=None, backend=None, overwrite_y=False):
    """``convert(np.maximum(y + bias, 0) if relu else y + bias, dtype)``, fused.

    ``y``: float32 GEMM output of shape (..., N); ``bias``: float32 of shape
    (N,) or None; ``dtype``: float16 or bfloat16. Bit-identical to the
    unfused NumPy expression (float32 add, float32 ``np.maximum``, then
    ``astype``). With numba this is one pass over ``y``; the other paths
    (NumPy recipes, CuPy and other arrays) add and clamp in float32 and then
    convert. ``y`` is not modified unless ``overwrite_y``: a caller that owns
    ``y`` (a fresh GEMM result) lets those paths work in it instead of a
    temporary. Note ReLU before the downcast equals ReLU after it: rounding is
    monotone.
    """
    target = np.dtype(dtype)
    if (out is None and backend is None and type(y) is np.ndarray and y.ndim == 2 and y.flags.c_contiguous
            and numba_default() and y.dtype == dt.float32 and target in _EPILOGUE
            and type(bias) is np.ndarray and bias.dtype == dt.float32 and bias.shape == (y.shape[1],)
            and bias.flags.c_contiguous):
        # The common call (linear's bias under autocast on the CPU): one numba pass into a fresh array.
        res = np.empty(y.shape, target)
        KERNELS[_EPILOGUE[target]](y, bias, res.view(U16), bool(relu), True)
        return res
    if (
        type(y) is not np.ndarray
        or y.dtype != dt.float32
        or target not in INF16
        or y.ndim == 0
        or (bias is not None and (type(bias) is not np.ndarray or bias.dtype != dt.float32
                                  or bias.shape != (y.shape[-1],)))
        # The NumPy recipes' fixed cost exceeds a small epilogue's; numba's call does not (and no errstate).
        or (backend is None and y.size < SMALL and resolve(None) != "numba")
    ):
        if overwrite_y and bias is not None and bias.dtype == y.dtype:
            y += bias  # the caller's own buffer: no temporary (one allocation fewer on a GPU)
            t = y
        else:
            t = y + bias if bias is not None else y
        if relu:
            t = np.maximum(t, 0)
        return convert(t, target, out=out)
    path = resolve(backend)
    if path == "numba" and y.size > 0:
        y2 = np.ascontiguousarray(y).reshape(-1, y.shape[-1])
        b = np.zeros(y.shape[-1], dt.float32) if bias is None else np.ascontiguousarray(bias)
        has_bias = bias is not None  # adding a zero bias would change -0.0 and sNaNs
        res = out
        if (
            res is None
            or type(res) is not np.ndarray
            or res.dtype != target
            or res.shape != y.shape
            or not res.flags.c_contiguous
        ):
            if res is not None:
                raise ValueError(f"out must be a C-contiguous {target} array of shape {y.shape}")
            res = np.empty(y.shape, target)
        name = _EPILOGUE[target]
        r2 = res.reshape(-1, y.shape[-1])
        if np.may_share_memory(r2, y2) or np.may_share_memory(r2, b):
            tmp = np.empty(r2.shape, target)
            KERNELS[name](y2, b, tmp.view(U16), bool(relu), has_bias)
            r2[...] = tmp
        else:
            KERNELS[name](y2, b, r2.view(U16), bool(relu), has_bias)
        return res
    with np.errstate(all="ignore"):
        if bias is None:
            t = y if overwrite_y else y.copy()
        else:
            t = np.add(y, bias, out=y if overwrite_y else None)
        if relu:
            np.maximum(t, np.float32(0), out=t)
    return convert(t, target, out=out, backend=backend)
