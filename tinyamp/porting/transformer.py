"""Transformer, its encoder and decoder layers and stacks, as PyTorch builds them (post-norm or ``norm_first``).

A layer is MultiheadAttention, a feed-forward block ``linear2(dropout(activation(linear1(x))))``,
LayerNorms and dropouts, with PyTorch's submodule names (``self_attn``,
``multihead_attn``, ``linear1``, ``linear2``, ``norm1``..``norm3``,
``dropout``..``dropout3``), so state_dicts load. ``TransformerEncoder`` and
``TransformerDecoder`` stack deep copies of one layer (``layers.0`` ...) and an
optional final ``norm``; ``Transformer`` is an encoder stack and a decoder stack,
each ending in a LayerNorm, with every matrix re-drawn xavier-uniform.
"""

from __future__ import annotations

import copy
from typing import Any, Callable

from ..tensor import Tensor
from ..nn import init
from .attention import MultiheadAttention
from ..nn.container import ModuleList
from ..nn.dropout import Dropout
from ..nn.linear import Linear
from ..nn.module import Module
from ..nn.normalization import LayerNorm
from ..factories import full
from ..ops.activation import gelu, relu
from ..ops.triangular import triu


def _activation(activation: "str | Callable") -> Callable:
    if activation == "relu":
        return relu
    if activation == "gelu":
        return gelu
    if callable(activation):
        return activation
    raise RuntimeError(f"activation should be relu/gelu, not {activation}")


class _FeedForwardLayer(Module):
    """What encoder and decoder layers share: the feed-forward block and its options."""

    def _feed_forward_parts(self, d_model: int, dim_feedforward: int, dropout: float, activation: Any,
                            bias: bool, factory: dict) -> None:
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, **factory)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, **factory)
        # A module activation is a submodule (as in PyTorch); a string or function is not.
        self.activation = _activation(activation)

    def _ff_block(self, x: Tensor, dropout: Module) -> Tensor:
        return dropout(self.linear2(self.dropout(self.activation(self.linear1(x)))))


class TransformerEncoderLayer(_FeedForwardLayer):
    """Self-attention then feed-forward, each with a residual connection and a LayerNorm."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: "str | Callable" = "relu", layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first,
                                            **factory)
        self._feed_forward_parts(d_model, dim_feedforward, dropout, activation, bias, factory)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)

    def _sa_block(self, x: Tensor, mask: Any, key_padding_mask: Any, is_causal: bool) -> Tensor:
        x = self.self_attn(x, x, x, attn_mask=mask, key_padding_mask=key_padding_mask, need_weights=False,
                           is_causal=is_causal)[0]
        return self.dropout1(x)

    def forward(self, src: Tensor, src_mask: "Tensor | None" = None, src_key_padding_mask: "Tensor | None" = None,
                is_causal: bool = False) -> Tensor:
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            return x + self._ff_block(self.norm2(x), self.dropout2)
        x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
        return self.norm2(x + self._ff_block(x, self.dropout2))


class TransformerDecoderLayer(_FeedForwardLayer):
    """Self-attention, attention over ``memory``, then feed-forward; each with a residual and a LayerNorm."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: "str | Callable" = "relu", layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first,
                                            **factory)
        self.multihead_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                                 batch_first=batch_first, **factory)
        self._feed_forward_parts(d_model, dim_feedforward, dropout, activation, bias, factory)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
        self.norm3 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.dropout3 = Dropout(dropout)

    def _sa_block(self, x: Tensor, mask: Any, key_padding_mask: Any, is_causal: bool) -> Tensor:
        x = self.self_attn(x, x, x, attn_mask=mask, key_padding_mask=key_padding_mask, need_weights=False,
                           is_causal=is_causal)[0]
        return self.dropout1(x)

    def _mha_block(self, x: Tensor, memory: Tensor, mask: Any, key_padding_mask: Any, is_causal: bool) -> Tensor:
        x = self.multihead_attn(x, memory, memory, attn_mask=mask, key_padding_mask=key_padding_mask,
                                need_weights=False, is_causal=is_causal)[0]
        return self.dropout2(x)

    def forward(self, tgt: Tensor, memory: Tensor, tgt_mask: "Tensor | None" = None,
                memory_mask: "Tensor | None" = None, tgt_key_padding_mask: "Tensor | None" = None,
                memory_key_padding_mask: "Tensor | None" = None, tgt_is_causal: bool = False,
                memory_is_causal: bool = False) -> Tensor:
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal)
            x = x + self._mha_block(self.norm2(x), memory, memory_mask, memory_key_padding_mask, memory_is_causal)
            return x + self._ff_block(self.norm3(x), self.dropout3)
        x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))
        x = self.norm2(x + self._mha_block(x, memory, memory_mask, memory_key_padding_mask, memory_is_causal))
        return self.norm3(x + self._ff_block(x, self.dropout3))


def _clones(layer: Module, n: int) -> ModuleList:
    return ModuleList([copy.deepcopy(layer) for _ in range(n)])


