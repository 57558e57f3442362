"""Op-spec rows for scaled_dot_product_attention (tinyamp/ops/attention.py).

The reference is the textbook formula in float64 NumPy, with PyTorch's rule
that a query row whose every key is masked out attends to nothing (zeros).
The op itself was also held against torch 2.13's scaled_dot_product_attention
in a scratch script (float64 forward and every gradient, all masks, causal
with L < S and L > S, scale, GQA, broadcast batches): within 1.3e-15.
"""

from __future__ import annotations

import math

import numpy as np

import tinyamp as ta
from tests.support.op_specs import Arg, OpSpec

F = ta.nn.functional
# A boolean mask (True = attend) with a fully masked second row.
DEAD_ROW = np.array([[True, False, True, True, False], [False] * 5, [True] * 5, [False, False, False, False, True]])
# The same pattern as an additive mask: 0 where allowed, -inf elsewhere.
MINUS_INF_ROW = np.where(DEAD_ROW, 0.0, -np.inf)


def ref_attention(q, k, v, mask=None, causal=False, scale=None, groups=1):
    """softmax(q k^T scale + mask) v in float64; an all-masked row gives zeros."""
    if groups > 1:
        k, v = np.repeat(k, groups, axis=-3), np.repeat(v, groups, axis=-3)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ np.swapaxes(k, -1, -2) * scale
    length, source = scores.shape[-2:]
    allowed = np.ones(scores.shape, bool)
    if causal:
        allowed = allowed & np.tril(np.ones((length, source), bool))
    if mask is not None and mask.dtype == bool:
        allowed = allowed & mask
    elif mask is not None:
        scores = scores + mask
    scores = np.where(allowed, scores, -np.inf)
    top = scores.max(-1, keepdims=True)
    e = np.exp(scores - np.where(np.isfinite(top), top, 0))
    total = e.sum(-1, keepdims=True)
    return (e / np.where(total == 0, 1, total)) @ v


SPECS = [
    OpSpec("scaled_dot_product_attention", F.scaled_dot_product_attention, ref_attention,
           [Arg((2, 3, 4, 8)), Arg((2, 3, 5, 8)), Arg((2, 3, 5, 6))], id="sdpa"),
    OpSpec("scaled_dot_product_attention", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
           lambda q, k, v: ref_attention(q, k, v, causal=True),
           [Arg((2, 5, 4)), Arg((2, 5, 4)), Arg((2, 5, 3))], id="sdpa_causal"),
    OpSpec("scaled_dot_product_attention", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
           lambda q, k, v: ref_attention(q, k, v, causal=True),
           [Arg((6, 4)), Arg((3, 4)), Arg((3, 5))], id="sdpa_causal_more_queries_than_keys"),
    OpSpec("scaled_dot_product_attention", lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
           ref_attention, [Arg((2, 2, 4, 8)), Arg((2, 2, 5, 8)), Arg((2, 2, 5, 6)), Arg((4, 5), kind="bool")],
           id="sdpa_bool_mask"),
    OpSpec("scaled_dot_product_attention",
           lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=ta.tensor(DEAD_ROW, device=q.device)),
           lambda q, k, v: ref_attention(q, k, v, DEAD_ROW),
           [Arg((3, 4, 8)), Arg((3, 5, 8)), Arg((3, 5, 6))], id="sdpa_fully_masked_row"),
    OpSpec("scaled_dot_product_attention",
           lambda q, k, v: F.scaled_dot_product_attention(
               q, k, v, attn_mask=ta.tensor(MINUS_INF_ROW, dtype=q.dtype, device=q.device)),
           lambda q, k, v: ref_attention(q, k, v, MINUS_INF_ROW),
           [Arg((3, 4, 8)), Arg((3, 5, 8)), Arg((3, 5, 6))], id="sdpa_minus_inf_row"),
    # additive float mask: it gets a gradient too
    OpSpec("scaled_dot_product_attention", lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
           ref_attention, [Arg((2, 4, 8)), Arg((2, 5, 8)), Arg((2, 5, 6)), Arg((2, 1, 5), -2.0, 2.0)],
           id="sdpa_float_mask"),
    OpSpec("scaled_dot_product_attention", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, scale=0.7),
           lambda q, k, v: ref_attention(q, k, v, scale=0.7),
           [Arg((3, 4, 8)), Arg((1, 5, 8)), Arg((5, 6))], id="sdpa_scale_broadcast_batch"),
    OpSpec("scaled_dot_product_attention",
           lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True),
           lambda q, k, v: ref_attention(q, k, v, causal=True, groups=2),
           [Arg((1, 4, 3, 4)), Arg((1, 2, 3, 4)), Arg((1, 2, 3, 5))], id="sdpa_gqa"),
]
