"""Scaled dot-product attention, forward and backward: the dispatch and the reference numerics.

For q (..., L, E), k (..., S, E), v (..., S, Ev), batch dims broadcasting, in the compute dtype
(float32 for float16/bfloat16 and float32, float64 for float64; the products accumulate in it)::

    s = q k^T scale (+ float mask), -inf where a bool mask is False or (causal) above the diagonal
    p = softmax(s) (0 on a row with nothing to attend to: PyTorch's "safe softmax"),  lse = logsumexp(s)
    y = (p * drop) v        drop = keep / (1 - dropout_p), or 1
    dv = (p * drop)^T gy,   dp = (gy v^T) * drop,   ds = p (dp - sum(dp p)),
    dq = ds k scale,        dk = ds^T q scale,      dmask = ds

- :func:`forward` ``(q, k, v, mask, *, causal, scale, keep, dropout_scale) -> (y, lse)``: y in q's
  dtype, lse (..., L) in the compute dtype (-inf on a dead row), what the backward reads.
- :func:`backward` ``(q, k, v, y, gy, lse, mask, *, causal, scale, keep, dropout_scale, needs)
  -> (dq, dk, dv, dmask)``: each in its input's shape and dtype (summed over broadcast batch dims),
  None where ``needs`` is False; dmask only for a float mask.
- ``mask``: None, bool (True = attend) or float (added), broadcastable to the scores (..., L, S);
  ``keep``: None or the dropout draw, bool of the scores' shape.
- CPU (NumPy arrays): blocks of heads over float32 BLAS with one numba pass for the softmax each way
  (``cpu/attention_cpu.py``); the scores of a block stay in cache.
- CuPy arrays: the flash-attention kernels (``cuda/cuda_attention.py``: one launch forward, two
  backward, nothing L x S stored) when there is no dropout, no float mask and one batch shape (head
  dims up to 128); otherwise, and on other arrays, the xp expressions below.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import backend
from .. import dtypes as dt
from .cuda import cuda_attention
from .convert import convert
from .cpu import attention_cpu, cpu_path
from .gemm import gemm
from .softmax import shifted

__all__ = ["forward", "backward"]

# The fused CUDA kernels for CuPy arrays (cuda/cuda_attention.py); False sends every array to the xp expressions below (a
# test shows what the launch budget loses without them).
FUSED_ON_GPU = True


def _fused(q: Any, k: Any, v: Any, mask: Any, keep: Any) -> bool:
    """Whether the flash kernels take these: no dropout draw, no float mask, and what ``cuda_attention.takes``
    covers (one fused dtype, one batch shape, head dims up to 128); everything else is the composed path."""
    return FUSED_ON_GPU and keep is None and cuda_attention.takes(q, k, v, mask)


def _allowed(xp: Any, length: int, source: int, mask: Any, causal: bool) -> Any:
    """Where attention may look (bool, broadcastable to the scores), or None when everywhere."""
    if causal:
        return xp.tril(xp.ones((length, source), dtype=bool))  # query i sees keys 0..i (top-left aligned)
    return mask if mask is not None and mask.dtype == dt.bool_ else None


def _scores(xp: Any, q: Any, k: Any, mask: Any, causal: bool, scale: float, compute: Any) -> Any:
    scores = gemm(q, k, compute, trans_b=True) * compute.type(scale)
    if mask is not None and mask.dtype != dt.bool_:
        scores = scores + mask.astype(compute, copy=False)
    allowed = _allowed(xp, q.shape[-2], k.shape[-2], mask, causal)
    if allowed is not None:
        scores = xp.where(allowed, scores, -np.inf)
    return scores


def _sum_to(g: Any, shape: tuple) -> Any:
    """g summed over the dims it was broadcast along to reach ``shape``."""
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(shape) if n == 1 and g.shape[lead + i] != 1)
    return g.sum(axis=axes).reshape(shape) if axes else g


def _widener(compute: Any) -> Any:
    """a in the compute dtype: itself when it is already, else converted once (exactly)."""
    return lambda a: a if a.dtype == compute else convert(a, compute)


def _rounded(a: Any, dtype: Any) -> Any:
    return a if a.dtype == dtype else convert(a, dtype)


def forward(q: Any, k: Any, v: Any, mask: Any, *, causal: bool, scale: float, keep: Any = None,
            dropout_scale: float = 1.0) -> tuple:
    """(y, lse) of attention; see the module docstring."""
    if _fused(q, k, v, mask, keep):
        return cuda_attention.forward(q, k, v, mask, causal, scale)  # one launch, nothing L x S stored
    compute = dt.opmath_dtype(q.dtype)
    if cpu_path.numba_takes(q, k, v, mask, keep):
        y, lse = attention_cpu.forward(q, k, v, mask, causal, scale, keep, dropout_scale, gemm, _widener(compute))
        return _rounded(y, q.dtype), lse
    xp = backend.array_module(q)
    scores = _scores(xp, q, k, mask, causal, scale, compute)
    z, m = shifted(xp, scores, -1)  # a row of -inf is shifted by 0, not made NaN
    e = xp.exp(z)
    total = e.sum(axis=-1, keepdims=True)
    dead = total == 0
    p = e / xp.where(dead, 1, total)
    with np.errstate(divide="ignore"):
        lse = (m + xp.log(total))[..., 0]  # -inf on a dead row
    if keep is not None:
        p = xp.where(keep, p * compute.type(dropout_scale), 0)
    return gemm(p, v.astype(compute, copy=False)).astype(q.dtype, copy=False), lse


def backward(q: Any, k: Any, v: Any, y: Any, gy: Any, lse: Any, mask: Any, *, causal: bool, scale: float,
             keep: Any = None, dropout_scale: float = 1.0, needs: tuple = (True, True, True, True)) -> tuple:
    """(dq, dk, dv, dmask) of attention from the forward's lse; see the module docstring."""
    if _fused(q, k, v, mask, keep) and lse.dtype == dt.float32 and lse.flags.c_contiguous:
        dq, dk, dv = cuda_attention.backward(q, k, v, mask, causal, scale, y, gy, lse, need_dq=needs[0],
                                             need_dkv=needs[1] or needs[2])
        return dq, dk if needs[1] else None, dv if needs[2] else None, None
    compute = dt.opmath_dtype(q.dtype)
    if cpu_path.numba_takes(q, k, v, gy, lse, mask, keep):
        grads = attention_cpu.backward(q, k, v, gy, lse, mask, causal, scale, keep, dropout_scale, needs, gemm,
                                       _widener(compute))
        return tuple(None if g is None else _rounded(_sum_to(g, a.shape), a.dtype)
                     for g, a in zip(grads, (q, k, v, mask)))
    xp = backend.array_module(q)
    scores = _scores(xp, q, k, mask, causal, scale, compute)
    finite = xp.isfinite(lse)[..., None]
    with np.errstate(invalid="ignore"):
        p = xp.where(finite, xp.exp(scores - xp.where(finite, lse[..., None], 0)), 0)
    drop = None if keep is None else xp.where(keep, compute.type(dropout_scale), compute.type(0))
    gc = gy.astype(compute, copy=False)
    dq = dk = dv = dmask = None
    if needs[2]:
        dropped = p if drop is None else p * drop
        dv = _sum_to(gemm(dropped, gc, trans_a=True), v.shape).astype(v.dtype, copy=False)
    float_mask = mask is not None and mask.dtype != dt.bool_
    if needs[0] or needs[1] or (float_mask and needs[3]):
        dp = gemm(gc, v.astype(compute, copy=False), trans_b=True)
        if drop is not None:
            dp = dp * drop
        ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True))
        if needs[0]:
            dq = _sum_to(gemm(ds, k.astype(compute, copy=False)) * compute.type(scale), q.shape)
            dq = dq.astype(q.dtype, copy=False)
        if needs[1]:
            dk = _sum_to(gemm(ds, q.astype(compute, copy=False), trans_a=True) * compute.type(scale), k.shape)
            dk = dk.astype(k.dtype, copy=False)
        if float_mask and needs[3]:
            dmask = _sum_to(ds, mask.shape).astype(mask.dtype, copy=False)
    return dq, dk, dv, dmask
