"""Binary cross-entropy losses: on probabilities and (the safe one) on logits.

``binary_cross_entropy`` takes probabilities ``x`` in [0, 1] and clamps each log
at -100 as PyTorch does. It is the one op that refuses to run under float16
autocast: its gradient ``(x - t) / (x (1 - x))`` is enormous for ``x`` near 0 or
1, and autocast's cast is reversed in backward, so that gradient goes back into
float16, where it overflows or flushes to zero. Upcasting the forward does not
help. ``binary_cross_entropy_with_logits`` fuses the sigmoid into the loss (its
gradient is ``sigmoid(x) - t``, always in [-1, 1]) and is safe; under bfloat16
autocast (float32's exponent range) both are allowed.

Both are FP32-tagged; outside autocast, float16/bfloat16 inputs are computed,
forward and backward, in float32 and rounded once. ``weight`` and ``pos_weight``
are constants (no gradient); ``input`` and ``target`` are differentiable.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import backend
from .. import dtypes as dt
from ..precision import FP32, current_autocast
from ..autograd.function import Function
from ..tensor import Tensor
from .activation import sigmoid, softplus
from .cast import cast
from .elementwise import log
from .loss import check_constant, check_reduction, describe, reduce_loss, scale_grad
from .clamp_where import clamp_min

_UNSAFE_MESSAGE = (
    "binary_cross_entropy is unsafe under float16 autocast: its gradient (x - t) / (x * (1 - x)) "
    "is huge for probabilities near 0 or 1, and the float32 cast autocast puts in front of it is "
    "undone in backward, so that gradient comes back in float16, where it overflows to inf or "
    "underflows to 0. Compute the loss from the logits instead, with "
    "binary_cross_entropy_with_logits (it fuses the sigmoid, its gradient is sigmoid(x) - t, and "
    "it is safe to autocast), or call binary_cross_entropy on float32 inputs inside "
    "autocast(enabled=False). (bfloat16 autocast allows it: bfloat16 has float32's range.)"
)


def _check_pair(op: str, x: Any, t: Any, extras: dict) -> None:
    """Target of the input's shape and dtype; floating weights that broadcast to the input's shape.

    The weights may have any floating dtype: they are applied in the compute
    dtype, as PyTorch multiplies them into the loss in place.
    """
    if t.shape != x.shape:
        raise ValueError(f"{op}: target shape {list(t.shape)} and input shape {list(x.shape)} "
                         f"differ; tinyamp does not broadcast a loss")
    if x.dtype not in dt.FLOATING or t.dtype != x.dtype:
        raise TypeError(f"{op}: input and target must share one floating dtype (PyTorch refuses a mix "
                        f"too), got {describe(x)} and {describe(t)}; cast one, e.g. target.to(input.dtype)")
    for name, w in extras.items():
        if w is None:
            continue
        try:
            fits = np.broadcast_shapes(w.shape, x.shape) == x.shape
        except ValueError:
            fits = False
        if w.dtype not in dt.FLOATING or not fits:
            raise ValueError(f"{op}: {name} {describe(w)} must be floating and "
                             f"broadcast to the input's shape {describe(x)}")


def _upcast(t: "Tensor | None") -> "Tensor | None":
    """float16/bfloat16 -> float32 (recorded), so tiny clamps like 1e-12 stay representable."""
    return cast(t, dt.float32) if t is not None and dt.is_low_precision(t.dtype) else t


class BinaryCrossEntropy(Function):
    """y = -w (t max(log x, -100) + (1 - t) max(log(1 - x), -100)); dx = gy w (x - t) / max(x (1 - x), 1e-12)

    dt = gy w (max(log(1 - x), -100) - max(log x, -100)), the clamps of the forward
    (PyTorch's dt = -gy w logit(x) is unclamped: +-inf at x = 0 or 1).
    """

    precision = FP32
    name = "binary_cross_entropy"

    def __init__(self, weighted: bool, reduction: str) -> None:
        self.weighted, self.reduction = weighted, reduction
        self.save_inputs = (0, 1, 2) if weighted else (0, 1)

    def __call__(self, *args: Any) -> Any:
        state = current_autocast()
        if state is not None and state.dtype == dt.float16:
            raise RuntimeError(_UNSAFE_MESSAGE)
        return super().__call__(*args)

    def forward(self, xp: Any, x: Any, t: Any, w: Any = None) -> Any:
        _check_pair(self.name, x, t, {"weight": w})
        outside = ~((x >= 0) & (x <= 1))
        if backend.to_host(outside.any()):  # one host sync on a GPU, for a clear error
            value = float(backend.to_host(x[outside].reshape(-1)[:1].astype(xp.float64))[0])
            raise ValueError(f"binary_cross_entropy: all elements of input should be between 0 and 1 "
                             f"(probabilities; use binary_cross_entropy_with_logits on logits), "
                             f"found {value} in input {describe(x)}")
        cdt = dt.opmath_dtype(x.dtype)
        xf, tf = x.astype(cdt, copy=False), t.astype(cdt, copy=False)
        with np.errstate(divide="ignore"):  # log(0) = -inf, then clamped to -100 as PyTorch
            log_x = xp.maximum(xp.log(xf), -100)
            log_1mx = xp.maximum(xp.log(1 - xf), -100)
        loss = -(tf * log_x + (1 - tf) * log_1mx)
        if w is not None:
            loss = loss * w.astype(cdt, copy=False)
        self.size = x.size
        return reduce_loss(xp, loss, self.reduction, x.dtype)

    def backward(self, gy: Tensor) -> tuple:
        saved = self.saved_tensors
        x, t = saved[0], saved[1]
        xc, tc, g = _upcast(x), _upcast(t), _upcast(scale_grad(gy, self.reduction, self.size))
        if self.weighted:
            g = g * _upcast(saved[2])
        gx = gt = None
        if self.needs_input_grad[0]:
            gx = cast(g * (xc - tc) / clamp_min(xc * (1 - xc), 1e-12), x.dtype)
        if self.needs_input_grad[1]:
            gt = cast(g * (clamp_min(log(1 - xc), -100.0) - clamp_min(log(xc), -100.0)), t.dtype)
        return (gx, gt) + ((None,) if self.weighted else ())


class BinaryCrossEntropyWithLogits(Function):
    """y = w ((1 - t) x + (1 + (pw - 1) t) softplus(-x)); dx = gy w ((1 + (pw - 1) t) sigmoid(x) - pw t)"""

    precision = FP32
    name = "binary_cross_entropy_with_logits"
    promoted_inputs = slice(0, 2)  # logits and target: float16 logits with a float32 target is float32

    def __init__(self, weighted: bool, pos_weighted: bool, reduction: str) -> None:
        self.weighted, self.pos_weighted, self.reduction = weighted, pos_weighted, reduction
        self.save_inputs = tuple(range(2 + weighted + pos_weighted))

    def _extras(self, rest: tuple) -> tuple:
        """(weight, pos_weight) from the inputs after input and target."""
        rest = list(rest)
        w = rest.pop(0) if self.weighted else None
        pw = rest.pop(0) if self.pos_weighted else None
        return w, pw

    def forward(self, xp: Any, x: Any, t: Any, *rest: Any) -> Any:
        w, pw = self._extras(rest)
        _check_pair(self.name, x, t, {"weight": w, "pos_weight": pw})
        cdt = dt.opmath_dtype(x.dtype)
        xf, tf = x.astype(cdt, copy=False), t.astype(cdt, copy=False)
        # softplus(-x) = log(1 + exp(-x)), written so that exp never overflows.
        softplus_neg = xp.log1p(xp.exp(-xp.abs(xf))) + xp.maximum(-xf, 0)
        if pw is not None:
            softplus_neg = (1 + (pw.astype(cdt, copy=False) - 1) * tf) * softplus_neg
        loss = (1 - tf) * xf + softplus_neg
        if w is not None:
            loss = loss * w.astype(cdt, copy=False)
        self.size = x.size
        return reduce_loss(xp, loss, self.reduction, x.dtype)

    def backward(self, gy: Tensor) -> tuple:
        saved = self.saved_tensors
        x, t = saved[0], saved[1]
        w, pw = (_upcast(s) for s in self._extras(saved[2:]))
        xc, tc, g = _upcast(x), _upcast(t), _upcast(scale_grad(gy, self.reduction, self.size))
        if w is not None:
            g = g * w
        gx = gt = None
        if self.needs_input_grad[0]:
            if pw is None:
                gx = g * (sigmoid(xc) - tc)
            else:
                gx = g * ((1 + (pw - 1) * tc) * sigmoid(xc) - pw * tc)
            gx = cast(gx, x.dtype)
        if self.needs_input_grad[1]:
            gt = -xc if pw is None else (pw - 1) * softplus(-xc) - xc
            gt = cast(g * gt, t.dtype)
        return (gx, gt) + (None,) * (self.weighted + self.pos_weighted)


def binary_cross_entropy(input: Tensor, target: Tensor, weight: "Tensor | None" = None,  # noqa: A002
                         reduction: str = "mean") -> Tensor:
    """Binary cross-entropy of probabilities ``input`` in [0, 1]; refused under float16 autocast."""
    check_reduction("binary_cross_entropy", reduction)
    check_constant("binary_cross_entropy", "weight", weight)
    op = BinaryCrossEntropy(weight is not None, reduction)
    return op(input, target) if weight is None else op(input, target, weight)


def binary_cross_entropy_with_logits(input: Tensor, target: Tensor,  # noqa: A002
                                     weight: "Tensor | None" = None, reduction: str = "mean",
                                     pos_weight: "Tensor | None" = None) -> Tensor:
    """Binary cross-entropy of ``sigmoid(input)``, computed stably from the logits."""
    op_name = "binary_cross_entropy_with_logits"
    check_reduction(op_name, reduction)
    check_constant(op_name, "weight", weight)
    check_constant(op_name, "pos_weight", pos_weight)
    extras = [e for e in (weight, pos_weight) if e is not None]
    return BinaryCrossEntropyWithLogits(weight is not None, pos_weight is not None,
                                        reduction)(input, target, *extras)


METHODS: dict = {}  # functions only (torch.nn.functional), not Tensor methods
