"""Tensor: an xp array (NumPy or CuPy) plus what autograd needs to know about it.

A Tensor holds ``data`` (the array), ``grad``, ``requires_grad``, ``grad_fn`` (the
node that made it, None for leaves) and a version counter bumped by in-place
writes. Methods that are ops (``x.exp()``, ``x.sum(1)``) and the operators
(``tensor_operators.py``) call the op library through the package at call time,
so this module never imports it at import time; in-place writes live in
``tensor_inplace.py``.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

import tinyamp

from . import backend
from . import dtypes as dt
from .tensor_inplace import InplaceMixin
from .tensor_operators import OperatorsMixin


class _HookHandle:
    """Returned by ``register_hook``; ``remove()`` unregisters the hook."""

    def __init__(self, hooks: list, hook: Callable) -> None:
        self._hooks, self._hook = hooks, hook

    def remove(self) -> None:
        if self._hook in self._hooks:
            self._hooks.remove(self._hook)


class Tensor(OperatorsMixin, InplaceMixin):
    """A multi-dimensional array that can record operations for autograd."""

    __slots__ = ("data", "grad", "_requires_grad", "grad_fn", "_out_index", "_version",
                 "_hooks", "__weakref__", "_is_param")
    # Let NumPy defer to our reflected operators (np.float32(2) * t -> t.__rmul__).
    __array_ufunc__ = None

    def __init__(self, data: Any, requires_grad: bool = False) -> None:
        if isinstance(data, Tensor):
            data = data.data
        elif not (isinstance(data, np.ndarray) or backend.is_cupy_array(data)):
            data = tinyamp.factories._to_array(data, None, backend.CPU)
        else:
            data = tinyamp.factories.native_array(data)  # no complex, object, string arrays
        self.data = data
        self.grad: Tensor | None = None
        self._requires_grad = False
        self.grad_fn = None
        self._out_index = 0
        self._version = [0]  # a list so a detached alias shares the counter
        self._hooks: list | None = None
        self._is_param = False
        if requires_grad:
            self.requires_grad = True

    @classmethod
    def _wrap(cls, array: Any) -> "Tensor":
        """Fast constructor for op outputs: no checks, no conversion."""
        t = object.__new__(cls)
        t.data = array
        t.grad = None
        t._requires_grad = False
        t.grad_fn = None
        t._out_index = 0
        t._version = [0]
        t._hooks = None
        t._is_param = False
        return t

    # ------------------------------------------------------------ properties
    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype

    @property
    def device(self) -> backend.Device:
        return backend.device_of(self.data)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.data.shape

    @property
    def ndim(self) -> int:
        return self.data.ndim

    def dim(self) -> int:
        return self.data.ndim

    def size(self, dim: int | None = None) -> Any:
        return self.data.shape if dim is None else self.data.shape[dim]

    def numel(self) -> int:
        return int(self.data.size)

    def element_size(self) -> int:
        return self.data.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)

    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    @property
    def is_cuda(self) -> bool:
        return backend.is_cupy_array(self.data)

    @property
    def requires_grad(self) -> bool:
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        if value and self.data.dtype not in dt.FLOATING:
            raise RuntimeError(f"only Tensors of floating point dtype can require gradients; "
                               f"this tensor is {dt.dtype_name(self.data.dtype)} with shape {list(self.shape)}")
        if not value and self.grad_fn is not None:
            raise RuntimeError("you can only change requires_grad flags of leaf variables. If you want "
                               "to use a computed variable in a subgraph that doesn't require "
                               "differentiation use var_no_grad = var.detach().")
        self._requires_grad = bool(value)

    def requires_grad_(self, requires_grad: bool = True) -> "Tensor":
        self.requires_grad = requires_grad
        return self

    @property
    def T(self) -> "Tensor":
        return tinyamp.ops.permute(self, tuple(reversed(range(self.ndim))))

    @property
    def mT(self) -> "Tensor":
        return tinyamp.ops.transpose(self, -2, -1)

    # ------------------------------------------------------------ conversion
    def item(self) -> Any:
        if self.data.size != 1:
            raise RuntimeError(f"a Tensor with {self.data.size} elements cannot be converted to a "
                               f"Python scalar (shape {list(self.shape)})")
        return backend.to_host(self.data).reshape(()).item()

    def numpy(self) -> np.ndarray:
        if self._requires_grad:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. "
                               "Use tensor.detach().numpy() instead.")
        return backend.to_host(self.data)

    def tolist(self) -> Any:
        return backend.to_host(self.data).tolist()

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        array = backend.to_host(self.data)
        return array if dtype is None else array.astype(dtype)

    def detach(self) -> "Tensor":
        """A new leaf sharing this tensor's data (and version counter)."""
        t = Tensor._wrap(self.data)
        t._version = self._version
        return t

    def detach_(self) -> "Tensor":
        self.grad_fn = None
        self._requires_grad = False
        return self

    def clone(self) -> "Tensor":
        return tinyamp.ops.clone(self)

    def to(self, *args: Any, **kwargs: Any) -> "Tensor":
        """``to(dtype)``, ``to(device)``, ``to(device, dtype)`` or ``to(other_tensor)``."""
        device, dtype = parse_to_args("Tensor.to", args, kwargs)
        result = self
        if device is not None and device != self.device:
            result = tinyamp.ops.to_device(result, device)
        if dtype is not None and dtype != result.dtype:
            result = tinyamp.ops.cast(result, dtype)
        return result

    def cpu(self) -> "Tensor":
        return self.to("cpu")

    def cuda(self, device: Any = None) -> "Tensor":
        return self.to("cuda" if device is None else backend.Device("cuda", device) if isinstance(device, int) else device)

    def type(self, dtype: Any = None) -> Any:
        return dt.dtype_name(self.dtype) if dtype is None else self.to(dtype)

    def float(self) -> "Tensor":
        return self.to(dt.float32)

    def half(self) -> "Tensor":
        return self.to(dt.float16)

    def bfloat16(self) -> "Tensor":
        return self.to(dt.bfloat16)

    def double(self) -> "Tensor":
        return self.to(dt.float64)

    def long(self) -> "Tensor":
        return self.to(dt.int64)

    def int(self) -> "Tensor":
        return self.to(dt.int32)

    def bool(self) -> "Tensor":
        return self.to(dt.bool_)

    def is_floating_point(self) -> bool:
        return self.dtype in dt.FLOATING

    # ------------------------------------------------------------- autograd
    def backward(self, gradient: "Tensor | None" = None, retain_graph: bool | None = None,
                 create_graph: bool = False, inputs: Sequence["Tensor"] | None = None) -> None:
        """Accumulate d(self)/d(leaf) into every leaf's ``.grad``."""
        tinyamp.autograd.backward(self, gradient, retain_graph, create_graph, inputs=inputs)

    def register_hook(self, hook: Callable[["Tensor"], "Tensor | None"]) -> _HookHandle:
        """Call ``hook(grad)`` when this tensor's gradient is computed; it may return a replacement."""
        if not self._requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        if self.grad_fn is None:
            if self._hooks is None:
                self._hooks = []
            hooks = self._hooks
        else:
            self.grad_fn.register_output_hook(self._out_index, hook)
            hooks = self.grad_fn._output_hooks[self._out_index]
        if self.grad_fn is None:
            hooks.append(hook)
        return _HookHandle(hooks, hook)

    # ------------------------------------------------------ Python protocols
    def __bool__(self) -> bool:
        if self.data.size != 1:
            raise RuntimeError(f"Boolean value of Tensor with {self.data.size} elements is ambiguous")
        return bool(self.item())

    def __format__(self, spec: str) -> str:
        # f"{loss:.4f}" on a 0-d tensor formats its value, as in PyTorch.
        return format(self.item(), spec) if self.ndim == 0 else object.__format__(self, spec)

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        if self.dtype.kind not in "iu":
            raise TypeError(f"only integer tensors of a single element can be converted to an index, "
                            f"got {dt.dtype_name(self.dtype)}")
        return int(self.item())

    def __len__(self) -> int:
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self):
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self.shape[0]))

    def __repr__(self) -> str:
        body = np.array2string(backend.to_host(self.data).astype(np.float32)
                               if self.dtype == dt.bfloat16 else backend.to_host(self.data),
                               separator=", ", prefix="tensor(", precision=4, threshold=64)
        extras = []
        if self.dtype not in (dt.float32, dt.int64, dt.bool_):
            extras.append(f"dtype={dt.dtype_name(self.dtype)}")
        if self.is_cuda:
            extras.append(f"device='{self.device}'")
        if self.grad_fn is not None:
            extras.append(f"grad_fn=<{type(self.grad_fn).__name__}Backward>")
        elif self._requires_grad:
            extras.append("requires_grad=True")
        return "tensor(" + body + "".join(", " + e for e in extras) + ")"

    # ------------------------------------------------------ method forms of ops
    def __getattr__(self, name: str) -> Any:
        # Tensor methods that are just ops (x.exp(), x.sum(dim=1), x.reshape(...)):
        # resolved through the op package at call time, one table, no copies.
        method = tinyamp.ops.TENSOR_METHODS.get(name)
        if method is None:
            raise AttributeError(f"'Tensor' object has no attribute '{name}'")
        return method.__get__(self, Tensor)


def parse_to_args(caller: str, args: tuple, kwargs: dict) -> tuple["backend.Device | None", "Any"]:
    """(device, dtype) from PyTorch's ``to(...)`` forms: a device, a dtype, both, or a tensor."""
    device, dtype = kwargs.pop("device", None), kwargs.pop("dtype", None)
    for ignored in ("non_blocking", "copy"):  # accepted for portability; copies are explicit here
        kwargs.pop(ignored, None)
    if kwargs:
        raise TypeError(f"{caller}: unexpected arguments {sorted(kwargs)}")
    for arg in args:
        if isinstance(arg, Tensor):
            device, dtype = arg.device, arg.dtype
        elif isinstance(arg, backend.Device) or (isinstance(arg, str) and arg.split(":")[0] in ("cpu", "cuda")):
            device = arg
        else:
            dtype = arg
    return (None if device is None else backend.Device(device),
            None if dtype is None else dt.as_dtype(dtype))
