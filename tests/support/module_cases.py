"""Module cases compared with PyTorch: one definition run by both libraries.

Each case builds a module and calls it through a library handed in as ``lib``
(``torch`` in ``tests/support/make_module_references.py``, which records PyTorch's
results once; ``tinyamp`` in ``tests/nn/test_modules_vs_torch.py``). The same
lines therefore run in both: they are PyTorch code ported by the import alone.
This file imports neither library.

``inputs`` maps a name to ``(shape, low, high, requires_grad)`` (``kind`` of a
bool mask: ``low`` is None); values are drawn from ``numpy`` with the case's
seed and stored with the references, so both sides read the same numbers.
``amp`` lists the output dtypes under ``autocast(float16)`` that PyTorch's CUDA
autocast lists give (tinyamp applies those lists on every device).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np


@dataclass
class Case:
    name: str
    build: Callable[[Any], Any]
    inputs: dict
    call: Callable[[Any, Any, dict], Any]
    amp: tuple = ()
    train: bool = True
    seed: int = 0
    masks: dict = field(default_factory=dict)  # name -> a fixed bool/float array (not drawn)


PAD = np.array([[False, False, True, False], [False, False, False, True]])  # (N, S): True = padding
CAUSAL3 = np.triu(np.full((3, 3), -np.inf), 1)  # additive: query i sees keys 0..i
CAUSAL4 = np.triu(np.full((4, 4), -np.inf), 1)
BLOCK = np.array([[False, True, False, False, True], [True, False, False, True, False],
                  [False, False, True, False, False]])  # (L, S): True = may not attend


def _loss(cls: str, **kw: Any) -> Callable:
    return lambda lib: getattr(lib.nn, cls)(**kw)


def _pair(lib: Any, m: Any, t: dict) -> Any:
    return m(t["x"], t["t"])


CASES = [
    Case("huber_mean", _loss("HuberLoss", delta=0.7), {"x": ((3, 4), -2, 2, True), "t": ((3, 4), -1, 1, True)},
         _pair, amp=("float32",)),
    Case("huber_none", _loss("HuberLoss", reduction="none"),
         {"x": ((2, 5), -2, 2, True), "t": ((2, 5), -1, 1, True)}, _pair, amp=("float32",)),
    Case("huber_weight", lambda lib: None,
         {"x": ((2, 5), -2, 2, True), "t": ((2, 5), -1, 1, True), "w": ((2, 5), 0, 2, False)},
         lambda lib, m, t: lib.nn.functional.huber_loss(t["x"], t["t"], delta=0.5, weight=t["w"]),
         amp=("float32",)),
    Case("smooth_l1_sum", _loss("SmoothL1Loss", reduction="sum", beta=0.5),
         {"x": ((3, 4), -2, 2, True), "t": ((3, 4), -1, 1, True)}, _pair, amp=("float32",)),
    Case("smooth_l1_beta0", _loss("SmoothL1Loss", beta=0.0),
         {"x": ((3, 4), -2, 2, True), "t": ((3, 4), -1, 1, True)}, _pair, amp=("float32",)),
    Case("group_norm", lambda lib: lib.nn.GroupNorm(2, 6), {"x": ((2, 6, 3, 2), -2, 2, True)},
         lambda lib, m, t: m(t["x"]), amp=("float32",)),
    Case("group_norm_no_affine_3d", lambda lib: lib.nn.GroupNorm(3, 3, eps=1e-3, affine=False),
         {"x": ((2, 3, 5), -2, 2, True)}, lambda lib, m, t: m(t["x"]), amp=("float32",)),
    # recurrent layers: (L, N, H_in) unless batch_first; h0/c0 given as inputs get gradients too
    Case("lstm_2layer_bidirectional", lambda lib: lib.nn.LSTM(4, 3, num_layers=2, bidirectional=True),
         {"x": ((5, 2, 4), -1, 1, True), "h0": ((4, 2, 3), -1, 1, True), "c0": ((4, 2, 3), -1, 1, True)},
         lambda lib, m, t: m(t["x"], (t["h0"], t["c0"])), amp=("float16",) * 3),
    Case("lstm_batch_first_proj", lambda lib: lib.nn.LSTM(3, 4, batch_first=True, proj_size=2),
         {"x": ((2, 5, 3), -1, 1, True)}, lambda lib, m, t: m(t["x"]), amp=("float16",) * 3),
    Case("lstm_dropout_eval_unbatched", lambda lib: lib.nn.LSTM(3, 4, num_layers=2, dropout=0.5, bias=False),
         {"x": ((6, 3), -1, 1, True)}, lambda lib, m, t: m(t["x"]), train=False, amp=("float16",) * 3),
    Case("gru_2layer_bidirectional_batch_first",
         lambda lib: lib.nn.GRU(4, 3, num_layers=2, batch_first=True, bidirectional=True),
         {"x": ((2, 5, 4), -1, 1, True), "h0": ((4, 2, 3), -1, 1, True)},
         lambda lib, m, t: m(t["x"], t["h0"]), amp=("float16",) * 2),
    Case("rnn_relu_no_bias", lambda lib: lib.nn.RNN(4, 3, nonlinearity="relu", bias=False),
         {"x": ((5, 2, 4), -1, 1, True)}, lambda lib, m, t: m(t["x"]), amp=("float16",) * 2),
    Case("rnn_tanh_2layer_unbatched", lambda lib: lib.nn.RNN(4, 3, num_layers=2),
         {"x": ((5, 4), -1, 1, True), "h0": ((2, 3), -1, 1, True)}, lambda lib, m, t: m(t["x"], t["h0"]),
         amp=("float16",) * 2),
    Case("lstm_cell", lambda lib: lib.nn.LSTMCell(4, 3),
         {"x": ((2, 4), -1, 1, True), "h": ((2, 3), -1, 1, True), "c": ((2, 3), -1, 1, True)},
         lambda lib, m, t: m(t["x"], (t["h"], t["c"])), amp=("float16",) * 2),
    Case("gru_cell_no_state", lambda lib: lib.nn.GRUCell(4, 3), {"x": ((2, 4), -1, 1, True)},
         lambda lib, m, t: m(t["x"]), amp=("float16",)),
    Case("rnn_cell_relu_unbatched", lambda lib: lib.nn.RNNCell(4, 3, nonlinearity="relu"),
         {"x": ((4,), -1, 1, True), "h": ((3,), -1, 1, True)}, lambda lib, m, t: m(t["x"], t["h"]),
         amp=("float16",)),
    # attention: q (L, N, E) unless batch_first; masks are PyTorch's (bool True = masked, float added)
    Case("mha_self_key_padding_weights", lambda lib: lib.nn.MultiheadAttention(8, 2),
         {"x": ((4, 2, 8), -1, 1, True)},
         lambda lib, m, t: m(t["x"], t["x"], t["x"], key_padding_mask=t["pad"]), masks={"pad": PAD},
         amp=("float16", "float32")),
    Case("mha_cross_kdim_vdim_batch_first_per_head",
         lambda lib: lib.nn.MultiheadAttention(8, 2, kdim=6, vdim=5, batch_first=True, bias=False),
         {"q": ((2, 3, 8), -1, 1, True), "k": ((2, 4, 6), -1, 1, True), "v": ((2, 4, 5), -1, 1, True),
          "mask": ((3, 4), -1, 1, False)},
         lambda lib, m, t: m(t["q"], t["k"], t["v"], attn_mask=t["mask"], average_attn_weights=False),
         amp=("float16", "float32")),
    Case("mha_shared_kv_bool_mask_no_weights", lambda lib: lib.nn.MultiheadAttention(8, 4),
         {"q": ((3, 2, 8), -1, 1, True), "kv": ((5, 2, 8), -1, 1, True)},
         lambda lib, m, t: m(t["q"], t["kv"], t["kv"], attn_mask=t["block"], need_weights=False),
         masks={"block": BLOCK}, amp=("float16",)),
    Case("mha_per_head_float_mask_padding_no_weights", lambda lib: lib.nn.MultiheadAttention(8, 2),
         {"q": ((3, 2, 8), -1, 1, True), "k": ((4, 2, 8), -1, 1, True), "v": ((4, 2, 8), -1, 1, True),
          "mask": ((4, 3, 4), -1, 1, False)},
         lambda lib, m, t: m(t["q"], t["k"], t["v"], attn_mask=t["mask"], key_padding_mask=t["pad"],
                             need_weights=False), masks={"pad": PAD}, amp=("float16",)),
    Case("mha_unbatched", lambda lib: lib.nn.MultiheadAttention(6, 3),
         {"q": ((3, 6), -1, 1, True), "kv": ((4, 6), -1, 1, True)},
         lambda lib, m, t: m(t["q"], t["kv"], t["kv"]), amp=("float16", "float32")),
    Case("encoder_layer_post_norm_padding", lambda lib: lib.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0),
         {"x": ((4, 2, 8), -1, 1, True)}, lambda lib, m, t: m(t["x"], src_key_padding_mask=t["pad"]),
         masks={"pad": PAD}, amp=("float32",)),
    Case("encoder_layer_norm_first_gelu_causal",
         lambda lib: lib.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, activation="gelu", batch_first=True,
                                                    norm_first=True),
         {"x": ((2, 4, 8), -1, 1, True)}, lambda lib, m, t: m(t["x"], src_mask=t["causal"], is_causal=True),
         masks={"causal": CAUSAL4}, amp=("float32",)),
    Case("encoder_stack_with_norm",
         lambda lib: lib.nn.TransformerEncoder(lib.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0), 2,
                                               norm=lib.nn.LayerNorm(8)),
         {"x": ((4, 2, 8), -1, 1, True)}, lambda lib, m, t: m(t["x"], mask=t["causal"]),
         masks={"causal": CAUSAL4}, amp=("float32",)),
    Case("decoder_layer_post_norm",
         lambda lib: lib.nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0),
         {"x": ((3, 2, 8), -1, 1, True), "memory": ((4, 2, 8), -1, 1, True)},
         lambda lib, m, t: m(t["x"], t["memory"], tgt_mask=t["causal"], memory_key_padding_mask=t["pad"]),
         masks={"causal": CAUSAL3, "pad": PAD}, amp=("float32",)),
    Case("decoder_stack_norm_first_batch_first",
         lambda lib: lib.nn.TransformerDecoder(
             lib.nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0, norm_first=True, batch_first=True), 2),
         {"x": ((2, 3, 8), -1, 1, True), "memory": ((2, 4, 8), -1, 1, True)},
         lambda lib, m, t: m(t["x"], t["memory"], tgt_mask=t["causal"], tgt_is_causal=True),
         masks={"causal": CAUSAL3}, amp=("float32",)),
    Case("transformer_batch_first_masks",
         lambda lib: lib.nn.Transformer(8, 2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=16,
                                        dropout=0.0, batch_first=True),
         {"src": ((2, 4, 8), -1, 1, True), "tgt": ((2, 3, 8), -1, 1, True)},
         lambda lib, m, t: m(t["src"], t["tgt"],
                             tgt_mask=lib.nn.Transformer.generate_square_subsequent_mask(3, device=t["src"].device),
                             src_key_padding_mask=t["pad"], memory_key_padding_mask=t["pad"]),
         masks={"pad": PAD}, amp=("float32",)),
    # transposed convolution: weight (C_in, C_out / groups, kH, kW)
    Case("conv_transpose2d_stride_output_padding",
         lambda lib: lib.nn.ConvTranspose2d(2, 3, 3, stride=2, padding=1, output_padding=1),
         {"x": ((2, 2, 4, 4), -1, 1, True)}, lambda lib, m, t: m(t["x"]), amp=("float16",)),
    Case("conv_transpose2d_groups_dilation_no_bias",
         lambda lib: lib.nn.ConvTranspose2d(4, 6, (2, 3), stride=(1, 2), padding=(0, 1), groups=2,
                                            dilation=(2, 1), bias=False),
         {"x": ((1, 4, 3, 3), -1, 1, True)}, lambda lib, m, t: m(t["x"]), amp=("float16",)),
    Case("conv_transpose2d_output_size_unbatched", lambda lib: lib.nn.ConvTranspose2d(2, 2, 3, stride=2, padding=1),
         {"x": ((2, 4, 4), -1, 1, True)}, lambda lib, m, t: m(t["x"], output_size=[8, 8]), amp=("float16",)),
]
