"""Scaled dot-product attention on NumPy arrays: blocks of heads and queries over BLAS, one numba pass each.

The batch dims are walked in blocks of heads (the last batch dim; all batch dims merged into one when
there is no mask or dropout draw) and the queries in blocks of rows, so that a block's scores (heads x rows x keys, in the compute dtype) stay within ``BLOCK_BYTES`` and
in cache between the products and the softmax. With ``causal`` a block of queries [l0, l1) is
multiplied by keys [0, l1) only: the scores above the diagonal of later blocks are never formed.

Forward, per block: ``s = q k^T`` (BLAS), then ``attention_softmax`` (scale, mask, causal, softmax,
the rows' log-sum-exp, dropout) in place, then ``y = p v`` (BLAS).
Backward, per block: ``s = q k^T`` again, ``attention_probabilities`` (``p = exp(s scale - lse)``),
``dv += p'^T gy``, ``dp = gy v^T``, ``attention_dscores`` (``ds = p (dp' - sum(dp' p))``),
``dq = ds k scale``, ``dk += ds^T q scale`` (BLAS for every product).

16-bit inputs are widened once (whole arrays) and results rounded once; the products are ``matmul``
(the caller's float32-accumulating GEMM, ``kernels/gemm.py``). ``cpu_numba.load`` must have run.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, Iterator

import numpy as np

from ... import dtypes as dt
from .nn_numba import KERNELS

BLOCK_BYTES = 1 << 19  # a block's scores: half of a 1 MiB L2 cache
_NONE = np.zeros((1, 1, 1), np.bool_)  # stands for an absent mask or dropout draw (never read)


def _blocks(batch: tuple, length: int, source: int, itemsize: int) -> Iterator[tuple]:
    """(batch index with a slice of heads, l0, l1): blocks whose scores fit ``BLOCK_BYTES``."""
    heads = batch[-1]
    per_head = length * source * itemsize
    h_step = max(1, min(heads, BLOCK_BYTES // max(per_head, 1)))
    l_step = length if h_step > 1 or per_head <= BLOCK_BYTES else max(16, BLOCK_BYTES // max(source * itemsize, 1))
    l_step = max(l_step, 1)
    for outer in itertools.product(*(range(n) for n in batch[:-1])):
        for h0 in range(0, heads, h_step):
            for l0 in range(0, length, l_step):
                yield outer + (slice(h0, min(h0 + h_step, heads)),), l0, min(l0 + l_step, length)


def _flat(a: Any) -> Any:
    """A block (heads..., rows, keys) as (N, rows, keys), C-contiguous (a product's fresh result already is)."""
    return np.ascontiguousarray(a).reshape(-1, a.shape[-2], a.shape[-1])


class _Problem:
    """The operands broadcast to one batch shape (views), in the compute dtype; a 2-D problem gets a batch of 1."""

    def __init__(self, q: Any, k: Any, v: Any, mask: Any, keep: Any, widen: Callable) -> None:
        self.cdt = dt.opmath_dtype(q.dtype)
        batch = tuple(np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])) or (1,)
        self.full_batch = batch
        # When one batch index's heads leave a block half empty and there is no mask or dropout draw (which
        # would have to be copied to match), the batch dims are merged into one, so a block takes as many
        # (batch, head) pairs as fit: a small problem is a few BLAS calls, not one per batch index (q, k, v
        # are copied once where their strides do not merge).
        per_head = q.shape[-2] * k.shape[-2] * self.cdt.itemsize
        if len(batch) > 1 and mask is None and keep is None and 2 * batch[-1] * per_head <= BLOCK_BYTES:
            batch = (int(np.prod(batch)),)
        self.batch = batch
        self.q, self.k, self.v = (self.merged(widen(a)) for a in (q, k, v))
        self.length, self.source = q.shape[-2], k.shape[-2]
        scores = batch + (self.length, self.source)
        self.mask_kind = 0 if mask is None else (1 if mask.dtype == dt.bool_ else 2)
        self.mask = None if mask is None else np.broadcast_to(mask if self.mask_kind == 1 else widen(mask), scores)
        self.keep = None if keep is None else np.broadcast_to(keep, scores)

    def merged(self, a: Any) -> Any:
        """``a`` (..., m, n) broadcast to the problem's batch (and its dims merged when the problem merges them)."""
        a = np.broadcast_to(a, self.full_batch + a.shape[-2:])
        return a if self.batch == self.full_batch else a.reshape(self.batch + a.shape[-2:])

    def unmerged(self, a: Any) -> Any:
        """A result over the problem's batch in the full batch shape (None stays None)."""
        return None if a is None else a.reshape(self.full_batch + a.shape[-2:])

    def blocks(self) -> Iterator[tuple]:
        return _blocks(self.batch, self.length, self.source, self.cdt.itemsize)

    def side(self, which: Any, index: tuple, l0: int, l1: int, hi: int) -> Any:
        """The mask or dropout block (N, rows, keys) for these queries and keys [0, hi), or the unread stand-in."""
        return _NONE if which is None else _flat(which[index][..., l0:l1, :hi])


