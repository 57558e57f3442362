"""MultiheadAttention: PyTorch's module, parameters, masks and returned weights, composed of tinyamp ops.

Parameters as PyTorch names them: ``in_proj_weight`` (3E, E) and ``in_proj_bias``
(3E) when query, key and value share the embedding size, else
``q_proj_weight``, ``k_proj_weight`` (E, kdim), ``v_proj_weight`` (E, vdim);
``out_proj`` a Linear(E, E). Inputs are (L, N, E) (``batch_first``: (N, L, E);
unbatched: (L, E)); masks follow PyTorch: ``key_padding_mask`` (N, S) and
``attn_mask`` (L, S) or (N * num_heads, L, S), a bool mask's True meaning "do
not attend", a float mask added to the scores.

Without ``need_weights`` the heads go through ``scaled_dot_product_attention``
(one LOWER op); with it, through ``matmul`` (LOWER), ``softmax`` (FP32) and
``matmul`` again, so that the weights exist. Under autocast that gives what
PyTorch's CUDA autocast gives: a float16 output, float32 weights.
"""

from __future__ import annotations

import math
from typing import Any

from .. import dtypes as dt
from ..tensor import Tensor
from ..nn import init
from ..nn.linear import Linear
from ..nn.module import Module
from ..nn.parameter import Parameter
from ..factories import empty, zeros
from ..ops.attention import scaled_dot_product_attention
from ..ops.clamp_where import masked_fill
from ..ops.dropout import dropout as dropout_op
from ..ops.linalg import linear as linear_op, matmul
from ..ops.shape import chunk as chunk_op
from ..ops.softmax import softmax


def _float_mask(name: str, mask: "Tensor | None", dtype: Any) -> "Tensor | None":
    """A bool mask (True = masked) as 0 / -inf in ``dtype``; a float mask as it is."""
    if mask is None:
        return None
    if mask.dtype == dt.bool_:
        return masked_fill(zeros(mask.shape, dtype=dtype, device=mask.device), mask,
                                       float("-inf"))
    if mask.dtype not in dt.FLOATING:
        raise AssertionError(f"MultiheadAttention: only bool and floating types of {name} are supported, got "
                             f"{dt.dtype_name(mask.dtype)}")
    return mask


