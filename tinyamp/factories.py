"""Tensor factories: ``tensor``, ``zeros``, ``ones``, ``full``, ``arange``, random ones.

Defaults follow PyTorch: Python floats become float32, ints int64, bools bool;
NumPy arrays keep their dtype. ``device`` picks the array module; without one,
``ta.set_default_device``'s device (the CPU unless set). The
``Tensor.new_*`` methods (``x.new_zeros(2, 3)``) are here too (``METHODS``).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from . import backend
from . import dtypes as dt
from .random import Generator, default_generator
from .tensor import Tensor


def _default_dtype(read: np.ndarray) -> np.dtype:
    """PyTorch's inference for Python data, from NumPy's reading of it: any float -> float32, else int64 / bool."""
    if read.dtype.kind == "f":
        return dt.float32
    if read.dtype.kind in "iu":
        return dt.int64
    return read.dtype


def _to_array(data: Any, dtype: "np.dtype | None", device: backend.Device) -> Any:
    if isinstance(data, Tensor):
        data = data.array
    if backend.is_cupy_array(data):
        data = backend.to_host(data) if device.type == "cpu" else data
    elif isinstance(data, (list, tuple)) and any(isinstance(x, Tensor) for x in _flatten(data)):
        data = [_tensor_item(x) for x in data]
    if isinstance(data, np.ndarray) or backend.is_cupy_array(data):
        stored = dt.checked_array_dtype(data.dtype)
        dtype = stored if dtype is None else dtype
    else:
        # Python numbers, nested lists, NumPy scalars: read them once to check what
        # they hold, before NumPy would parse "1.5" as a float or keep a None.
        read = _read_python_data(data)
        dtype = _default_dtype(read) if dtype is None else dtype
    if isinstance(data, np.ndarray) or not backend.is_cupy_array(data):
        array = np.array(data, dtype=dtype)  # a copy, as torch.tensor copies
    else:
        array = data.astype(dtype, copy=True)
    return backend.to_device(array, device)


def _read_python_data(data: Any) -> np.ndarray:
    """NumPy's reading of Python data, refusing what a tensor cannot hold (PyTorch's errors)."""
    try:
        read = np.asarray(data)
    except ValueError as exc:  # ragged nesting: [[1, 2], [3]]
        raise ValueError(f"ta.tensor: nested sequences of different lengths cannot form a tensor ({exc})") from None
    kind = read.dtype.kind
    if kind in "US":
        raise TypeError(f"ta.tensor: invalid data type '{_first_bad_type(data)}': tensors hold numbers and bools")
    if kind == "c":
        raise TypeError("ta.tensor: complex numbers are not supported: tinyamp has no complex dtypes "
                        "(keep the real and imaginary parts in two tensors)")
    if kind == "O":
        bad = _first_bad_type(data)
        if bad == "int":  # NumPy keeps integers beyond 64 bits as Python objects
            raise RuntimeError("ta.tensor: Overflow when unpacking long: an integer does not fit in 64 bits")
        raise RuntimeError(f"ta.tensor: Could not infer dtype of {bad}: tensors hold numbers and bools")
    dt.checked_array_dtype(read.dtype)  # np.longdouble values, dates, ...
    return read


def _first_bad_type(data: Any) -> str:
    """The type name of the first element that is not a number or a bool (``'int'`` for a too-large int)."""
    for x in _flatten(data) if isinstance(data, (list, tuple)) else [data]:
        if isinstance(x, int) and not -2 ** 63 <= x < 2 ** 64:
            return "int"
        if not isinstance(x, (bool, int, float, np.bool_, np.integer, np.floating, np.ndarray)):
            return type(x).__name__
    return type(data).__name__


def _flatten(data: Any) -> list:
    out = []
    for x in data:
        out.extend(_flatten(x) if isinstance(x, (list, tuple)) else [x])
    return out


def _tensor_item(x: Any) -> Any:
    if isinstance(x, Tensor):
        return backend.to_host(x.array)
    if isinstance(x, (list, tuple)):
        return [_tensor_item(y) for y in x]
    return x


def _resolve(dtype: Any, device: Any) -> tuple["np.dtype | None", backend.Device]:
    return (None if dtype is None else dt.as_dtype(dtype),
            backend.get_default_device() if device is None else backend.Device(device))


def tensor(data: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    """A new leaf tensor holding a copy of ``data``."""
    dtype, device = _resolve(dtype, device)
    return Tensor(_to_array(data, dtype, device), requires_grad=requires_grad)


def as_tensor(data: Any, dtype: Any = None, device: Any = None) -> Tensor:
    if isinstance(data, Tensor) and dtype is None and device is None:
        return data
    return tensor(data, dtype, device)


def from_numpy(array: np.ndarray) -> Tensor:
    """A tensor sharing memory with ``array`` (a copy only for a non-native byte order)."""
    return Tensor(np.asarray(array))


def _size(size: tuple) -> tuple:
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        return tuple(size[0])
    return tuple(size)


def _filled(size: tuple, fill: Any, dtype: Any, device: Any, requires_grad: bool) -> Tensor:
    dtype, device = _resolve(dtype, device)
    array = device.xp.full(_size(size), fill, dtype=dtype or dt.float32)
    return Tensor(array, requires_grad=requires_grad)


def zeros(*size: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    return _filled(size, 0, dtype, device, requires_grad)


def ones(*size: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    return _filled(size, 1, dtype, device, requires_grad)


def empty(*size: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    dtype, device = _resolve(dtype, device)
    return Tensor(device.xp.empty(_size(size), dtype=dtype or dt.float32), requires_grad=requires_grad)


def full(size: Sequence[int], fill_value: Any, dtype: Any = None, device: Any = None,
         requires_grad: bool = False) -> Tensor:
    if dtype is None:
        dtype = dt.bool_ if isinstance(fill_value, bool) else dt.int64 if isinstance(fill_value, int) else dt.float32
    return _filled((tuple(size),), fill_value, dtype, device, requires_grad)


def arange(start: Any, end: Any = None, step: Any = 1, dtype: Any = None, device: Any = None,
           requires_grad: bool = False) -> Tensor:
    if end is None:
        start, end = 0, start
    if dtype is None:
        dtype = dt.int64 if all(isinstance(v, int) for v in (start, end, step)) else dt.float32
    dtype, device = _resolve(dtype, device)
    return Tensor(device.xp.arange(start, end, step, dtype=dtype), requires_grad=requires_grad)


def linspace(start: float, end: float, steps: int, dtype: Any = None, device: Any = None) -> Tensor:
    dtype, device = _resolve(dtype, device)
    return Tensor(device.xp.linspace(start, end, steps, dtype=dtype or dt.float32))


def eye(n: int, m: int | None = None, dtype: Any = None, device: Any = None) -> Tensor:
    dtype, device = _resolve(dtype, device)
    return Tensor(device.xp.eye(n, m, dtype=dtype or dt.float32))


def _like(x: Tensor, dtype: Any, device: Any) -> tuple:
    return (x.dtype if dtype is None else dtype), (x.device if device is None else device)


def zeros_like(x: Tensor, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    dtype, device = _like(x, dtype, device)
    return zeros(x.shape, dtype=dtype, device=device, requires_grad=requires_grad)


def ones_like(x: Tensor, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    dtype, device = _like(x, dtype, device)
    return ones(x.shape, dtype=dtype, device=device, requires_grad=requires_grad)


def empty_like(x: Tensor, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    dtype, device = _like(x, dtype, device)
    return empty(x.shape, dtype=dtype, device=device, requires_grad=requires_grad)


def full_like(x: Tensor, fill_value: Any, dtype: Any = None, device: Any = None,
              requires_grad: bool = False) -> Tensor:
    dtype, device = _like(x, dtype, device)
    return full(x.shape, fill_value, dtype=dtype, device=device, requires_grad=requires_grad)


def _random(kind: str, size: tuple, dtype: Any, device: Any, generator: "Generator | None",
            requires_grad: bool, **kwargs: Any) -> Tensor:
    dtype, device = _resolve(dtype, device)
    gen = generator or default_generator(device)
    if gen.device != device:
        raise ValueError(f"{kind}: generator is on {gen.device} but the tensor is requested on {device}")
    shape = _size(size)
    if kind == "randint":
        array = gen.rng.integers(kwargs["low"], kwargs["high"], size=shape, dtype=np.int64)
        return Tensor(array.astype(dtype or dt.int64, copy=False))
    dtype = dtype or dt.float32
    if dtype not in dt.FLOATING:
        raise TypeError(f"{kind}: dtype must be floating point, got {dt.dtype_name(dtype)}")
    # Draw in float32/float64 (the generators' native types), then round once.
    draw_dtype = dt.float64 if dtype == dt.float64 else dt.float32
    if kind == "randn":
        array = gen.rng.standard_normal(size=shape, dtype=draw_dtype)
    else:
        array = gen.rng.random(size=shape, dtype=draw_dtype)
    return Tensor(array.astype(dtype, copy=False), requires_grad=requires_grad)


def randn(*size: Any, dtype: Any = None, device: Any = None, generator: Generator | None = None,
          requires_grad: bool = False) -> Tensor:
    """Standard normal samples."""
    return _random("randn", size, dtype, device, generator, requires_grad)


def rand(*size: Any, dtype: Any = None, device: Any = None, generator: Generator | None = None,
         requires_grad: bool = False) -> Tensor:
    """Uniform samples in [0, 1)."""
    return _random("rand", size, dtype, device, generator, requires_grad)


def randint(low: int, high: int | None = None, size: Sequence[int] = (), dtype: Any = None,
            device: Any = None, generator: Generator | None = None) -> Tensor:
    """Integers uniform in [low, high) (``randint(high, size)`` also accepted)."""
    if isinstance(high, (tuple, list)):  # randint(high, size), PyTorch's other overload, given positionally
        low, high, size = 0, low, high
    elif high is None:
        low, high = 0, low
    return _random("randint", (tuple(size),), dtype, device, generator, False, low=low, high=high)


def randn_like(x: Tensor, dtype: Any = None, device: Any = None) -> Tensor:
    dtype, device = _like(x, dtype, device)
    return randn(x.shape, dtype=dtype, device=device)


def rand_like(x: Tensor, dtype: Any = None, device: Any = None) -> Tensor:
    dtype, device = _like(x, dtype, device)
    return rand(x.shape, dtype=dtype, device=device)


def randperm(n: int, device: Any = None, generator: Generator | None = None) -> Tensor:
    """A random permutation of 0..n-1."""
    _, device = _resolve(None, device)
    gen = generator or default_generator(device)
    if device.type == "cpu":
        return Tensor(gen.rng.permutation(n).astype(np.int64))
    # CuPy's Generator has no permutation: the order that sorts n uniform draws is a uniform permutation
    # (float64 draws tie with probability about n^2 / 2^53).
    return Tensor(device.xp.argsort(gen.rng.random(n, dtype=np.float64)).astype(np.int64, copy=False))


# ------------------------------------------------------------ Tensor.new_* methods
# ``x.new_zeros(2, 3)``: a new tensor with x's dtype and device unless told otherwise.
def new_tensor(self: Tensor, data: Any, dtype: Any = None, device: Any = None,
               requires_grad: bool = False) -> Tensor:
    dtype, device = _like(self, dtype, device)
    return tensor(data, dtype=dtype, device=device, requires_grad=requires_grad)


def new_zeros(self: Tensor, *size: Any, dtype: Any = None, device: Any = None,
              requires_grad: bool = False) -> Tensor:
    dtype, device = _like(self, dtype, device)
    return zeros(*size, dtype=dtype, device=device, requires_grad=requires_grad)


def new_ones(self: Tensor, *size: Any, dtype: Any = None, device: Any = None,
             requires_grad: bool = False) -> Tensor:
    dtype, device = _like(self, dtype, device)
    return ones(*size, dtype=dtype, device=device, requires_grad=requires_grad)


def new_empty(self: Tensor, *size: Any, dtype: Any = None, device: Any = None,
              requires_grad: bool = False) -> Tensor:
    dtype, device = _like(self, dtype, device)
    return empty(*size, dtype=dtype, device=device, requires_grad=requires_grad)


def new_full(self: Tensor, size: Sequence[int], fill_value: Any, dtype: Any = None, device: Any = None,
             requires_grad: bool = False) -> Tensor:
    dtype, device = _like(self, dtype, device)
    return full(size, fill_value, dtype=dtype, device=device, requires_grad=requires_grad)


METHODS = {"new_tensor": new_tensor, "new_zeros": new_zeros, "new_ones": new_ones, "new_empty": new_empty,
           "new_full": new_full}


def _from_data(data: Any) -> Any:
    """``Tensor([1.0, 2.0])``: Python data as a CPU array, by ``ta.tensor``'s rules (PyTorch's legacy constructor)."""
    return _to_array(data, None, backend.CPU)


Tensor._from_data = staticmethod(_from_data)  # the Tensor constructor builds on this module