def forward(q: Any, k: Any, v: Any, mask: Any, causal: bool, scale: float, keep: Any, dropout_scale: float,
            matmul: Callable, widen: Callable) -> tuple:
    """(y in q's dtype, lse) of attention; ``widen(a)`` gives a in the compute dtype (a view when it already is)."""
    pb = _Problem(q, k, v, mask, keep, widen)
    y = np.empty(pb.batch + (pb.length, v.shape[-1]), pb.cdt)
    lse = np.empty(pb.batch + (pb.length,), pb.cdt)
    for index, l0, l1 in pb.blocks():
        hi = min(pb.source, l1) if causal else pb.source
        s = matmul(pb.q[index][..., l0:l1, :], pb.k[index][..., :hi, :], trans_b=True)
        rows = np.empty(s.shape[:-1], pb.cdt)  # the block's log-sum-exp, written by the kernel
        KERNELS["attention_softmax"](_flat(s), rows.reshape(-1, l1 - l0), l0, scale, causal,
                                     pb.side(pb.mask, index, l0, l1, hi), pb.mask_kind,
                                     pb.side(pb.keep, index, l0, l1, hi), pb.keep is not None, dropout_scale)
        lse[index][..., l0:l1] = rows
        y[index][..., l0:l1, :] = matmul(s, pb.v[index][..., :hi, :])
    shape = tuple(np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]))
    return y.reshape(shape + y.shape[-2:]), lse.reshape(shape + lse.shape[-1:])


def backward(q: Any, k: Any, v: Any, gy: Any, lse: Any, mask: Any, causal: bool, scale: float, keep: Any,
             dropout_scale: float, needs: tuple, matmul: Callable, widen: Callable) -> tuple:
    """(dq, dk, dv, dmask) in the compute dtype and the broadcast batch shape (the caller sums and rounds)."""
    pb = _Problem(q, k, v, mask, keep, widen)
    g = pb.merged(widen(gy))
    lse = pb.merged(lse[..., None])[..., 0]
    want_mask = pb.mask_kind == 2 and needs[3]
    dq = np.zeros(pb.batch + q.shape[-2:], pb.cdt) if needs[0] else None
    dk = np.zeros(pb.batch + k.shape[-2:], pb.cdt) if needs[1] else None
    dv = np.zeros(pb.batch + v.shape[-2:], pb.cdt) if needs[2] else None
    dmask = np.zeros(pb.batch + (pb.length, pb.source), pb.cdt) if want_mask else None
    scale_c = pb.cdt.type(scale)
    for index, l0, l1 in pb.blocks():
        hi = min(pb.source, l1) if causal else pb.source
        q_b, k_b, v_b, g_b = pb.q[index][..., l0:l1, :], pb.k[index][..., :hi, :], pb.v[index][..., :hi, :], \
            g[index][..., l0:l1, :]
        keep_b = pb.side(pb.keep, index, l0, l1, hi)
        p = matmul(q_b, k_b, trans_b=True)
        KERNELS["attention_probabilities"](_flat(p), np.ascontiguousarray(lse[index][..., l0:l1]).reshape(-1, l1 - l0),
                                           l0, scale, causal, pb.side(pb.mask, index, l0, l1, hi), pb.mask_kind)
        if dv is not None:
            dropped = p if pb.keep is None else np.where(keep_b.reshape(p.shape), p * pb.cdt.type(dropout_scale), 0)
            dv[index][..., :hi, :] += matmul(dropped, g_b, trans_a=True)
        if dq is None and dk is None and dmask is None:
            continue
        ds = matmul(g_b, v_b, trans_b=True)
        KERNELS["attention_dscores"](_flat(p), _flat(ds), l0, causal, keep_b, pb.keep is not None, dropout_scale)
        if dmask is not None:
            dmask[index][..., l0:l1, :hi] = ds
        if dq is not None:
            dq[index][..., l0:l1, :] = matmul(ds, k_b) * scale_c
        if dk is not None:
            dk[index][..., :hi, :] += matmul(ds, q_b, trans_a=True) * scale_c
    return pb.unmerged(dq), pb.unmerged(dk), pb.unmerged(dv), dmask  # (a merged problem has no mask)


def block_count(batch: tuple, length: int, source: int, itemsize: int = 4) -> int:
    """How many blocks a problem is walked in (for the benchmark and the tests)."""
    return sum(1 for _ in _blocks(tuple(batch) or (1,), length, source, itemsize))

