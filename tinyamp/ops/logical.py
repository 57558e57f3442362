"""Tests on values that give bool or index tensors, never gradients.

``all``/``any`` (over all elements or ``dim``), ``isnan``/``isinf``/``isfinite``
(the checks an AMP loop makes on a loss or a gradient), ``isclose``/``allclose``/
``equal`` and ``nonzero``. Their outputs are not floating, so the tape never
links them to their inputs. NEUTRAL: autocast leaves their inputs alone (an
overflow check must see the dtype that overflowed).
"""

from __future__ import annotations

from typing import Any, Sequence

from .. import dtypes as dt
from ..precision import NEUTRAL, PROMOTE
from ..autograd.function import Function
from ..tensor import Tensor
from .broadcast import broadcasting
from .broadcast import normalize_dims


class AllTrue(Function):
    """y = every element of x over dims is non-zero; bool, no gradient"""

    precision = NEUTRAL
    name = "all"

    def __init__(self, dim: Any = None, keepdim: bool = False) -> None:
        self.dim, self.keepdim = dim, keepdim

    def forward(self, xp: Any, x: Any) -> Any:
        return xp.all(x, axis=normalize_dims("all", self.dim, x.ndim), keepdims=self.keepdim)


class AnyTrue(Function):
    """y = some element of x over dims is non-zero; bool, no gradient"""

    precision = NEUTRAL
    name = "any"

    def __init__(self, dim: Any = None, keepdim: bool = False) -> None:
        self.dim, self.keepdim = dim, keepdim

    def forward(self, xp: Any, x: Any) -> Any:
        return xp.any(x, axis=normalize_dims("any", self.dim, x.ndim), keepdims=self.keepdim)


class IsNan(Function):
    """y = x is nan; bool, no gradient"""

    precision = NEUTRAL

    def forward(self, xp: Any, x: Any) -> Any:
        return xp.isnan(x)


class IsInf(Function):
    """y = x is +inf or -inf; bool, no gradient"""

    precision = NEUTRAL

    def forward(self, xp: Any, x: Any) -> Any:
        return xp.isinf(x)


class IsFinite(Function):
    """y = x is neither inf nor nan; bool, no gradient"""

    precision = NEUTRAL

    def forward(self, xp: Any, x: Any) -> Any:
        return xp.isfinite(x)


class IsClose(Function):
    """y = |a - b| <= atol + rtol * |b| (elementwise, broadcast); bool, no gradient"""

    precision = PROMOTE  # compare in the wider of the two dtypes, as PyTorch

    def __init__(self, rtol: float, atol: float, equal_nan: bool) -> None:
        self.rtol, self.atol, self.equal_nan = rtol, atol, equal_nan

    def forward(self, xp: Any, a: Any, b: Any) -> Any:
        return broadcasting("isclose", lambda u, v: xp.isclose(u, v, self.rtol, self.atol, self.equal_nan), a, b)


class Nonzero(Function):
    """i = the indices of the non-zero elements, one row per element (n, ndim); int64, no gradient"""

    precision = NEUTRAL

    def forward(self, xp: Any, x: Any) -> Any:
        return xp.stack(xp.nonzero(x), axis=1).astype(xp.int64) if x.ndim else \
            xp.zeros((int(bool(x)), 0), dtype=xp.int64)


def all(input: Tensor, dim: "int | Sequence[int] | None" = None, keepdim: bool = False) -> Tensor:  # noqa: A001,A002
    """True where every element (over ``dim``, or all of them) is non-zero."""
    return AllTrue(dim, keepdim)(input)


def any(input: Tensor, dim: "int | Sequence[int] | None" = None, keepdim: bool = False) -> Tensor:  # noqa: A001,A002
    """True where some element (over ``dim``, or any of them) is non-zero."""
    return AnyTrue(dim, keepdim)(input)


def isnan(input: Tensor) -> Tensor:  # noqa: A002 - torch names
    return IsNan()(input)


def isinf(input: Tensor) -> Tensor:  # noqa: A002
    return IsInf()(input)


def isfinite(input: Tensor) -> Tensor:  # noqa: A002
    return IsFinite()(input)


def isclose(input: Tensor, other: Tensor, rtol: float = 1e-05, atol: float = 1e-08,  # noqa: A002
            equal_nan: bool = False) -> Tensor:
    return IsClose(rtol, atol, equal_nan)(input, other)


def allclose(input: Tensor, other: Tensor, rtol: float = 1e-05, atol: float = 1e-08,  # noqa: A002
             equal_nan: bool = False) -> bool:
    """``isclose(...).all()`` as a Python bool (reads the result on the host)."""
    return bool(isclose(input, other, rtol, atol, equal_nan).all())


def equal(input: Tensor, other: Tensor) -> bool:  # noqa: A002
    """True when both have the same shape and the same elements (a Python bool)."""
    if not isinstance(input, Tensor) or not isinstance(other, Tensor):
        raise TypeError(f"equal: expected two Tensors, got {type(input).__name__} and {type(other).__name__}")
    return input.shape == other.shape and bool((input == other).all())


def nonzero(input: Tensor, *, as_tuple: bool = False) -> "Tensor | tuple":  # noqa: A002
    """Indices of the non-zero elements: an (n, ndim) int64 tensor, or one 1-D tensor per dim."""
    rows = Nonzero()(input)
    return tuple(rows[:, d] for d in range(rows.shape[1])) if as_tuple else rows


METHODS = {"all": all, "any": any, "isnan": isnan, "isinf": isinf, "isfinite": isfinite, "isclose": isclose,
           "allclose": allclose, "equal": equal, "nonzero": nonzero}
