"""PyTorch's legacy tensor types: ``torch.LongTensor``, ``torch.FloatTensor``, ... (CPU tensors of one dtype).

Each is a class whose call makes a tensor (``LongTensor([1, 2])`` from data,
``FloatTensor(2, 3)`` of that shape, zero-filled where PyTorch leaves it
uninitialised) and whose ``isinstance`` check asks for a CPU tensor of its
dtype, as PyTorch's do; ``x.type(torch.LongTensor)`` converts.
"""

from __future__ import annotations

from typing import Any

from .. import dtypes as dt
from ..factories import tensor, zeros
from ..tensor import Tensor


class _LegacyType(type):
    """The metaclass: calls make tensors, isinstance checks dtype and device."""

    dtype: Any

    def __call__(cls, *args: Any, device: Any = None) -> Tensor:
        if len(args) == 1 and not isinstance(args[0], int):
            return tensor(args[0], dtype=cls.dtype, device=device)
        if all(isinstance(a, int) for a in args):
            return zeros(*args, dtype=cls.dtype, device=device)
        raise TypeError(f"{cls.__name__}(): expected data (a list, array or Tensor) or sizes, got {args!r}")

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, Tensor) and obj.dtype == cls.dtype and obj.device.type == "cpu"

    def __repr__(cls) -> str:
        return f"<class 'tinyamp.{cls.__name__}'>"


def _legacy(name: str, numpy_dtype: Any) -> type:
    return _LegacyType(name, (), {"dtype": dt.as_public(numpy_dtype), "__module__": "tinyamp",
                                  "__doc__": f"A CPU tensor of {dt.dtype_name(numpy_dtype)} (``torch.{name}``)."})


FloatTensor = _legacy("FloatTensor", dt.float32)
DoubleTensor = _legacy("DoubleTensor", dt.float64)
HalfTensor = _legacy("HalfTensor", dt.float16)
BFloat16Tensor = _legacy("BFloat16Tensor", dt.bfloat16)
LongTensor = _legacy("LongTensor", dt.int64)
IntTensor = _legacy("IntTensor", dt.int32)
ShortTensor = _legacy("ShortTensor", dt.int16)
CharTensor = _legacy("CharTensor", dt.int8)
ByteTensor = _legacy("ByteTensor", dt.uint8)
BoolTensor = _legacy("BoolTensor", dt.bool_)

__all__ = ["FloatTensor", "DoubleTensor", "HalfTensor", "BFloat16Tensor", "LongTensor", "IntTensor", "ShortTensor",
           "CharTensor", "ByteTensor", "BoolTensor"]