class TransformerEncoder(Module):
    """``num_layers`` copies of ``encoder_layer`` applied in turn, then ``norm`` if given."""

    def __init__(self, encoder_layer: TransformerEncoderLayer, num_layers: int, norm: "Module | None" = None,
                 enable_nested_tensor: bool = True, mask_check: bool = True) -> None:
        super().__init__()
        # enable_nested_tensor and mask_check choose PyTorch's fast paths; tinyamp has one path.
        self.layers = _clones(encoder_layer, num_layers)
        self.num_layers, self.norm = num_layers, norm

    def forward(self, src: Tensor, mask: "Tensor | None" = None, src_key_padding_mask: "Tensor | None" = None,
                is_causal: "bool | None" = None) -> Tensor:
        out = src
        for layer in self.layers:
            out = layer(out, src_mask=mask, src_key_padding_mask=src_key_padding_mask,
                        is_causal=bool(is_causal) and mask is not None)
        return out if self.norm is None else self.norm(out)


class TransformerDecoder(Module):
    """``num_layers`` copies of ``decoder_layer`` applied in turn over ``memory``, then ``norm`` if given."""

    def __init__(self, decoder_layer: TransformerDecoderLayer, num_layers: int, norm: "Module | None" = None) -> None:
        super().__init__()
        self.layers = _clones(decoder_layer, num_layers)
        self.num_layers, self.norm = num_layers, norm

    def forward(self, tgt: Tensor, memory: Tensor, tgt_mask: "Tensor | None" = None,
                memory_mask: "Tensor | None" = None, tgt_key_padding_mask: "Tensor | None" = None,
                memory_key_padding_mask: "Tensor | None" = None, tgt_is_causal: "bool | None" = None,
                memory_is_causal: bool = False) -> Tensor:
        out = tgt
        for layer in self.layers:
            out = layer(out, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                        tgt_key_padding_mask=tgt_key_padding_mask,
                        memory_key_padding_mask=memory_key_padding_mask,
                        tgt_is_causal=bool(tgt_is_causal) and tgt_mask is not None,
                        memory_is_causal=memory_is_causal)
        return out if self.norm is None else self.norm(out)


class Transformer(Module):
    """Encoder-decoder Transformer: ``decoder(tgt, encoder(src))``; PyTorch's submodule names and init."""

    def __init__(self, d_model: int = 512, nhead: int = 8, num_encoder_layers: int = 6, num_decoder_layers: int = 6,
                 dim_feedforward: int = 2048, dropout: float = 0.1, activation: "str | Callable" = "relu",
                 custom_encoder: "Module | None" = None, custom_decoder: "Module | None" = None,
                 layer_norm_eps: float = 1e-5, batch_first: bool = False, norm_first: bool = False,
                 bias: bool = True, device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        options = dict(dim_feedforward=dim_feedforward, dropout=dropout, activation=activation,
                       layer_norm_eps=layer_norm_eps, batch_first=batch_first, norm_first=norm_first, bias=bias,
                       device=device, dtype=dtype)
        norm = {"eps": layer_norm_eps, "bias": bias, "device": device, "dtype": dtype}
        self.encoder = custom_encoder if custom_encoder is not None else TransformerEncoder(
            TransformerEncoderLayer(d_model, nhead, **options), num_encoder_layers, LayerNorm(d_model, **norm))
        self.decoder = custom_decoder if custom_decoder is not None else TransformerDecoder(
            TransformerDecoderLayer(d_model, nhead, **options), num_decoder_layers, LayerNorm(d_model, **norm))
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first
        for p in self.parameters():
            if p.ndim > 1:
                init.xavier_uniform_(p)

    def forward(self, src: Tensor, tgt: Tensor, src_mask: "Tensor | None" = None, tgt_mask: "Tensor | None" = None,
                memory_mask: "Tensor | None" = None, src_key_padding_mask: "Tensor | None" = None,
                tgt_key_padding_mask: "Tensor | None" = None, memory_key_padding_mask: "Tensor | None" = None,
                src_is_causal: "bool | None" = None, tgt_is_causal: "bool | None" = None,
                memory_is_causal: bool = False) -> Tensor:
        batch_dim = 0 if self.batch_first else 1
        if src.ndim == 3 and src.shape[batch_dim] != tgt.shape[batch_dim]:
            raise RuntimeError(f"Transformer: the batch number of src and tgt must be equal, got src "
                               f"{list(src.shape)} and tgt {list(tgt.shape)}")
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise RuntimeError(f"Transformer: the feature number of src and tgt must be equal to d_model "
                               f"({self.d_model}), got src {list(src.shape)} and tgt {list(tgt.shape)}")
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask,
                              is_causal=src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask, tgt_is_causal=tgt_is_causal,
                            memory_is_causal=memory_is_causal)

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device: Any = None, dtype: Any = None) -> Tensor:
        """(sz, sz) additive causal mask: 0 on and below the diagonal, -inf above."""
        return triu(full((sz, sz), float("-inf"), dtype=dtype, device=device), diagonal=1)
