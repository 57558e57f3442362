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

# ------------------------------------------------ issue 31: vision layers, resampling, norms (porting wing)
X4 = {"x": ((2, 3, 5, 4), -2, 2, True)}


def _f(name: str, **kw: Any) -> Callable:
    """A call of ``lib.nn.functional.<name>(x, **kw)``."""
    return lambda lib, m, t: getattr(lib.nn.functional, name)(t["x"], **kw)


def _interp(**kw: Any) -> Callable:
    return _f("interpolate", **kw)


def _with_stats(lib: Any, m: Any, t: dict) -> tuple:
    """The output, then the running statistics the training call updated (no gradient)."""
    y = m(t["x"])
    return y, m.running_mean * 1, m.running_var * 1


def _none(lib: Any) -> None:
    return None


CASES += [
    Case("instance_norm2d_affine_running_stats", lambda lib: lib.nn.InstanceNorm2d(3, affine=True,
                                                                                  track_running_stats=True),
         X4, _with_stats, amp=("float32", "float32", "float32")),
    Case("instance_norm1d_plain", lambda lib: lib.nn.InstanceNorm1d(3, eps=1e-3), {"x": ((2, 3, 6), -2, 2, True)},
         lambda lib, m, t: m(t["x"]), amp=("float32",)),
    Case("instance_norm1d_unbatched_weight_only", lambda lib: lib.nn.InstanceNorm1d(3, affine=True, bias=False),
         {"x": ((3, 6), -2, 2, True)}, lambda lib, m, t: m(t["x"]), amp=("float32",)),
    Case("instance_norm3d", lambda lib: lib.nn.InstanceNorm3d(2, affine=True), {"x": ((2, 2, 3, 2, 4), -2, 2, True)},
         lambda lib, m, t: m(t["x"]), amp=("float32",)),
    Case("instance_norm_running_stats_eval", _none,
         {"x": ((2, 3, 4), -2, 2, True), "rm": ((3,), -1, 1, False), "rv": ((3,), 0.5, 1.5, False),
          "w": ((3,), -1, 1, True), "b": ((3,), -1, 1, True)},
         lambda lib, m, t: lib.nn.functional.instance_norm(t["x"], t["rm"], t["rv"], t["w"], t["b"],
                                                           use_input_stats=False), amp=("float32",)),
    # PyTorch's CUDA autocast: conv in float16, instance_norm on no list (float16 stays), upsampling in float32
    Case("conv_then_instance_norm", lambda lib: lib.nn.Sequential(lib.nn.Conv2d(3, 4, 3, padding=1),
                                                                  lib.nn.InstanceNorm2d(4, affine=True)),
         X4, lambda lib, m, t: m(t["x"]), amp=("float16",)),
    Case("conv_then_upsample_bilinear", lambda lib: lib.nn.Sequential(
        lib.nn.Conv2d(3, 2, 1), lib.nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)),
         X4, lambda lib, m, t: m(t["x"]), amp=("float32",)),
    Case("batch_norm3d_train", lambda lib: lib.nn.BatchNorm3d(2), {"x": ((3, 2, 2, 3, 2), -2, 2, True)},
         _with_stats, amp=("float32", "float32", "float32")),
    Case("batch_norm2d_weight_only", lambda lib: lib.nn.BatchNorm2d(3, bias=False), X4, lambda lib, m, t: m(t["x"]),
         amp=("float32",)),
    Case("sync_batch_norm_one_process", lambda lib: lib.nn.SyncBatchNorm(3), X4, _with_stats,
         amp=("float32", "float32", "float32")),
    Case("pixel_shuffle", lambda lib: lib.nn.PixelShuffle(2), {"x": ((2, 8, 3, 2), -1, 1, True)},
         lambda lib, m, t: m(t["x"]), amp=("float32",)),
    Case("pixel_shuffle_5d", _none, {"x": ((2, 1, 9, 2, 2), -1, 1, True)}, _f("pixel_shuffle", upscale_factor=3)),
    Case("pixel_unshuffle", lambda lib: lib.nn.PixelUnshuffle(2), {"x": ((2, 2, 4, 6), -1, 1, True)},
         lambda lib, m, t: m(t["x"]), amp=("float32",)),
    Case("reflection_pad2d", lambda lib: lib.nn.ReflectionPad2d((1, 2, 3, 0)), X4, lambda lib, m, t: m(t["x"]),
         amp=("float32",)),
    Case("reflection_pad1d_replication_pad1d", lambda lib: lib.nn.Sequential(lib.nn.ReflectionPad1d(2),
                                                                             lib.nn.ReplicationPad1d((0, 3))),
         {"x": ((2, 3, 5), -2, 2, True)}, lambda lib, m, t: m(t["x"])),
    Case("replication_pad2d", lambda lib: lib.nn.ReplicationPad2d(1), X4, lambda lib, m, t: m(t["x"])),
    Case("zero_pad2d_constant_pad1d", lambda lib: lib.nn.Sequential(lib.nn.ZeroPad2d((1, 0, 2, 1)),
                                                                    lib.nn.ConstantPad1d(1, 0.5)),
         X4, lambda lib, m, t: m(t["x"])),
    Case("upsample_nearest_scale2", lambda lib: lib.nn.Upsample(scale_factor=2), X4, lambda lib, m, t: m(t["x"]),
         amp=("float32",)),
    Case("upsampling_bilinear2d_size", lambda lib: lib.nn.UpsamplingBilinear2d(size=(7, 9)), X4,
         lambda lib, m, t: m(t["x"]), amp=("float32",)),
    Case("upsampling_nearest2d", lambda lib: lib.nn.UpsamplingNearest2d(scale_factor=3), X4,
         lambda lib, m, t: m(t["x"])),
    Case("interpolate_nearest_size", _none, X4, _interp(size=(7, 3))),
    Case("interpolate_nearest_fractional_scale", _none, X4, _interp(scale_factor=1.5)),
    Case("interpolate_nearest_exact", _none, X4, _interp(size=(7, 9), mode="nearest-exact")),
    Case("interpolate_bilinear_scale", _none, X4, _interp(scale_factor=2, mode="bilinear"), amp=("float32",)),
    Case("interpolate_bilinear_align_corners_down", _none, X4,
         _interp(size=(3, 3), mode="bilinear", align_corners=True)),
    Case("interpolate_bilinear_recompute_scale", _none, X4,
         _interp(scale_factor=1.7, mode="bilinear", recompute_scale_factor=True)),
    Case("interpolate_bicubic", _none, X4, _interp(size=(8, 6), mode="bicubic")),
    Case("interpolate_bicubic_align_corners", _none, X4, _interp(scale_factor=0.6, mode="bicubic",
                                                                 align_corners=True)),
    Case("interpolate_area", _none, X4, _interp(size=(3, 3), mode="area")),
    Case("interpolate_linear_1d", _none, {"x": ((2, 3, 5), -2, 2, True)}, _interp(size=8, mode="linear")),
    Case("interpolate_trilinear", _none, {"x": ((1, 2, 3, 2, 4), -2, 2, True)},
         _interp(scale_factor=(2, 1.5, 0.5), mode="trilinear")),
    Case("interpolate_nearest_3d_input", _none, {"x": ((2, 2, 5), -2, 2, True)}, _interp(scale_factor=2)),
    Case("local_response_norm_4d", lambda lib: lib.nn.LocalResponseNorm(3, alpha=0.5, beta=0.7, k=2.0),
         {"x": ((2, 5, 3, 2), -2, 2, True)}, lambda lib, m, t: m(t["x"]), amp=("float32",)),
    Case("local_response_norm_3d_even_size", _none, {"x": ((2, 6, 4), -2, 2, True)},
         _f("local_response_norm", size=4)),
]

