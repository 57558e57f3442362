"""Python operators on tensors: arithmetic (``+ - * / ** // % @``, unary ``-``), indexing and comparisons.

Arithmetic calls the ops through the package at call time (``tinyamp.ops.add``),
so it is recorded on the tape and follows the precision rules like any op.
Comparisons and ``& | ~`` give bool tensors and are never recorded: they have
no gradient. Tensors hash by identity, as in PyTorch (they key optimizer state).
"""

from __future__ import annotations

from typing import Any, Callable

import tinyamp

from . import backend
from . import dtypes as dt


class OperatorsMixin:
    """The operator half of :class:`tinyamp.Tensor`."""

    __slots__ = ()

    def __add__(self, other: Any) -> "Tensor":
        return tinyamp.ops.add(self, other)

    def __radd__(self, other: Any) -> "Tensor":
        return tinyamp.ops.add(other, self)

    def __sub__(self, other: Any) -> "Tensor":
        return tinyamp.ops.sub(self, other)

    def __rsub__(self, other: Any) -> "Tensor":
        return tinyamp.ops.sub(other, self)

    def __mul__(self, other: Any) -> "Tensor":
        return tinyamp.ops.mul(self, other)

    def __rmul__(self, other: Any) -> "Tensor":
        return tinyamp.ops.mul(other, self)

    def __truediv__(self, other: Any) -> "Tensor":
        return tinyamp.ops.div(self, other)

    def __rtruediv__(self, other: Any) -> "Tensor":
        return tinyamp.ops.div(other, self)

    def __pow__(self, other: Any) -> "Tensor":
        return tinyamp.ops.pow(self, other)

    def __rpow__(self, other: Any) -> "Tensor":
        return tinyamp.ops.pow(other, self)

    def __floordiv__(self, other: Any) -> "Tensor":
        return tinyamp.ops.floor_divide(self, other)

    def __rfloordiv__(self, other: Any) -> "Tensor":
        return tinyamp.ops.floor_divide(other, self)

    def __mod__(self, other: Any) -> "Tensor":
        return tinyamp.ops.remainder(self, other)

    def __rmod__(self, other: Any) -> "Tensor":
        return tinyamp.ops.remainder(other, self)

    def __matmul__(self, other: Any) -> "Tensor":
        return tinyamp.ops.matmul(self, other)

    def __rmatmul__(self, other: Any) -> "Tensor":
        return tinyamp.ops.matmul(other, self)

    def __neg__(self) -> "Tensor":
        return tinyamp.ops.neg(self)

    def __pos__(self) -> "Tensor":
        return self

    def __abs__(self) -> "Tensor":
        return tinyamp.ops.abs(self)

    def __iadd__(self, other: Any) -> "Tensor":
        return self.add_(other)

    def __isub__(self, other: Any) -> "Tensor":
        return self.sub_(other)

    def __imul__(self, other: Any) -> "Tensor":
        return self.mul_(other)

    def __itruediv__(self, other: Any) -> "Tensor":
        return self.div_(other)

    def __getitem__(self, key: Any) -> "Tensor":
        return tinyamp.ops.getitem(self, key)

    # Comparisons give bool tensors and never record (no gradient).
    def _compare(self, other: Any, ufunc: Callable) -> "Tensor":
        other_data = other.data if isinstance(other, OperatorsMixin) else other
        return tinyamp.Tensor._wrap(ufunc(self.data, other_data))

    def __eq__(self, other: Any) -> "Tensor":  # type: ignore[override]
        return self._compare(other, backend.array_module(self.data).equal)

    def __ne__(self, other: Any) -> "Tensor":  # type: ignore[override]
        return self._compare(other, backend.array_module(self.data).not_equal)

    def __lt__(self, other: Any) -> "Tensor":
        return self._compare(other, backend.array_module(self.data).less)

    def __le__(self, other: Any) -> "Tensor":
        return self._compare(other, backend.array_module(self.data).less_equal)

    def __gt__(self, other: Any) -> "Tensor":
        return self._compare(other, backend.array_module(self.data).greater)

    def __ge__(self, other: Any) -> "Tensor":
        return self._compare(other, backend.array_module(self.data).greater_equal)

    def __invert__(self) -> "Tensor":
        if self.dtype != dt.bool_:
            raise TypeError(f"~ is defined for bool tensors only, got {dt.dtype_name(self.dtype)}")
        return tinyamp.Tensor._wrap(~self.data)

    def __and__(self, other: Any) -> "Tensor":
        return self._compare(other, backend.array_module(self.data).logical_and)

    def __or__(self, other: Any) -> "Tensor":
        return self._compare(other, backend.array_module(self.data).logical_or)

    eq, ne, lt, le, gt, ge = __eq__, __ne__, __lt__, __le__, __gt__, __ge__
    __hash__ = object.__hash__  # identity, like PyTorch (tensors key optimizer state)
