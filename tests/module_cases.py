"""Module cases compared with PyTorch: one definition run by both libraries.

Each case builds a module and calls it through a library handed in as ``lib``
(``torch`` in ``tests/make_module_references.py``, which records PyTorch's
results once; ``tinyamp`` in ``tests/test_modules_vs_torch.py``). The same
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
]
