"""Flatten: merge a range of dimensions into one (by default all but the batch dimension)."""

from __future__ import annotations

from ..tensor import Tensor
from .module import Module
from ..ops.shape import flatten


class Flatten(Module):
    """``Flatten(start_dim=1, end_dim=-1)``: (N, C, H, W) -> (N, C*H*W)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x: Tensor) -> Tensor:
        return flatten(x, self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"
