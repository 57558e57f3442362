"""Scaled dot-product attention (``F.scaled_dot_product_attention``) as one op.

For query ``q`` (..., L, E), key ``k`` (..., S, E) and value ``v`` (..., S, Ev)::

    scores = q @ k^T * scale (+ float mask)     masked (bool mask False, causal) positions set to -inf
    p = softmax(scores, -1)                     a row with every position masked gives p = 0 (PyTorch's)
    y = dropout(p) @ v                          (..., L, Ev)

LOWER, as in PyTorch's autocast lists: under autocast q, k, v (and a float
mask) arrive in float16/bfloat16. The forward is one kernel (``kernels/attention.py``)
that does what fused attention kernels do: float32 accumulation, float32 scores,
mask and softmax (an exponential and a sum: where float16 would overflow and lose
mass), one rounding of the output, and the log-sum-exp of each row kept for the
backward instead of the L x S probabilities.

The backward is the paired ``SdpaBackward`` op (one kernel, which recomputes the
probabilities from q, k and the log-sum-exp)::

    dv = p'^T gy,  dp' = gy v^T,  dp = dropout's scaling of dp'
    ds = p * (dp - sum(dp * p, -1)),  dq = ds k * scale,  dk = ds^T q * scale,  dmask = ds

and its own backward (double backward) is written in tinyamp ops.

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
from ..kernels import attention as attention_kernels
from .linalg import matmul
from .reduce import sum as _sum
from .clamp_where import masked_fill, where
from .shape import reshape, unsqueeze
from .softmax import softmax

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
    """y = softmax(q k^T scale + mask) v (float32 scores and softmax, one rounding); dq, dk, dv = sdpa_backward"""

    precision = LOWER
    name = OP
    save_outputs = ()

    def __init__(self, mask_kind: "str | None", dropout_p: float, is_causal: bool, scale: "float | None") -> None:
        self.mask_kind, self.dropout_p, self.is_causal, self.scale = mask_kind, dropout_p, is_causal, scale
        self.save_inputs = (0, 1, 2, 3) if mask_kind == "float" else (0, 1, 2)

    def forward(self, xp: Any, q: Any, k: Any, v: Any, mask: Any = None) -> Any:
        scores_shape = _check_operands(q, k, v, mask)
        if self.scale is None:
            self.scale = 1.0 / math.sqrt(q.shape[-1]) if q.shape[-1] else 1.0
        self.keep = None
        if self.dropout_p > 0:
            rng = default_generator(backend.device_of(q)).rng
            self.keep = rng.random(scores_shape, dtype=xp.float32) >= self.dropout_p
        self.bool_mask = mask if self.mask_kind == "bool" else None
        y, self.lse = attention_kernels.forward(q, k, v, mask, causal=self.is_causal, scale=self.scale,
                                                keep=self.keep, dropout_scale=self._dropout_scale())
        self.y = y  # a constant of the backward (its probabilities' row sums), not an input of it
        return y

    def _dropout_scale(self) -> float:
        return 0.0 if self.dropout_p >= 1 else 1.0 / (1.0 - self.dropout_p)

    def backward(self, gy: Tensor) -> tuple:
        saved = self.saved_tensors
        mask = saved[3] if self.mask_kind == "float" else None
        grad_op = SdpaBackward(self, self.needs_input_grad)
        inputs = saved[:3] + (gy,) + ((mask,) if mask is not None else ())
        outputs = grad_op(*inputs)
        grads: list = [None] * len(self.needs_input_grad)
        for index, g in zip(grad_op.outs, outputs if isinstance(outputs, tuple) else (outputs,)):
            grads[index] = g
        return tuple(grads)


class SdpaBackward(Function):
    """dq, dk, dv (, dmask) of attention (one kernel); their backward (double backward) in tinyamp ops

    The first-order gradient is a chain of products and a softmax's vector-Jacobian product; its
    backward runs that chain in reverse with cotangents aq, ak, av (, am), recomputing p in ops.
    """

    precision = LOWER
    name = "scaled_dot_product_attention_backward"

    def __init__(self, att: ScaledDotProductAttention, needs: tuple) -> None:
        self.att = att
        float_mask = att.mask_kind == "float"
        self.outs = [i for i in range(4 if float_mask else 3) if needs[i]]
        self.save_inputs = (0, 1, 2, 3, 4) if float_mask else (0, 1, 2, 3)

    def forward(self, xp: Any, q: Any, k: Any, v: Any, gy: Any, mask: Any = None) -> Any:
        att = self.att
        needs = tuple(i in self.outs for i in range(4))
        grads = attention_kernels.backward(q, k, v, att.y, gy, att.lse, mask if mask is not None else att.bool_mask,
                                           causal=att.is_causal, scale=att.scale, keep=att.keep,
                                           dropout_scale=att._dropout_scale(), needs=needs)
        return tuple(grads[i] for i in self.outs)

    def _probabilities(self, q: Tensor, k: Tensor, mask: "Tensor | None") -> Tensor:
        """p recomputed in tinyamp ops from float32 (or float64) q, k and mask: differentiable."""
        att = self.att
        xp = q.device.xp
        scores = matmul(q, k.transpose(-2, -1)) * att.scale
        if mask is not None:
            scores = scores + cast(mask, scores.dtype)
        allowed = (xp.tril(xp.ones(scores.shape[-2:], dtype=bool)) if att.is_causal else att.bool_mask)
        if allowed is not None:
            scores = masked_fill(scores, Tensor._wrap(~allowed), -np.inf)
        # An all-masked row is softmaxed as zeros (no 0 / 0, no NaN gradient) and then zeroed.
        dead = Tensor._wrap(~xp.isfinite(att.lse)[..., None])
        scores = masked_fill(scores, dead, 0.0)
        return where(dead, 0.0, softmax(scores, -1))

    def backward(self, *cotangents: Tensor) -> tuple:
        att = self.att
        saved = self.saved_tensors
        q, k, v, gy = saved[:4]
        mask = saved[4] if att.mask_kind == "float" else None
        compute = dt.opmath_dtype(q.dtype)
        qc, kc, vc, gc = (cast(t, compute) for t in (q, k, v, gy))
        cot = {i: cast(c, compute) for i, c in zip(self.outs, cotangents)}
        scale = att.scale
        p = self._probabilities(qc, kc, None if mask is None else cast(mask, compute))
        drop = None
        if att.keep is not None:  # dropout's factor per element: 1 / (1 - dropout_p) where kept, else 0
            xp = q.device.xp
            drop = Tensor._wrap(xp.where(att.keep, compute.type(att._dropout_scale()), compute.type(0)))
        dropped = p if drop is None else p * drop
        dp = matmul(gc, vc.transpose(-2, -1))
        if drop is not None:
            dp = dp * drop
        r = _sum(dp * p, -1, keepdim=True)
        ds = p * (dp - r)
        a_q = a_k = a_v = a_gy = None
        # Reverse of dq = ds k scale, dk = ds^T q scale, dmask = ds:
        a_ds = None
        if 0 in cot:
            a_ds = matmul(cot[0], kc.transpose(-2, -1)) * scale
            a_k = matmul(ds.transpose(-2, -1), cot[0]) * scale
        if 1 in cot:
            term = matmul(qc, cot[1].transpose(-2, -1)) * scale
            a_ds = term if a_ds is None else a_ds + term
            a_q = matmul(ds, cot[1]) * scale
        if 3 in cot:
            a_ds = expand(cot[3], *ds.shape) if a_ds is None else a_ds + cot[3]
        a_p = None
        if a_ds is not None:
            # Reverse of ds = p (dp - r), r = sum(dp p): the softmax's vector-Jacobian product in both inputs.
            t = _sum(a_ds * p, -1, keepdim=True)
            a_dp = p * (a_ds - t)
            a_p = a_ds * (dp - r) - dp * t
            if drop is not None:
                a_dp = a_dp * drop
            a_gy = matmul(a_dp, vc)
            a_v = matmul(a_dp.transpose(-2, -1), gc)
        if 2 in cot:  # reverse of dv = dropped^T gy
            a_dropped = matmul(gc, cot[2].transpose(-2, -1))
            term = a_dropped if drop is None else a_dropped * drop
            a_p = term if a_p is None else a_p + term
            term = matmul(dropped, cot[2])
            a_gy = term if a_gy is None else a_gy + term
        a_mask = None
        if a_p is not None:  # reverse of p = softmax(q k^T scale + mask)
            a_s = p * (a_p - _sum(a_p * p, -1, keepdim=True))
            term = matmul(a_s, kc) * scale
            a_q = term if a_q is None else a_q + term
            term = matmul(a_s.transpose(-2, -1), qc) * scale
            a_k = term if a_k is None else a_k + term
            a_mask = a_s
        shapes = self.input_shapes
        needs = self.needs_input_grad
        grads = []
        for index, (g, source) in enumerate(zip((a_q, a_k, a_v, a_gy, a_mask), (q, k, v, gy, mask))):
            if index >= len(needs):
                break
            grads.append(cast(sum_to(g, shapes[index]), source.dtype) if needs[index] and g is not None else None)
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