# ------------------------------------------------ issue 31: functional forms and Tensor methods
IDX = np.array([[0, 2, 1, 0], [3, 3, 0, 1], [1, 0, 2, 3]])          # (3, 4) indices into dim 1 of a (3, 4)
ZEROS = np.array([[1.0, 0.0, 1.0, 1.0, 1.0], [0.0, 1.0, 0.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0, 1.0]])


def _relu_in_place(lib: Any, m: Any, t: dict) -> Any:
    y = t["x"] * 1
    lib.nn.functional.relu_(y)
    return y


def _scatter_in_place(lib: Any, m: Any, t: dict) -> Any:
    y = t["x"] * 2
    y.scatter_(1, t["i"][:, :2], t["src"][:, :2])
    return y


CASES += [
    Case("flip_dims", _none, {"x": ((2, 3, 4), -1, 1, True)}, lambda lib, m, t: lib.flip(t["x"], (0, 2)),
         amp=("float32",)),
    Case("flip_method_fliplr", _none, {"x": ((3, 4), -1, 1, True)},
         lambda lib, m, t: (t["x"].flip(1, 0), lib.fliplr(t["x"]), lib.flipud(t["x"]))),
    Case("median_all_even_count", _none, {"x": ((3, 4), -1, 1, True)}, lambda lib, m, t: t["x"].median(),
         amp=("float32",)),
    Case("median_dim", _none, {"x": ((3, 5, 2), -1, 1, True)}, lambda lib, m, t: lib.median(t["x"], 1),
         amp=("float32", "int64")),
    Case("median_dim_keepdim_even", _none, {"x": ((4, 6), -1, 1, True)},
         lambda lib, m, t: t["x"].median(dim=-1, keepdim=True)),
    Case("einsum_batched_matmul", _none, {"a": ((2, 3, 4), -1, 1, True), "b": ((2, 4, 5), -1, 1, True)},
         lambda lib, m, t: lib.einsum("bij,bjk->bik", t["a"], t["b"]), amp=("float16",)),
    Case("einsum_attention_ellipsis_implicit", _none,
         {"q": ((2, 2, 3, 4), -1, 1, True), "k": ((2, 2, 5, 4), -1, 1, True)},
         lambda lib, m, t: (lib.einsum("...qd,...kd->...qk", t["q"], t["k"]),
                            lib.einsum("...ij,kj", t["q"], t["k"][0, 0]))),
    Case("einsum_outer_trace_list", _none, {"a": ((3,), -1, 1, True), "b": ((4,), -1, 1, True),
                                            "c": ((3, 4), -1, 1, True)},
         lambda lib, m, t: (lib.einsum("i,j->ij", [t["a"], t["b"]]), lib.einsum("ij->", t["c"]),
                            lib.einsum("i,ij,j->i", t["a"], t["c"], t["b"]))),
    Case("gather_dim1", _none, {"x": ((3, 4), -1, 1, True)}, lambda lib, m, t: lib.gather(t["x"], 1, t["i"]),
         masks={"i": IDX}, amp=("float32",)),
    Case("gather_dim0_smaller_index_method", _none, {"x": ((4, 5), -1, 1, True)},
         lambda lib, m, t: t["x"].gather(0, t["i"][:2, :3]), masks={"i": IDX}),
    Case("scatter_src_and_value", _none, {"x": ((3, 4), -1, 1, True), "src": ((3, 4), -1, 1, True)},
         lambda lib, m, t: (lib.scatter(t["x"], 1, t["i"][:, :1], t["src"][:, :1]),
                            t["x"].scatter(0, t["i"][:1], 2.5)),
         masks={"i": IDX}),
    Case("scatter_add_repeats", _none, {"x": ((3, 4), -1, 1, True), "src": ((3, 4), -1, 1, True)},
         lambda lib, m, t: lib.scatter_add(t["x"], 1, t["i"], t["src"]), masks={"i": IDX}, amp=("float32",)),
    Case("scatter_in_place_method", _none, {"x": ((3, 4), -1, 1, True), "src": ((3, 4), -1, 1, True)},
         _scatter_in_place, masks={"i": np.array([[0, 2], [3, 1], [1, 0]])}),
    Case("prod_all_and_dims", _none, {"x": ((3, 5), 0.5, 1.5, True)},
         lambda lib, m, t: (t["x"].prod(), lib.prod(t["x"], 1), t["x"].prod(0, keepdim=True)), amp=("float32",) * 3),
    Case("prod_with_zeros", _none, {"x": ((3, 5), -1.5, 1.5, True)},
         lambda lib, m, t: ((t["x"] * t["z"]).prod(1), (t["x"] * t["z"]).prod()), masks={"z": ZEROS}),
    Case("kl_div_batchmean", _none, {"x": ((3, 4), -3, -0.1, True), "t": ((3, 4), 0.0, 1.0, True)},
         lambda lib, m, t: lib.nn.functional.kl_div(t["x"], t["t"], reduction="batchmean"), amp=("float32",)),
    Case("kl_div_log_target_none_and_sum", _none, {"x": ((2, 5), -3, -0.1, True), "t": ((2, 5), -3, -0.1, True)},
         lambda lib, m, t: (lib.nn.functional.kl_div(t["x"], t["t"], reduction="none", log_target=True),
                            lib.nn.functional.kl_div(t["x"], t["t"], reduction="sum", log_target=True))),
    Case("kl_div_zero_target_module", lambda lib: lib.nn.KLDivLoss(reduction="sum"),
         {"x": ((2, 5), -3, -0.1, True), "t": ((2, 5), 0.0, 1.0, True)},
         lambda lib, m, t: m(t["x"], t["t"] * t["z"][:2]), masks={"z": ZEROS}),
    Case("relu_in_place_functional", _none, {"x": ((3, 4), -1, 1, True)}, _relu_in_place),
    Case("reshape_shape_keyword", _none, {"x": ((3, 4), -1, 1, True)},
         lambda lib, m, t: t["x"].reshape(shape=(2, 6)) * t["x"].nelement()),
]
