"""The stand-in ndarray's operators, NumPy ufunc protocol, pickling and value methods.

They call the ufuncs and functions of ``_routines.py``, which build ndarrays,
so they are attached to the class here, after both modules exist (the
package's ``__init__`` imports this module). The operators follow CuPy's
``__add__``/``__richcmp__``: a stand-in array or a scalar operand runs the
ufunc; an operand that opted out of NumPy's ufuncs (``__array_ufunc__ =
None``, as tinyamp's Tensor does) gets ``NotImplemented`` so its reflected
operator runs; anything else reaches the ufunc and its ``TypeError``.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from . import _routines
from ._array import ndarray


def _defers(other: Any) -> bool:
    """NEP 13 as CuPy applies it: give way to an operand that opted out of ufuncs (``__array_ufunc__ = None``)."""
    return getattr(type(other), "__array_ufunc__", False) is None


def _binary(function: Callable) -> Callable:
    def method(self: ndarray, other: Any) -> Any:
        if type(other) is not ndarray and _defers(other):
            return NotImplemented
        return function(self, other)
    return method


def _reflected(function: Callable) -> Callable:
    def method(self: ndarray, other: Any) -> Any:
        if _defers(other):
            return NotImplemented
        return function(other, self)
    return method


def _inplace(function: Callable) -> Callable:
    def method(self: ndarray, other: Any) -> ndarray:
        return function(self, other, out=self)
    return method


def _equal(self: ndarray, other: Any) -> Any:
    if other is None or (type(other).__eq__ is object.__eq__ and type(other) is not ndarray):
        return _routines.zeros(self.shape, dtype=np.bool_)  # CuPy: never equal to an arbitrary object
    if type(other) is not ndarray and _defers(other):
        return NotImplemented
    return _routines.equal(self, other)


def _not_equal(self: ndarray, other: Any) -> Any:
    if other is None or (type(other).__eq__ is object.__eq__ and type(other) is not ndarray):
        return _routines.ones(self.shape, dtype=np.bool_)
    if type(other) is not ndarray and _defers(other):
        return NotImplemented
    return _routines.not_equal(self, other)


def _array_ufunc(self: ndarray, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
    """``numpy.exp(x)`` and ``numpy_array + x`` run the stand-in's ufunc (which refuses NumPy arrays)."""
    func = getattr(_routines, ufunc.__name__, None)
    if not isinstance(func, _routines.ufunc):
        return NotImplemented
    if "out" in kwargs:
        out = kwargs["out"]
        if len(out) != 1:
            raise ValueError("The 'out' parameter must have exactly one array value")
        kwargs["out"] = out[0]
    if method == "__call__":
        return func(*inputs, **kwargs)
    if method == "at":
        return func.at(*inputs, **kwargs)
    return NotImplemented


def _reduce(self: ndarray) -> tuple:
    """Pickled through the host, as CuPy does (a device-to-host copy)."""
    return _routines.array, (self.get(order="A"),)


def _method(function: Callable) -> Callable:
    def method(self: ndarray, *args: Any, **kwargs: Any) -> Any:
        return function(self, *args, **kwargs)
    method.__name__ = function.__name__
    return method


_BINARY = {"add": _routines.add, "sub": _routines.subtract, "mul": _routines.multiply,
           "truediv": _routines.true_divide, "floordiv": _routines.floor_divide, "mod": _routines.remainder,
           "pow": _routines.power, "and": _routines.bitwise_and, "or": _routines.bitwise_or,
           "xor": _routines.bitwise_xor, "lshift": _routines.left_shift, "rshift": _routines.right_shift}
for _name, _function in _BINARY.items():
    setattr(ndarray, f"__{_name}__", _binary(_function))
    setattr(ndarray, f"__r{_name}__", _reflected(_function))
    setattr(ndarray, f"__i{_name}__", _inplace(_function))
ndarray.__matmul__, ndarray.__rmatmul__ = _binary(_routines.matmul), _reflected(_routines.matmul)
ndarray.__lt__, ndarray.__le__ = _binary(_routines.less), _binary(_routines.less_equal)
ndarray.__gt__, ndarray.__ge__ = _binary(_routines.greater), _binary(_routines.greater_equal)
ndarray.__eq__, ndarray.__ne__ = _equal, _not_equal  # type: ignore[method-assign,assignment]
ndarray.__neg__ = lambda self: _routines.negative(self)
ndarray.__pos__ = lambda self: _routines.positive(self)
ndarray.__abs__ = lambda self: _routines.absolute(self)
ndarray.__invert__ = lambda self: _routines.invert(self)
ndarray.__array_ufunc__ = _array_ufunc
ndarray.__reduce__ = _reduce  # type: ignore[method-assign,assignment]
for _name, _function in _routines.ARRAY_METHODS.items():
    setattr(ndarray, _name, _method(_function))