class MultiheadAttention(Module):
    """Attention from num_heads heads of size embed_dim // num_heads; forward -> (output, weights or None)."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim: "int | None" = None,
                 vdim: "int | None" = None, batch_first: bool = False, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"embed_dim and num_heads must be greater than 0, got embed_dim={embed_dim} and "
                             f"num_heads={num_heads} instead")
        if embed_dim % num_heads:
            raise AssertionError("embed_dim must be divisible by num_heads")
        if add_bias_kv or add_zero_attn:
            raise NotImplementedError("MultiheadAttention: add_bias_kv and add_zero_attn are not supported in "
                                      "tinyamp")
        self.embed_dim, self.num_heads, self.dropout, self.batch_first = embed_dim, num_heads, dropout, batch_first
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.head_dim = embed_dim // num_heads
        make = lambda *shape: Parameter(empty(*shape, dtype=dtype, device=device))  # noqa: E731
        if self._qkv_same_embed_dim:
            self.in_proj_weight = make(3 * embed_dim, embed_dim)
            for name in ("q_proj_weight", "k_proj_weight", "v_proj_weight"):
                self.register_parameter(name, None)
        else:
            self.q_proj_weight = make(embed_dim, embed_dim)
            self.k_proj_weight = make(embed_dim, self.kdim)
            self.v_proj_weight = make(embed_dim, self.vdim)
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = make(3 * embed_dim)
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, device=device, dtype=dtype)
        self.bias_k = self.bias_v = None
        self.add_zero_attn = False
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        """PyTorch's: xavier_uniform_ projections, zero biases (out_proj's weight keeps Linear's init)."""
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            for w in (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
                init.xavier_uniform_(w)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)

    def _project(self, query: Tensor, key: Tensor, value: Tensor) -> tuple:
        """q, k, v projections; one product when query, key and value are one tensor (self-attention)."""
        linear, chunk, e = linear_op, chunk_op, self.embed_dim
        biases = [None] * 3 if self.in_proj_bias is None else list(chunk(self.in_proj_bias, 3))
        if self._qkv_same_embed_dim:
            if query is key and key is value:
                return chunk(linear(query, self.in_proj_weight, self.in_proj_bias), 3, -1)
            w_q, w_k, w_v = chunk(self.in_proj_weight, 3)
            if key is value:
                b_kv = None if self.in_proj_bias is None else self.in_proj_bias[e:]
                k, v = chunk(linear(key, self.in_proj_weight[e:], b_kv), 2, -1)
                return linear(query, w_q, biases[0]), k, v
        else:
            w_q, w_k, w_v = self.q_proj_weight, self.k_proj_weight, self.v_proj_weight
        return linear(query, w_q, biases[0]), linear(key, w_k, biases[1]), linear(value, w_v, biases[2])

    def _check(self, query: Tensor, key: Tensor, value: Tensor) -> bool:
        """True for an unbatched call; refuses shapes PyTorch refuses, naming them."""
        shapes = f"query {list(query.shape)}, key {list(key.shape)}, value {list(value.shape)}"
        if query.ndim not in (2, 3) or key.ndim != query.ndim or value.ndim != query.ndim:
            raise AssertionError(f"MultiheadAttention: query, key and value must all be 3-D (batched) or 2-D "
                                 f"(unbatched), got {shapes}")
        if query.shape[-1] != self.embed_dim or key.shape[-1] != self.kdim or value.shape[-1] != self.vdim:
            raise AssertionError(f"MultiheadAttention: expected embedding sizes query {self.embed_dim}, key "
                                 f"{self.kdim}, value {self.vdim} in the last dim, got {shapes}")
        if key.shape[:-1] != value.shape[:-1]:
            raise AssertionError(f"MultiheadAttention: key shape {list(key.shape)} does not match value shape "
                                 f"{list(value.shape)}")
        return query.ndim == 2

    def forward(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: "Tensor | None" = None,
                need_weights: bool = True, attn_mask: "Tensor | None" = None, average_attn_weights: bool = True,
                is_causal: bool = False) -> tuple:
        if is_causal and attn_mask is None:
            raise RuntimeError("MultiheadAttention: Need attn_mask if specifying the is_causal hint. You may use "
                               "the Transformer module method `generate_square_subsequent_mask` to create this "
                               "mask.")
        unbatched = self._check(query, key, value)
        same_qkv, same_kv = query is key and key is value, key is value
        if unbatched:
            query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        elif self.batch_first:
            query, key, value = query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1)
        if same_qkv:
            key = value = query
        elif same_kv:
            value = key
        length, batch, _ = query.shape
        source = key.shape[0]
        heads, hd = self.num_heads, self.head_dim
        q, k, v = self._project(query, key, value)
        # (L, N, E) -> (N, heads, L, head_dim)
        q, k, v = (t.reshape(t.shape[0], batch, heads, hd).permute(1, 2, 0, 3) for t in (q, k, v))
        mask = self._merged_mask(key_padding_mask, attn_mask, q.dtype, batch, length, source)
        dropout = self.dropout if self.training else 0.0
        weights = None
        if need_weights:
            scores = matmul(q * (1.0 / math.sqrt(hd)), k.transpose(-2, -1))
            if mask is not None:
                scores = scores + mask
            weights = softmax(scores, -1)
            if dropout > 0:  # PyTorch returns the weights after dropout
                weights = dropout_op(weights, dropout, True)
            out = matmul(weights, v)
        else:
            out = scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)
        out = out.permute(2, 0, 1, 3).reshape(length, batch, self.embed_dim)
        out = self.out_proj(out)
        if weights is not None and average_attn_weights:
            weights = weights.mean(1)
        if unbatched:
            out = out.squeeze(1)
            weights = None if weights is None else weights.squeeze(0)
        elif self.batch_first:
            out = out.transpose(0, 1)
        return out, weights

    def _merged_mask(self, key_padding_mask: "Tensor | None", attn_mask: "Tensor | None", dtype: Any,
                     batch: int, length: int, source: int) -> "Tensor | None":
        """One additive mask broadcastable to (N, heads, L, S), or None."""
        kpm = _float_mask("key_padding_mask", key_padding_mask, dtype)
        mask = _float_mask("attn_mask", attn_mask, dtype)
        if kpm is not None:
            if tuple(kpm.shape) != (batch, source):
                raise AssertionError(f"MultiheadAttention: expected key_padding_mask of shape {[batch, source]}, "
                                     f"got {list(kpm.shape)}")
            kpm = kpm.reshape(batch, 1, 1, source)
        if mask is not None:
            if tuple(mask.shape) == (length, source):
                pass
            elif tuple(mask.shape) == (batch * self.num_heads, length, source):
                mask = mask.reshape(batch, self.num_heads, length, source)
            else:
                raise RuntimeError(f"MultiheadAttention: The shape of the attn_mask should be {[length, source]} "
                                   f"or {[batch * self.num_heads, length, source]}, got {list(mask.shape)}")
        if kpm is None:
            return mask
        return kpm if mask is None else mask + kpm
