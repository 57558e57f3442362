"""Scaled dot-product attention (``F.scaled_dot_product_attention``) as one op.

For query ``q`` (..., L, E), key ``k`` (..., S, E) and value ``v`` (..., S, Ev)::

    scores = q @ k^T * scale (+ float mask)     masked (bool mask False, causal) positions set to -inf
    p = softmax(scores, -1)                     a row with every position masked gives p = 0 (PyTorch's)
    y = dropout(p) @ v                          (..., L, Ev)

LOWER, as in PyTorch's autocast lists: under autocast q, k, v (and a float
mask) arrive in float16/bfloat16. Inside, the op does what fused attention
kernels do: the scores come from ``gemm`` with float32 accumulation and stay
float32 through the scaling, the mask and the softmax (an exponential and a
sum: where float16 would overflow and lose mass), and the output product is
accumulated in float32 and rounded once to the input dtype.

The backward is written in tinyamp ops, so it is differentiable (double
backward). Like a fused kernel's backward it does not keep the L x S
probabilities: it recomputes them from q and k (one more product), and keeps
only the boolean masks::

    dv = p'^T gy,  dp' = gy v^T,  dp = dropout's scaling of dp'
    ds = p * (dp - sum(dp * p, -1)),  dq = ds k * scale,  dk = ds^T q * scale,  dmask = ds

Batch dimensions of q, k, v broadcast. ``enable_gqa=True`` repeats each key
and value head for a group of query heads (dim -3) before the op, in tinyamp
ops, so the groups' gradients sum back into the shared head.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import backend
from .. import dtypes as dt
from ..precision import LOWER
from ..autograd.function import Function
from ..random import default_generator
from ..tensor import Tensor
from .broadcast import expand, sum_to
from .cast import cast
from ..kernels.gemm import gemm
from .linalg import matmul
from .reduce import sum as _sum
from .clamp_where import masked_fill, where
from .shape import reshape, unsqueeze
from .softmax import shifted, softmax

OP = "scaled_dot_product_attention"


def _describe(name: str, a: Any) -> str:
    return f"{name} {list(a.shape)} ({dt.dtype_name(a.dtype)})"


def _check_operands(q: Any, k: Any, v: Any, mask: Any) -> tuple:
    """PyTorch's rules for q, k, v and the mask; returns the scores' shape (batch..., L, S)."""
    qkv = f"{_describe('query', q)}, {_describe('key', k)}, {_describe('value', v)}"
    if min(q.ndim, k.ndim, v.ndim) < 2:
        raise RuntimeError(f"{OP}: expected query, key and value to all be at least 2 dimensional, got {qkv}")
    if not (q.dtype == k.dtype == v.dtype) or q.dtype not in dt.FLOATING:
        raise RuntimeError(f"{OP}: expected query, key and value to have the same floating dtype, got {qkv}")
    if q.shape[-1] != k.shape[-1]:
        raise RuntimeError(f"{OP}: query and key must have the same embedding size (last dim), got {qkv}")
    if k.shape[-2] != v.shape[-2]:
        raise RuntimeError(f"{OP}: key and value must have the same sequence length (dim -2), got {qkv}")
    try:
        batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except ValueError:
        raise RuntimeError(f"{OP}: the batch dimensions of query, key and value do not broadcast: {qkv}") from None
    scores = tuple(batch) + (q.shape[-2], k.shape[-2])
    if mask is not None:
        if mask.dtype != dt.bool_ and mask.dtype not in (q.dtype, dt.float32):
            raise RuntimeError(f"{OP}: expected attn_mask dtype to be bool or float or to match query dtype, "
                               f"got {_describe('attn_mask', mask)} for {_describe('query', q)}")
        try:
            fits = np.broadcast_shapes(mask.shape, scores) == scores
        except ValueError:
            fits = False
        if not fits:
            raise RuntimeError(f"{OP}: {_describe('attn_mask', mask)} does not broadcast to the attention "
                               f"scores' shape {list(scores)} ({qkv})")
    return scores


class ScaledDotProductAttention(Function):
    """y = softmax(q k^T scale + mask) v (float32 scores and softmax, one rounding); backward recomputes p"""

    precision = LOWER
    name = OP

    def __init__(self, mask_kind: "str | None", dropout_p: float, is_causal: bool, scale: "float | None") -> None:
        self.mask_kind, self.dropout_p, self.is_causal, self.scale = mask_kind, dropout_p, is_causal, scale
        self.save_inputs = (0, 1, 2, 3) if mask_kind == "float" else (0, 1, 2)

    def forward(self, xp: Any, q: Any, k: Any, v: Any, mask: Any = None) -> Any:
        scores_shape = _check_operands(q, k, v, mask)
        compute = dt.float32 if dt.is_low_precision(q.dtype) else q.dtype
        if self.scale is None:
            self.scale = 1.0 / math.sqrt(q.shape[-1]) if q.shape[-1] else 1.0
        scores = gemm(q, k, compute, trans_b=True) * compute.type(self.scale)
        if self.mask_kind == "float":
            scores = scores + mask.astype(compute, copy=False)
        self.allowed = self._allowed(xp, scores_shape, mask)
        if self.allowed is not None:
            scores = xp.where(self.allowed, scores, -np.inf)
        z, _ = shifted(xp, scores, -1)  # a row of -inf is shifted by 0, not made NaN
        e = xp.exp(z)
        total = e.sum(axis=-1, keepdims=True)
        # An all-masked row has total 0: PyTorch returns zeros there (its "safe softmax").
        self.dead_rows = total == 0
        p = e / xp.where(self.dead_rows, 1, total)
        self.keep = None
        if self.dropout_p > 0:
            rng = default_generator(backend.device_of(q)).rng
            self.keep = rng.random(p.shape, dtype=xp.float32) >= self.dropout_p
            p = xp.where(self.keep, p * compute.type(self._dropout_scale()), 0)
        return gemm(p, v.astype(compute, copy=False)).astype(q.dtype, copy=False)

    def _dropout_scale(self) -> float:
        return 0.0 if self.dropout_p >= 1 else 1.0 / (1.0 - self.dropout_p)

    def _allowed(self, xp: Any, scores_shape: tuple, mask: Any) -> Any:
        """Where attention may look (bool, broadcastable to the scores), or None when everywhere."""
        length, source = scores_shape[-2:]
        if self.is_causal:
            return xp.tril(xp.ones((length, source), dtype=bool))  # query i sees keys 0..i (top-left aligned)
        return mask if self.mask_kind == "bool" else None

    def _probabilities(self, q: Tensor, k: Tensor, mask: "Tensor | None") -> Tensor:
        """p recomputed in tinyamp ops from float32 (or float64) q, k and mask: differentiable."""
        scores = matmul(q, k.transpose(-2, -1)) * self.scale
        if mask is not None:
            scores = scores + cast(mask, scores.dtype)
        if self.allowed is not None:
            scores = masked_fill(scores, ~self.allowed, -np.inf)
        # An all-masked row is softmaxed as zeros (no 0 / 0, no NaN gradient) and then zeroed.
        scores = masked_fill(scores, self.dead_rows, 0.0)
        return where(self.dead_rows, 0.0, softmax(scores, -1))

    def backward(self, gy: Tensor) -> tuple:
        saved = self.saved_tensors
        q, k, v = saved[:3]
        mask = saved[3] if self.mask_kind == "float" else None
        compute = dt.float32 if dt.is_low_precision(q.dtype) else q.dtype
        qc, kc, vc, gc = (cast(t, compute) for t in (q, k, v, gy))
        p = self._probabilities(qc, kc, None if mask is None else cast(mask, compute))
        dropped = p
        if self.keep is not None:  # dropout's factor per element: 1 / (1 - dropout_p) where kept, else 0
            xp = backend.array_module(self.keep)
            drop = Tensor._wrap(xp.where(self.keep, compute.type(self._dropout_scale()), compute.type(0)))
            dropped = p * drop
        needs = self.needs_input_grad
        grads: list = [None] * len(needs)
        shapes = list(self.input_shapes)
        if needs[2]:
            grads[2] = cast(sum_to(matmul(dropped.transpose(-2, -1), gc), shapes[2]), v.dtype)
        if any(needs[:2]) or (mask is not None and needs[3]):
            dp = matmul(gc, vc.transpose(-2, -1))
            if self.keep is not None:
                dp = dp * drop
            ds = p * (dp - _sum(dp * p, -1, keepdim=True))
            if needs[0]:
                grads[0] = cast(sum_to(matmul(ds, kc) * self.scale, shapes[0]), q.dtype)
            if needs[1]:
                grads[1] = cast(sum_to(matmul(ds.transpose(-2, -1), qc) * self.scale, shapes[1]), k.dtype)
            if mask is not None and needs[3]:
                grads[3] = cast(sum_to(ds, shapes[3]), mask.dtype)
        return tuple(grads)


def _repeat_heads(x: Tensor, groups: int) -> Tensor:
    """Each head (dim -3) repeated ``groups`` times in place (repeat_interleave), in differentiable ops."""
    shape = x.shape
    wide = expand(unsqueeze(x, -3), *shape[:-3], shape[-3], groups, *shape[-2:])
    return reshape(wide, shape[:-3] + (shape[-3] * groups,) + shape[-2:])


def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: "Tensor | None" = None,
                                 dropout_p: float = 0.0, is_causal: bool = False, scale: "float | None" = None,
                                 enable_gqa: bool = False) -> Tensor:
    """softmax(query key^T * scale + mask) value, with a causal, boolean (True = attend) or additive mask."""
    if is_causal and attn_mask is not None:
        raise RuntimeError(f"{OP}: Explicit attn_mask should not be set when is_causal=True "
                           f"(attn_mask {list(attn_mask.shape)})")
    if not 0.0 <= dropout_p <= 1.0:
        raise RuntimeError(f"{OP}: dropout probability has to be between 0 and 1, but got {dropout_p}")
    if attn_mask is not None and not isinstance(attn_mask, Tensor):
        raise TypeError(f"{OP}: attn_mask must be a Tensor or None, got {type(attn_mask).__name__}")
    for name, t in (("key", key), ("value", value), ("attn_mask", attn_mask)):
        if t is not None and t.device != query.device:
            raise RuntimeError(f"{OP}: query is on {query.device} but {name} {list(t.shape)} is on {t.device}")
    if enable_gqa:
        if min(query.ndim, key.ndim, value.ndim) < 3:
            raise RuntimeError(f"{OP}: enable_gqa=True needs a heads dimension (dim -3) in query "
                               f"{list(query.shape)}, key {list(key.shape)} and value {list(value.shape)}")
        heads = query.shape[-3]
        if heads % key.shape[-3] or heads % value.shape[-3]:
            raise RuntimeError(f"{OP}: number of heads in key ({key.shape[-3]}) and value ({value.shape[-3]}) "
                               f"must divide the number of heads in query ({heads})")
        key = _repeat_heads(key, heads // key.shape[-3])
        value = _repeat_heads(value, heads // value.shape[-3])
    mask_kind = None if attn_mask is None else ("bool" if attn_mask.dtype == dt.bool_ else "float")
    op = ScaledDotProductAttention(mask_kind, float(dropout_p), bool(is_causal),
                                   None if scale is None else float(scale))
    return op(query, key, value) if attn_mask is None else op(query, key, value, attn_mask)


METHODS: dict = {}  # functions only (torch.nn.functional), not Tensor methods
