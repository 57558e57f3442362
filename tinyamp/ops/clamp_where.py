"""Elementwise ops that select values instead of computing new ones.

maximum, minimum, clamp, where and masked_fill: each output element is one of the inputs'
elements, so the gradient is routed (or split, on ties) rather than computed.
The masks that route it are built from the saved values, never differentiated.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import backend
from .. import dtypes as dt
from ..precision import NEUTRAL, PROMOTE
from ..autograd.function import Function
from ..tensor import Tensor
from .broadcast import broadcasting, sum_to
from .cast import cast
from .logical import nonzero


def _split_gradient(gy: Tensor, wins: Any, ties: Any, shapes: list) -> tuple:
    """Route ``gy`` to the first operand where it ``wins``, half each on ``ties``.

    PyTorch splits a tie evenly, so the two gradients still sum to ``gy``.
    """
    xp = gy.device.xp
    first = xp.where(ties, 0.5, xp.where(wins, 1.0, 0.0)).astype(gy.dtype)
    w_first, w_second = Tensor._wrap(first), Tensor._wrap((1 - first).astype(gy.dtype))
    return sum_to(gy * w_first, shapes[0]), sum_to(gy * w_second, shapes[1])


class Maximum(Function):
    """y = max(a, b); da = gy where a > b, db = gy where b > a, half each on ties"""

    precision = PROMOTE
    save_inputs = (0, 1)

    def forward(self, xp: Any, a: Any, b: Any) -> Any:
        return broadcasting("maximum", xp.maximum, a, b)

    def backward(self, gy: Tensor) -> tuple:
        a, b = self.saved_tensors
        return _split_gradient(gy, a.array > b.array, a.array == b.array, [a.shape, b.shape])


class Minimum(Function):
    """y = min(a, b); da = gy where a < b, db = gy where b < a, half each on ties"""

    precision = PROMOTE
    save_inputs = (0, 1)

    def forward(self, xp: Any, a: Any, b: Any) -> Any:
        return broadcasting("minimum", xp.minimum, a, b)

    def backward(self, gy: Tensor) -> tuple:
        a, b = self.saved_tensors
        return _split_gradient(gy, a.array < b.array, a.array == b.array, [a.shape, b.shape])


class Clamp(Function):
    """y = min(max(x, lo), hi); dx = gy where lo <= x <= hi (PyTorch's convention), else 0"""

    precision = NEUTRAL
    save_inputs = (0,)

    def __init__(self, min: "float | None", max: "float | None") -> None:  # noqa: A002 - torch names
        self.min, self.max = min, max

    def forward(self, xp: Any, x: Any) -> Any:
        # maximum/minimum (not clip) so NaN propagates, as torch.clamp does; the
        # bounds become scalars of x's dtype (NumPy turns bfloat16 with a float into float32),
        # kernel arguments on a GPU rather than arrays copied from the host on every call.
        y = x if self.min is None else xp.maximum(x, np.asarray(self.min, dtype=x.dtype)[()])
        return y if self.max is None else xp.minimum(y, np.asarray(self.max, dtype=x.dtype)[()])

    def backward(self, gy: Tensor) -> Tensor:
        (x,) = self.saved_tensors
        inside = x.device.xp.ones(x.shape, dtype=bool)
        if self.min is not None:
            inside &= x.array >= self.min
        if self.max is not None:
            inside &= x.array <= self.max
        return where(inside, gy, 0.0)


class Where(Function):
    """y = a where condition else b; da = gy where condition, db = gy elsewhere

    The bool condition is an argument, not an input: it is never cast by autocast,
    never asked for a gradient, and only ``a`` and ``b`` are promoted.
    """

    precision = PROMOTE

    def __init__(self, condition: Any) -> None:
        self.condition = condition

    def forward(self, xp: Any, a: Any, b: Any) -> Any:
        self.condition = xp.asarray(self.condition)  # a NumPy mask joins CuPy operands' device
        return broadcasting("where", xp.where, self.condition, a, b)

    def backward(self, gy: Tensor) -> tuple:
        a_shape, b_shape = self.input_shapes
        da = sum_to(where(self.condition, gy, 0.0), a_shape) if self.needs_input_grad[0] else None
        db = sum_to(where(self.condition, 0.0, gy), b_shape) if self.needs_input_grad[1] else None
        return da, db


def _condition_array(condition: Any) -> Any:
    """The bool array inside a Tensor or NumPy/CuPy array; anything else is an error."""
    array = condition.array if isinstance(condition, Tensor) else condition
    if not (hasattr(array, "dtype") and hasattr(array, "shape")):
        raise TypeError(f"where: condition must be a bool Tensor or array, got {type(condition).__name__}")
    if array.dtype != dt.bool_:
        raise TypeError(f"where: expected condition to be a boolean tensor, but got a tensor with dtype "
                        f"{dt.dtype_name(array.dtype)} (shape {list(array.shape)}); compare it first, "
                        f"e.g. ta.where(x > 0, a, b)")
    return array


def _bounds_are_numbers(op: str, *bounds: Any) -> None:
    for bound in bounds:
        if isinstance(bound, Tensor):
            raise TypeError(f"{op}: tensor bounds are not supported; use ta.maximum(x, low) and "
                            f"ta.minimum(x, high)")


def maximum(input: Any, other: Any) -> Tensor:  # noqa: A002 - torch names
    return Maximum()(input, other)


def minimum(input: Any, other: Any) -> Tensor:  # noqa: A002
    return Minimum()(input, other)


def clamp(input: Tensor, min: "float | None" = None, max: "float | None" = None) -> Tensor:  # noqa: A002
    """Limit ``input`` to [min, max]; either bound may be None (not both)."""
    if min is None and max is None:
        raise ValueError(f"clamp: at least one of 'min' or 'max' must not be None "
                         f"(input of shape {list(input.shape)}, {dt.dtype_name(input.dtype)})")
    _bounds_are_numbers("clamp", min, max)
    if input.dtype not in dt.FLOATING and (isinstance(min, float) or isinstance(max, float)):
        input = cast(input, dt.float32)  # int_tensor.clamp(0.5) is float32, as in PyTorch
    return Clamp(min, max)(input)


def clip(input: Tensor, min: "float | None" = None, max: "float | None" = None) -> Tensor:  # noqa: A002
    return clamp(input, min, max)


def clamp_min(input: Tensor, min: float) -> Tensor:  # noqa: A002
    return clamp(input, min=min)


def clamp_max(input: Tensor, max: float) -> Tensor:  # noqa: A002
    return clamp(input, max=max)


_ONLY_CONDITION = object()


def where(condition: Any, input: Any = _ONLY_CONDITION, other: Any = _ONLY_CONDITION) -> Any:  # noqa: A002
    """``input`` where ``condition`` (a bool Tensor or array) holds, else ``other``.

    ``where(condition)`` alone is ``nonzero(condition, as_tuple=True)``, as in PyTorch.
    """
    if input is _ONLY_CONDITION and other is _ONLY_CONDITION:
        return nonzero(condition, as_tuple=True)
    if input is _ONLY_CONDITION or other is _ONLY_CONDITION:
        raise TypeError("where: expected where(condition) or where(condition, input, other)")
    array = _condition_array(condition)
    if not isinstance(input, Tensor) and not isinstance(other, Tensor):
        # Two numbers: the first becomes a tensor on the condition's device (float32/int64 default).
        xp = backend.array_module(array)
        default = dt.float32 if isinstance(input, float) or isinstance(other, float) else dt.int64
        input = Tensor._wrap(xp.asarray(input, dtype=default))
    return Where(array)(input, other)


def masked_fill(input: Tensor, mask: Any, value: Any) -> Tensor:  # noqa: A002
    """``input`` with ``value`` where the bool ``mask`` (broadcast to ``input``) is True."""
    if isinstance(value, Tensor) and value.ndim != 0:
        raise ValueError(f"masked_fill only supports a 0-dimensional value tensor, got shape {list(value.shape)}")
    if isinstance(value, Tensor):
        value = cast(value, input.dtype) if value.dtype != input.dtype else value
    elif isinstance(value, float) and input.dtype not in dt.FLOATING:
        raise TypeError(f"masked_fill: cannot fill a {dt.dtype_name(input.dtype)} tensor with the float "
                        f"{value!r}; convert the tensor first (.float())")
    return where(mask, value, input)


def _where_method(self: Tensor, condition: Any, y: Any) -> Tensor:
    """``x.where(condition, y)`` is ``where(condition, x, y)``."""
    return where(condition, self, y)


METHODS = {"maximum": maximum, "minimum": minimum, "clamp": clamp, "clip": clip,
           "clamp_min": clamp_min, "clamp_max": clamp_max, "where": _where_method, "masked_fill": masked_fill}
