"""Dropout, Dropout1d, Dropout2d: zero each element (or whole channel) with probability p in training,
scale the rest by 1/(1-p)."""

from __future__ import annotations

from ..tensor import Tensor
from .module import Module
from ..ops.dropout import dropout, dropout1d, dropout2d


class Dropout(Module):
    """Active in ``train()`` mode, the identity in ``eval()`` mode."""

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p, self.inplace = float(p), inplace

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


class Dropout1d(Dropout):
    """Zeroes whole channels of (N, C, L) or (C, L) inputs."""

    def forward(self, x: Tensor) -> Tensor:
        return dropout1d(x, self.p, self.training, self.inplace)


class Dropout2d(Dropout):
    """Zeroes whole channels of (N, C, H, W) or (C, H, W) inputs."""

    def forward(self, x: Tensor) -> Tensor:
        return dropout2d(x, self.p, self.training, self.inplace)
