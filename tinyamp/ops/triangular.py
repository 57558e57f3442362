"""Triangular parts of matrices: ``tril`` and ``triu`` (causal masks, batched over leading dims).

Both keep the elements on one side of a diagonal of the last two dims and zero
the rest; ``diagonal`` shifts that diagonal (0: the main one, k > 0: above
it, k < 0: below it), as PyTorch's. They are NEUTRAL, as in PyTorch's
autocast (no list names them): a mask moves no value between dtypes. Any
dtype works (bool masks included); the gradient is the same triangle of the
output's gradient.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes as dt
from ..precision import NEUTRAL
from ..autograd.function import Function
from ..tensor import Tensor


def _check_diagonal(op: str, diagonal: Any) -> int:
    if isinstance(diagonal, bool) or not isinstance(diagonal, (int, np.integer)):
        raise TypeError(f"{op}(): argument 'diagonal' must be int, not {type(diagonal).__name__}")
    return int(diagonal)


class _Triangle(Function):
    """The shared forward and backward of tril and triu."""

    precision = NEUTRAL
    upper = False

    def __init__(self, diagonal: int) -> None:
        self.diagonal = diagonal

    def forward(self, xp: Any, x: Any) -> Any:
        if x.ndim < 2:
            raise RuntimeError(f"{self.name}: input tensor must have at least 2 dimensions, got shape "
                               f"{list(x.shape)} ({dt.dtype_name(x.dtype)})")
        return (xp.triu if self.upper else xp.tril)(x, self.diagonal)

    def backward(self, gy: Tensor) -> Tensor:
        return type(self)(self.diagonal)(gy)


class Tril(_Triangle):
    """y = x where column - row <= diagonal, else 0; dx = tril(gy)"""

    precision = NEUTRAL


class Triu(_Triangle):
    """y = x where column - row >= diagonal, else 0; dx = triu(gy)"""

    precision = NEUTRAL
    upper = True


def tril(input: Tensor, diagonal: int = 0) -> Tensor:  # noqa: A002 - torch name
    """The lower triangle of the last two dims (on and below ``diagonal``), the rest zero."""
    return Tril(_check_diagonal("tril", diagonal))(input)


def triu(input: Tensor, diagonal: int = 0) -> Tensor:  # noqa: A002 - torch name
    """The upper triangle of the last two dims (on and above ``diagonal``), the rest zero."""
    return Triu(_check_diagonal("triu", diagonal))(input)


METHODS = {"tril": tril, "triu": triu}
