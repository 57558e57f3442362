"""Loss modules: hold a loss's options and call the matching op in ``forward(input, target)``.

A class ``weight`` (and ``pos_weight``) is registered as a buffer, so it follows
``model.to(device)`` and is saved with the state dict, as in PyTorch.
"""

from __future__ import annotations

from ..tensor import Tensor
from .module import Module
from ..ops.loss import cross_entropy, huber_loss, l1_loss, mse_loss, nll_loss, smooth_l1_loss
from ..ops.loss_binary import binary_cross_entropy, binary_cross_entropy_with_logits
from ..ops.loss_kl import kl_div

_REDUCTIONS = ("none", "mean", "sum")


class _Loss(Module):
    def __init__(self, reduction: str = "mean") -> None:
        super().__init__()
        if reduction not in _REDUCTIONS:
            raise ValueError(f"{reduction} is not a valid value for reduction; expected one of {_REDUCTIONS}")
        self.reduction = reduction

    def extra_repr(self) -> str:
        return "" if self.reduction == "mean" else f"reduction='{self.reduction}'"


class _WeightedLoss(_Loss):
    def __init__(self, weight: Tensor | None = None, reduction: str = "mean") -> None:
        super().__init__(reduction)
        self.register_buffer("weight", weight)


class CrossEntropyLoss(_WeightedLoss):
    """Softmax cross entropy between logits (N, C, ...) and class indices (N, ...) or probabilities."""

    def __init__(self, weight: Tensor | None = None, ignore_index: int = -100, reduction: str = "mean",
                 label_smoothing: float = 0.0) -> None:
        super().__init__(weight, reduction)
        if not 0.0 <= label_smoothing <= 1.0:
            raise ValueError(f"label_smoothing must be between 0.0 and 1.0, got {label_smoothing}")
        self.ignore_index, self.label_smoothing = ignore_index, label_smoothing

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002 - PyTorch's name
        return cross_entropy(input, target, weight=self.weight, ignore_index=self.ignore_index,
                                         reduction=self.reduction, label_smoothing=self.label_smoothing)


class NLLLoss(_WeightedLoss):
    """Negative log likelihood of class indices given log-probabilities."""

    def __init__(self, weight: Tensor | None = None, ignore_index: int = -100, reduction: str = "mean") -> None:
        super().__init__(weight, reduction)
        self.ignore_index = ignore_index

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return nll_loss(input, target, weight=self.weight, ignore_index=self.ignore_index,
                                     reduction=self.reduction)


class MSELoss(_Loss):
    """mean((input - target)^2)"""

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return mse_loss(input, target, reduction=self.reduction)


class L1Loss(_Loss):
    """mean(|input - target|)"""

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return l1_loss(input, target, reduction=self.reduction)


class HuberLoss(_Loss):
    """0.5 d^2 for |d| < delta, delta (|d| - 0.5 delta) beyond, d = input - target"""

    def __init__(self, reduction: str = "mean", delta: float = 1.0) -> None:
        super().__init__(reduction)
        self.delta = delta

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return huber_loss(input, target, reduction=self.reduction, delta=self.delta)


class SmoothL1Loss(_Loss):
    """0.5 d^2 / beta for |d| < beta, |d| - 0.5 beta beyond, d = input - target"""

    def __init__(self, size_average: None = None, reduce: None = None, reduction: str = "mean",
                 beta: float = 1.0) -> None:
        if size_average is not None or reduce is not None:
            raise TypeError("SmoothL1Loss: size_average and reduce are deprecated in PyTorch and not supported; "
                            "use reduction='none', 'mean' or 'sum'")
        super().__init__(reduction)
        self.beta = beta

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return smooth_l1_loss(input, target, reduction=self.reduction, beta=self.beta)


class BCELoss(_WeightedLoss):
    """Binary cross entropy of probabilities; prefer BCEWithLogitsLoss (it is autocast-safe)."""

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return binary_cross_entropy(input, target, weight=self.weight,
                                                 reduction=self.reduction)


class BCEWithLogitsLoss(_WeightedLoss):
    """Sigmoid + binary cross entropy in one numerically stable op."""

    def __init__(self, weight: Tensor | None = None, reduction: str = "mean",
                 pos_weight: Tensor | None = None) -> None:
        super().__init__(weight, reduction)
        self.register_buffer("pos_weight", pos_weight)

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002
        return binary_cross_entropy_with_logits(input, target, weight=self.weight,
                                                              pos_weight=self.pos_weight, reduction=self.reduction)


class KLDivLoss(Module):
    """``kl_div(input, target, reduction, log_target)``: input holds log-probabilities."""

    def __init__(self, size_average: None = None, reduce: None = None, reduction: str = "mean",
                 log_target: bool = False) -> None:
        super().__init__()
        if size_average is not None or reduce is not None:
            raise TypeError("KLDivLoss: size_average and reduce are deprecated in PyTorch and not supported; use "
                            "reduction=")
        self.reduction, self.log_target = reduction, log_target

    def forward(self, input: Tensor, target: Tensor) -> Tensor:  # noqa: A002 - torch names
        return kl_div(input, target, reduction=self.reduction, log_target=self.log_target)
