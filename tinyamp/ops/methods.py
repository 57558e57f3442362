"""Tensor's PyTorch conveniences: Python operators, conversions, in-place method forms, protocols.

What makes a Tensor work with autograd and AMP (its array, ``grad``,
``requires_grad``, the version and storage counters, the rules of an in-place
write) is in ``tensor.py``; this module holds what lets PyTorch code run
unchanged on top of it, and :func:`install` puts it on the class (DeZero's
``setup_variable``: the op library extends the Tensor it builds on). Every method
here that computes calls an op, so it is recorded on the tape and follows the
precision rules like any op; in-place forms go through ``Tensor._write`` /
``_rebind``. ``x.exp()``, ``x.sum(1)``: the ops' method forms, looked up in
``TENSOR_METHODS`` (filled by ``ops/__init__.py``).
Comparisons and ``& | ~`` give bool tensors and are never recorded. Tensors hash
by identity, as in PyTorch (they key optimizer state).
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

import numpy as np

from .. import backend
from .. import dtypes as dt
from ..kernels.convert import convert
from ..random import draw_like, write_draw
from ..grad_mode import is_grad_enabled, no_grad
from ..factories import tensor as make_tensor
from .cast import cast, clone as clone_op, to_device
from .clamp_where import clamp, masked_fill
from .elementwise import abs, add, div, mul, neg, pow, sub
from .floor_division import floor_divide, remainder
from .indexing import getitem
from .lerp import lerp
from .linalg import matmul
from .shape import permute, transpose
from ..tensor import Tensor


TENSOR_METHODS: dict = {}  # method name -> op function (x.exp() is exp(x)), filled by ops/__init__.py


class TensorMethods:
    """The PyTorch Tensor API beyond autograd's needs, installed on ``Tensor`` by :func:`install`."""

    __slots__ = ()

    # ------------------------------------------------------------ shape and size
    @property
    def ndim(self) -> int:
        return self.array.ndim

    def dim(self) -> int:
        return self.array.ndim

    def size(self, dim: int | None = None) -> Any:
        return self.array.shape if dim is None else self.array.shape[dim]

    def numel(self) -> int:
        return int(self.array.size)

    nelement = numel  # PyTorch's older name

    def is_contiguous(self, memory_format: Any = dt.contiguous_format) -> bool:
        """True for ``contiguous_format`` (``contiguous()`` is a no-op: every op reads any strides);
        ``channels_last`` only where NCHW and NHWC coincide (one channel, or one pixel): the layout
        stays row-major."""
        if memory_format in (dt.channels_last, dt.channels_last_3d):
            spatial = 1
            for n in self.shape[2:]:
                spatial *= n
            return self.ndim in (4, 5) and (self.shape[1] == 1 or spatial == 1)
        return True

    def element_size(self) -> int:
        return self.array.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return int(self.array.nbytes)

    @property
    def is_cuda(self) -> bool:
        return backend.is_cupy_array(self.array)

    def requires_grad_(self, requires_grad: bool = True) -> "Tensor":
        self.requires_grad = requires_grad
        return self

    @property
    def T(self) -> "Tensor":
        return permute(self, tuple(reversed(range(self.ndim))))

    @property
    def mT(self) -> "Tensor":
        return transpose(self, -2, -1)

    # ------------------------------------------------------------ conversion
    def numpy(self) -> np.ndarray:
        if self._requires_grad:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. "
                               "Use tensor.detach().numpy() instead.")
        return backend.to_host(self.array, "Tensor.numpy()")

    def tolist(self) -> Any:
        return backend.to_host(self.array, "Tensor.tolist()").tolist()

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        array = backend.to_host(self.array, "numpy.asarray(tensor)")
        return array if dtype is None else array.astype(dtype)

    def detach_(self) -> "Tensor":
        """Make this tensor a leaf that requires no grad, in place; refused for a view (as PyTorch).

        A view is the output of a view op (indexing, reshape, permute, split),
        or a tensor made without the tape whose array is a view of another's.
        """
        if self.array.base is not None and (self.grad_fn is None or getattr(self.grad_fn, "returns_view", False)):
            raise RuntimeError("Can't detach views in-place. Use detach() instead.")
        self.grad_fn = None
        self._requires_grad = False
        return self

    def clone(self) -> "Tensor":
        return clone_op(self)

    def to(self, *args: Any, **kwargs: Any) -> "Tensor":
        """``to(dtype)``, ``to(device)``, ``to(device, dtype)`` or ``to(other_tensor)``."""
        device, dtype = parse_to_args("Tensor.to", args, kwargs)
        result = self
        if device is not None and device != self.device:
            result = to_device(result, device)
        if dtype is not None and dtype != result.dtype:
            result = cast(result, dtype)
        return result

    def pin_memory(self) -> "Tensor":
        """The tensor itself: CuPy copies from pageable host memory, so there is nothing to pin (PyTorch copies
        a CPU tensor into page-locked memory for faster, asynchronous host-to-GPU copies)."""
        if self.device.type != "cpu":
            raise RuntimeError(f"cannot pin '{self.device}' memory: only CPU tensors can be pinned")
        return self

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

    def type_as(self, other: "Tensor") -> "Tensor":
        """This tensor in ``other``'s dtype (``self`` itself when it already has it)."""
        if not isinstance(other, Tensor):
            raise TypeError(f"type_as(): argument 'other' (position 1) must be Tensor, not {type(other).__name__}")
        return self.to(other.dtype)

    def is_floating_point(self) -> bool:
        return self.dtype in dt.FLOATING

    # ------------------------------------------------------ in-place method forms
    def _inplace_binary(self, name: str, op: Callable, other: Any) -> "Tensor":
        if self._check_inplace(name, other):
            return self._rebind(name, op(self._old_value(), other))
        with no_grad():
            result = op(self, other)
        return self._write(name, result)

    def add_(self, other: Any, alpha: Any = 1) -> "Tensor":
        other, alpha = _alpha_first("add_", other, alpha)
        if alpha != 1:
            other = other * alpha
        return self._inplace_binary("add_", add, other)

    def sub_(self, other: Any, alpha: Any = 1) -> "Tensor":
        other, alpha = _alpha_first("sub_", other, alpha)
        if alpha != 1:
            other = other * alpha
        return self._inplace_binary("sub_", sub, other)

    def mul_(self, other: Any) -> "Tensor":
        return self._inplace_binary("mul_", mul, other)

    def div_(self, other: Any) -> "Tensor":
        return self._inplace_binary("div_", div, other)

    def lerp_(self, end: Any, weight: Any) -> "Tensor":
        """self += weight * (end - self) (``ta.lerp``), in place; recorded when end or weight needs grad."""
        weight_grad = isinstance(weight, Tensor) and weight._requires_grad
        return self._inplace_binary("lerp_", lambda x, _: lerp(x, end, weight),
                                    weight if weight_grad else end)

    def clamp_(self, min: Any = None, max: Any = None) -> "Tensor":  # noqa: A002 - torch names
        return self._inplace_binary("clamp_", lambda x, _: clamp(x, min, max), None)

    clip_ = clamp_

    def masked_fill_(self, mask: Any, value: Any) -> "Tensor":
        return self._inplace_binary("masked_fill_", lambda x, _: masked_fill(x, mask, value), None)

    def zero_(self) -> "Tensor":
        return self.fill_(0)

    def fill_(self, value: Any) -> "Tensor":
        if self._check_inplace("fill_", None):
            raise RuntimeError("fill_: cannot fill a non-leaf tensor that requires grad in place")
        self._store("fill_", ..., value)
        return self

    def _fill_random(self, name: str, fill: Callable[["Tensor"], Any]) -> "Tensor":
        if self.dtype not in dt.FLOATING:
            raise NotImplementedError(f'"{name}" not implemented for {dt.dtype_name(self.dtype)} '
                                      f"(shape {list(self.shape)}): it needs a floating point tensor")
        if self._check_inplace(name, None):
            raise RuntimeError(f"{name}: cannot fill a non-leaf tensor that requires grad in place")
        fill(self)
        return self

    def normal_(self, mean: float = 0, std: float = 1, *, generator: Any = None) -> "Tensor":
        """Fill with samples from N(mean, std^2) (drawn in float32/float64, rounded once)."""
        if std < 0:
            raise RuntimeError(f"normal expects std >= 0.0, but found std {std}")
        return self._fill_random("normal_", lambda t: write_draw(t, draw_like("normal_", t, generator) * std + mean))

    def uniform_(self, from_: float = 0, to: float = 1, *, generator: Any = None, **kwargs: Any) -> "Tensor":
        """Fill with samples from U(from, to) (``from`` is PyTorch's keyword, also accepted)."""
        from_ = kwargs.pop("from", from_)
        if kwargs:
            raise TypeError(f"uniform_() got an unexpected keyword argument {next(iter(kwargs))!r}")
        if from_ > to:
            raise RuntimeError(f"uniform_ expects to return a [from, to) range, but found from={from_} > to={to}")
        return self._fill_random("uniform_", lambda t: write_draw(t, draw_like("uniform_", t, generator) * (to - from_) + from_))

    def copy_(self, src: "Tensor") -> "Tensor":
        """Copy ``src`` (same shape; dtype and device may differ: this *is* the explicit cast)."""
        if not isinstance(src, Tensor):
            src = make_tensor(src)
        if src.shape != self.shape:
            raise RuntimeError(f"copy_: source shape {list(src.shape)} does not match "
                               f"destination shape {list(self.shape)}")
        if self._check_inplace("copy_", src):
            converted = src.to(self.device).to(self.dtype)
            return self._rebind("copy_", clone_op(converted))
        self._store("copy_", ..., _converted(backend.to_device(src.array, self.device), self.dtype))
        return self

    def __setitem__(self, key: Any, value: Any) -> None:
        if is_grad_enabled() and (self._requires_grad or (isinstance(value, Tensor) and value._requires_grad)):
            raise RuntimeError(f"index assignment into a tensor that requires grad (shape {list(self.shape)}) "
                               f"is not recorded by autograd; build the result with ta.where or ta.cat, "
                               f"or assign under ta.no_grad()")
        if isinstance(value, Tensor):
            # Stored in self's dtype, as PyTorch's index_put_/copy_ do (a float16
            # tensor takes a float32 value rounded; this is the explicit write).
            value = _converted(value.array, self.dtype)
        key = _index_key(key)
        if self.device.type == "cuda":
            _check_write_indices("index assignment", self, key)
        self._store("index assignment", key, value)

    # ------------------------------------------------------ Python operators
    def __add__(self, other: Any) -> "Tensor":
        return add(self, other)

    def __radd__(self, other: Any) -> "Tensor":
        return add(other, self)

    def __sub__(self, other: Any) -> "Tensor":
        return sub(self, other)

    def __rsub__(self, other: Any) -> "Tensor":
        return sub(other, self)

    def __mul__(self, other: Any) -> "Tensor":
        return mul(self, other)

    def __rmul__(self, other: Any) -> "Tensor":
        return mul(other, self)

    def __truediv__(self, other: Any) -> "Tensor":
        return div(self, other)

    def __rtruediv__(self, other: Any) -> "Tensor":
        return div(other, self)

    def __pow__(self, other: Any) -> "Tensor":
        return pow(self, other)

    def __rpow__(self, other: Any) -> "Tensor":
        return pow(other, self)

    def __floordiv__(self, other: Any) -> "Tensor":
        return floor_divide(self, other)

    def __rfloordiv__(self, other: Any) -> "Tensor":
        return floor_divide(other, self)

    def __mod__(self, other: Any) -> "Tensor":
        return remainder(self, other)

    def __rmod__(self, other: Any) -> "Tensor":
        return remainder(other, self)

    def __matmul__(self, other: Any) -> "Tensor":
        return matmul(self, other)

    def __rmatmul__(self, other: Any) -> "Tensor":
        return matmul(other, self)

    def __neg__(self) -> "Tensor":
        return neg(self)

    def __pos__(self) -> "Tensor":
        return self

    def __abs__(self) -> "Tensor":
        return abs(self)

    def __iadd__(self, other: Any) -> "Tensor":
        return self.add_(other)

    def __isub__(self, other: Any) -> "Tensor":
        return self.sub_(other)

    def __imul__(self, other: Any) -> "Tensor":
        return self.mul_(other)

    def __itruediv__(self, other: Any) -> "Tensor":
        return self.div_(other)

    def __getitem__(self, key: Any) -> "Tensor":
        out = getitem(self, key)
        if out.grad_fn is None:
            # An unrecorded view (``with no_grad(): p[0].zero_()``) shares its base's version and
            # storage counters, as PyTorch's views do, so a write into it is seen where one into
            # the base is (autograd's check, the weight-cast cache, O2 master weights).
            base = getattr(out.array, "base", None)
            if base is not None and (base is self.array or base is getattr(self.array, "base", None)):
                out._version, out._storage = self._version, self._storage
        return out

    # Comparisons give bool tensors and never record (no gradient).
    def _compare(self, other: Any, ufunc: Callable) -> "Tensor":
        other_data = other.array if isinstance(other, Tensor) else other
        return Tensor._wrap(ufunc(self.array, other_data))

    def __eq__(self, other: Any) -> "Tensor":  # type: ignore[override]
        return self._compare(other, backend.array_module(self.array).equal)

    def __ne__(self, other: Any) -> "Tensor":  # type: ignore[override]
        return self._compare(other, backend.array_module(self.array).not_equal)

    def __lt__(self, other: Any) -> "Tensor":
        return self._compare(other, backend.array_module(self.array).less)

    def __le__(self, other: Any) -> "Tensor":
        return self._compare(other, backend.array_module(self.array).less_equal)

    def __gt__(self, other: Any) -> "Tensor":
        return self._compare(other, backend.array_module(self.array).greater)

    def __ge__(self, other: Any) -> "Tensor":
        return self._compare(other, backend.array_module(self.array).greater_equal)

    def __invert__(self) -> "Tensor":
        if self.dtype != dt.bool_:
            raise TypeError(f"~ is defined for bool tensors only, got {dt.dtype_name(self.dtype)}")
        return Tensor._wrap(~self.array)

    def __and__(self, other: Any) -> "Tensor":
        return self._compare(other, backend.array_module(self.array).logical_and)

    def __or__(self, other: Any) -> "Tensor":
        return self._compare(other, backend.array_module(self.array).logical_or)

    eq, ne, lt, le, gt, ge = __eq__, __ne__, __lt__, __le__, __gt__, __ge__
    __hash__ = object.__hash__  # identity, like PyTorch (tensors key optimizer state)

    # ------------------------------------------------------ Python protocols
    def __bool__(self) -> bool:
        if self.array.size != 1:
            raise RuntimeError(f"Boolean value of Tensor with {self.array.size} elements is ambiguous")
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
        host = backend.to_host(self.array, "repr(tensor) / print(tensor)")
        body = np.array2string(host.astype(np.float32) if self.dtype == dt.bfloat16 else host,
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

    # ------------------------------------------------------ in-place, recorded
    def _rebind(self, name: str, result: "Tensor") -> "Tensor":
        """A recorded in-place op: self becomes the op's output.

        The old array is left untouched (the node may have saved it) and self is
        rebound to the result; the version bump makes any other node that saved
        self fail loudly at backward instead of reading the new values.
        """
        self._check_result(name, result)
        if result.dtype != self.dtype:  # h.mul_(f): computed in float32, rounded into float16 (recorded)
            result = cast(result, self.dtype)
        self.array = result.array
        self.grad_fn, self._out_index, self._requires_grad = result.grad_fn, result._out_index, True
        self._version[0] += 1
        self._storage = None  # a new array: earlier aliases keep the old one
        return self

    # ------------------------------------------------------ method forms of ops
    def __getattr__(self, name: str) -> Any:
        # Tensor methods that are just ops (x.exp(), x.sum(dim=1), x.reshape(...)):
        # resolved through the op package at call time, one table, no copies.
        method = TENSOR_METHODS.get(name)
        if method is None:
            raise AttributeError(f"'Tensor' object has no attribute '{name}'")
        return method.__get__(self, type(self))


def _alpha_first(name: str, other: Any, alpha: Any) -> tuple[Any, Any]:
    """PyTorch's deprecated ``add_(alpha, other)`` (``p.data.add_(-lr, p.grad)``), still accepted, with its warning."""
    if isinstance(alpha, Tensor) and not isinstance(other, Tensor):
        warnings.warn(f"This overload of {name} is deprecated:\n\t{name}(Number alpha, Tensor other)\n"
                      f"Consider using one of the following signatures instead:\n\t"
                      f"{name}(Tensor other, *, Number alpha = 1)", UserWarning, stacklevel=3)
        return alpha, other
    return other, alpha


def _converted(array: Any, dtype: np.dtype) -> Any:
    """``array`` in ``dtype`` for an explicit write: rounded as PyTorch's ``copy_``, quietly.

    A value past float16's range becomes inf, as in PyTorch, without NumPy's
    "overflow encountered in cast" warning.
    """
    if array.dtype == dtype:
        return array
    with np.errstate(all="ignore"):
        return convert(array, dtype)


def _index_key(key: Any) -> Any:
    """Replace Tensors inside an index by their arrays."""
    if isinstance(key, Tensor):
        return key.array
    if isinstance(key, tuple):
        return tuple(k.array if isinstance(k, Tensor) else k for k in key)
    return key


def _check_write_indices(name: str, tensor: Any, key: Any) -> None:
    """Raise NumPy's IndexError for an integer-array index out of range of its axis. CuPy takes such an index
    modulo the axis's length and would write another element; one reduction and one host read check them."""
    parts = key if isinstance(key, tuple) else (key,)
    arrays = [np.asarray(k) if isinstance(k, (list, np.ndarray)) else k for k in parts]
    taking = [0 if k is None or k is Ellipsis else k.ndim if getattr(k, "dtype", None) == np.bool_ else 1
              for k in arrays]
    checked, axis = [], 0  # (index array, its axis)
    for k, took in zip(arrays, taking):
        if k is Ellipsis:
            axis += tensor.ndim - sum(taking)
        elif getattr(k, "dtype", None) is not None and k.dtype.kind in "iu" and k.size and axis < tensor.ndim:
            checked.append((k, axis))
        axis += took
    if not checked:
        return
    xp = backend.cupy() if any(backend.is_cupy_array(k) for k, _ in checked) else np
    ends = xp.stack([xp.asarray(e, dtype=np.int64) for k, _ in checked
                     for e in (xp.asarray(k).min(), xp.asarray(k).max())])
    ends = backend.to_host(ends, f"{name}: the bounds check of its index arrays").tolist()
    for i, (_, axis) in enumerate(checked):
        size = tensor.shape[axis]
        for value in (ends[2 * i + 1], ends[2 * i]):
            if not -size <= value < size:
                raise IndexError(f"{name}: index {value} is out of bounds for axis {axis} with size {size} "
                                 f"(tensor of shape {list(tensor.shape)}, {dt.dtype_name(tensor.dtype)})")


def parse_to_args(caller: str, args: tuple, kwargs: dict) -> tuple["backend.Device | None", "Any"]:
    """(device, dtype) from PyTorch's ``to(...)`` forms: a device, a dtype, both, or a tensor."""
    device, dtype = kwargs.pop("device", None), kwargs.pop("dtype", None)
    for ignored in ("non_blocking", "copy"):  # accepted for portability; copies are explicit here
        kwargs.pop(ignored, None)
    layout = kwargs.pop("memory_format", dt.preserve_format)  # accepted; the layout stays row-major
    if not isinstance(layout, dt.memory_format):
        raise TypeError(f"{caller}: memory_format must be a tinyamp.memory_format (channels_last, "
                        f"contiguous_format, preserve_format), got {layout!r}")
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


def is_tensor(obj: Any) -> bool:
    """True when ``obj`` is a Tensor (an ``nn.Parameter`` included), as ``torch.is_tensor``."""
    return isinstance(obj, Tensor)


def _assert(condition: Any, message: str) -> None:
    """``torch._assert``: raise AssertionError(message) unless ``condition`` holds (a Tensor is read on the host)."""
    if not condition:
        raise AssertionError(message)


def install(tensor: type) -> None:
    """Put :class:`TensorMethods`' methods on ``tensor`` (those it does not define itself)."""
    own = set(vars(tensor))
    for name, value in vars(TensorMethods).items():
        if name not in own and name not in ("__module__", "__qualname__", "__doc__", "__slots__"):
            setattr(tensor, name, value)
