"""``kl_div``: the Kullback-Leibler divergence of ``target`` from ``exp(input)`` (input holds log-probabilities).

Pointwise ``target * (log(target) - input)`` (0 where target is 0), or with
``log_target=True`` ``exp(target) * (target - input)``; reduced by ``"mean"``
(over every element, with PyTorch's warning that ``"batchmean"`` is the
divergence), ``"batchmean"`` (sum / batch size), ``"sum"`` or ``"none"``. FP32 under
autocast, as on PyTorch's CUDA list; 16-bit inputs are computed in float32 and
rounded once. Gradients: dinput = -target (or -exp(target)), dtarget =
log(target) + 1 - input (-inf at 0, as PyTorch; or exp(target) (target - input + 1)), in tinyamp ops.
"""

from __future__ import annotations

import warnings
from typing import Any

from .. import dtypes as dt
from ..precision import FP32
from ..autograd.function import Function
from ..tensor import Tensor
from .elementwise import exp, log
from .loss import describe

_MEAN_WARNING = ("reduction: 'mean' divides the total loss by both the batch size and the support size."
                 "'batchmean' divides only by the batch size, and aligns with the KL div math definition."
                 "'mean' will be changed to behave the same as 'batchmean' in the next major release.")


class KLDiv(Function):
    """y = t (log t - x) (0 where t = 0), or e^t (t - x) with log_target; dx = -t (-e^t), dt = log t + 1 - x"""

    precision = FP32
    promoted_inputs = slice(0, 2)
    save_inputs = (0, 1)
    name = "kl_div"

    def __init__(self, log_target: bool) -> None:
        self.log_target = log_target

    def forward(self, xp: Any, x: Any, t: Any) -> Any:
        if x.shape != t.shape:
            raise ValueError(f"kl_div: input shape {list(x.shape)} and target shape {list(t.shape)} differ; "
                             f"tinyamp does not broadcast a loss")
        if x.dtype not in dt.FLOATING:
            raise TypeError(f"kl_div: input and target must be floating tensors, got {describe(x)} and "
                            f"{describe(t)}")
        cdt = dt.opmath_dtype(x.dtype)
        xf, tf = x.astype(cdt, copy=False), t.astype(cdt, copy=False)
        if self.log_target:
            y = xp.exp(tf) * (tf - xf)
        else:
            positive = tf > 0
            y = xp.where(positive, tf * (xp.log(xp.where(positive, tf, 1)) - xf), -tf * xf)
        return y.astype(x.dtype, copy=False)

    def backward(self, gy: Tensor) -> tuple:
        x, t = self.saved_tensors
        if self.log_target:
            et = exp(t)
            gx, gt = -et, et * (t - x + 1)
        else:
            gx, gt = -t, log(t) + 1 - x  # -inf at t = 0, as PyTorch's
        return (gy * gx if self.needs_input_grad[0] else None,
                gy * gt if self.needs_input_grad[1] else None)


def kl_div(input: Tensor, target: Tensor, size_average: "bool | None" = None,  # noqa: A002 - torch name
           reduce: "bool | None" = None, reduction: str = "mean", log_target: bool = False) -> Tensor:
    """``torch.nn.functional.kl_div``; ``size_average``/``reduce`` are refused (deprecated in PyTorch)."""
    if size_average is not None or reduce is not None:
        raise TypeError("kl_div: size_average and reduce are deprecated in PyTorch and not supported; use "
                        "reduction='none', 'batchmean', 'sum' or 'mean'")
    if reduction not in ("none", "batchmean", "sum", "mean"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    if reduction == "mean":
        warnings.warn(_MEAN_WARNING, UserWarning, stacklevel=2)
    loss = KLDiv(bool(log_target))(input, target)
    if reduction == "none":
        return loss
    if reduction == "batchmean":
        return loss.sum() / input.shape[0] if input.ndim else loss.sum()
    return loss.sum() if reduction == "sum" else loss.mean()


METHODS: dict = {}
