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
]
