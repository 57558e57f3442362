"""Tensor: an xp array (NumPy or CuPy) plus what autograd needs to know about it.

A Tensor holds ``array`` (the raw NumPy/CuPy array), ``grad``, ``requires_grad``,
``grad_fn`` (the node that made it, None for leaves) and a version counter bumped by
in-place writes. ``t.data`` is PyTorch's: another Tensor on the same array, detached,
with its own version counter (writes through it are invisible to autograd's
saved-tensor check, as in PyTorch), but every write through the tensor or its
``.data`` bumps a storage counter they share (``_storage``, which O2 master weights
read) and ``ALIASED_WRITES`` (on which the autocast weight-cast cache empties itself at
the next outermost region), so neither keeps a copy of the old values. Methods that are ops (``x.exp()``, ``x.sum(1)``) and the Python
operators call the op library through the package at call time
(``tinyamp.ops.add``), so they are recorded on the tape and follow the
precision rules like any op, and this module never imports the op library.

In-place writes (``add_``, ``lerp_``, ``copy_``, ``x[i] = v``) bump the version counter, so
a node that saved the tensor for backward notices the change and fails loudly
(PyTorch's rule). Outside autograd the write goes into the tensor's buffer
(views see it); when the tape must record it, the op runs out of place and the
tensor is rebound to the result (``_rebind``). Comparisons and ``& | ~`` give
bool tensors and are never recorded. Tensors hash by identity, as in PyTorch
(they key optimizer state).
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Sequence

import numpy as np

import tinyamp

from . import backend
from . import dtypes as dt
from .kernels import widened
from .kernels.convert import convert

# Writes into arrays that have a .data alias (any of them, ever): the weight-cast cache, keyed on
# the version counter that .data does not share, compares this at each outermost autocast entry.
ALIASED_WRITES = [0]
_ITEM = "Tensor.item() (which float(t), int(t), bool(t) and f'{t:.4f}' call)"  # how a host read is named


class _HookHandle:
    """Returned by ``register_hook``; ``remove()`` unregisters the hook."""

    def __init__(self, hooks: list, hook: Callable) -> None:
        self._hooks, self._hook = hooks, hook

    def remove(self) -> None:
        if self._hook in self._hooks:
            self._hooks.remove(self._hook)


class Tensor:
    """A multi-dimensional array that can record operations for autograd."""

    __slots__ = ("array", "_grad", "_requires_grad", "grad_fn", "_out_index", "_version",
                 "_hooks", "__weakref__", "_is_param", "_storage", "_post_accumulate_hooks")
    # Let NumPy defer to our reflected operators (np.float32(2) * t -> t.__rmul__).
    __array_ufunc__ = None

    def __init__(self, data: Any, requires_grad: bool = False) -> None:
        storage = None
        if isinstance(data, Tensor):  # shares the array, as PyTorch shares storage
            storage = data._storage
            data = data.array
        elif not (isinstance(data, np.ndarray) or backend.is_cupy_array(data)):
            data = tinyamp.factories._to_array(data, None, backend.CPU)
        else:
            data = tinyamp.factories.native_array(data)  # no complex, object, string arrays
        self.array = data
        self._grad: Tensor | None = None
        self._requires_grad = False
        self.grad_fn = None
        self._out_index = 0
        self._version = [0]  # a list so a detached alias shares the counter
        self._hooks: list | None = None
        self._is_param = False
        self._storage: list | None = storage  # [writes], made when .data is first taken or set
        self._post_accumulate_hooks: list | None = None
        if requires_grad:
            self.requires_grad = True

    @property
    def data(self) -> "Tensor":
        """A Tensor on the same array: detached, ``requires_grad=False``, its own version counter."""
        t = Tensor._wrap(self.array)
        t._storage = self.storage_counter()
        return t

    @data.setter
    def data(self, value: "Tensor") -> None:
        """``t.data = other``: ``t`` now shares ``other``'s array (any shape, dtype or device), as in PyTorch."""
        if not isinstance(value, Tensor):
            raise TypeError(f"Variable data has to be a tensor, but got {type(value).__name__}"
                            + (" (Tensor.data = ...: wrap a raw array with ta.from_numpy or ta.as_tensor)"
                               if isinstance(value, np.ndarray) or backend.is_cupy_array(value) else ""))
        if self._requires_grad and value.dtype not in dt.FLOATING:
            raise RuntimeError(f"data set to a tensor that requires gradients must be floating point or complex "
                               f"dtype (Tensor.data = a {dt.dtype_name(value.dtype)} tensor of shape "
                               f"{list(value.shape)})")
        self.array = value.array
        self._storage = value.storage_counter()
        ALIASED_WRITES[0] += 1

    def storage_counter(self) -> list:
        """``[n]``: in-place writes into this tensor's array through it or its ``.data`` aliases.

        Made on first use and shared by ``.data`` (and ``detach()``, ``Parameter(t)``
        once it exists); the version counter, which ``.data`` does not share, misses
        the alias's writes. Code that keeps a copy derived from the array (O2 master
        weights) compares it, with the array's identity, to see every write.
        """
        storage = self._storage
        if storage is None:
            storage = self._storage = [0]
        return storage

    @classmethod
    def _wrap(cls, array: Any) -> "Tensor":
        """Fast constructor for op outputs: no checks; a NumPy scalar becomes a 0-d array.

        NumPy hands back a 0-d result (``x.sum()``, ``a0 * b0``) as an immutable
        scalar, where CuPy keeps a 0-d array. A Tensor's data is always an array,
        so in-place writes (``x.sum().mul_(2)``, ``s[()] = v``) and views work on
        both backends. The ndarray test comes first: it is the common case.
        """
        if array.__class__ is not np.ndarray and isinstance(array, np.generic):
            array = np.asarray(array)
        t = object.__new__(cls)
        t.array = array
        t._grad = None
        t._requires_grad = False
        t.grad_fn = None
        t._out_index = 0
        t._version = [0]
        t._hooks = None
        t._is_param = False
        t._storage = None
        t._post_accumulate_hooks = None
        return t

    # ------------------------------------------------------------ properties
    @property
    def dtype(self) -> np.dtype:
        return self.array.dtype

    @property
    def device(self) -> backend.Device:
        return backend.device_of(self.array)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.array.shape

    @property
    def ndim(self) -> int:
        return self.array.ndim

    def dim(self) -> int:
        return self.array.ndim

    def size(self, dim: int | None = None) -> Any:
        return self.array.shape if dim is None else self.array.shape[dim]

    def numel(self) -> int:
        return int(self.array.size)

    def element_size(self) -> int:
        return self.array.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return int(self.array.nbytes)

    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    @property
    def is_cuda(self) -> bool:
        return backend.is_cupy_array(self.array)

    def _set_grad(self, value: "Tensor | None") -> None:
        """``t.grad = value``: None, or a Tensor of t's shape, dtype and device (PyTorch 2.13's checks and words)."""
        if value is not None:
            if not isinstance(value, Tensor):
                raise TypeError(f"assigned grad expected to be a Tensor or None but got grad of type "
                                f"{type(value).__module__}.{type(value).__qualname__}")
            if value is self:
                raise RuntimeError("can't assign Variable as its own grad")
            mine, theirs = self.array, value.array
            if type(mine) is not type(theirs) or (type(mine) is not np.ndarray
                                                  and backend.device_of(mine) != backend.device_of(theirs)):
                raise RuntimeError(f"assigned grad has data located on a different device (a tensor on "
                                   f"{backend.device_of(mine)}, a grad on {backend.device_of(theirs)})")
            if theirs.dtype != mine.dtype:
                raise RuntimeError(f"attempting to assign a gradient with dtype '{dt.dtype_name(theirs.dtype)}' "
                                   f"to a tensor with grad_dtype '{dt.dtype_name(mine.dtype)}'. The gradient "
                                   f"must match the tensor's dtype")
            if theirs.shape != mine.shape:
                raise RuntimeError(f"attempting to assign a gradient of size '{list(theirs.shape)}' to a tensor "
                                   f"of size '{list(mine.shape)}'. Please ensure that the gradient and the "
                                   f"tensor are the same size")
        self._grad = value

    @property
    def requires_grad(self) -> bool:
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        if value and self.array.dtype not in dt.FLOATING:
            raise RuntimeError(f"only Tensors of floating point dtype can require gradients; "
                               f"this tensor is {dt.dtype_name(self.array.dtype)} with shape {list(self.shape)}")
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
        if self.array.size != 1:
            raise RuntimeError(f"a Tensor with {self.array.size} elements cannot be converted to a "
                               f"Python scalar (shape {list(self.shape)})")
        return backend.to_host(self.array, _ITEM).reshape(()).item()

    def numpy(self) -> np.ndarray:
        if self._requires_grad:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. "
                               "Use tensor.detach().numpy() instead.")
        widened.forget()  # the caller may write into the array
        return backend.to_host(self.array, "Tensor.numpy()")

    def tolist(self) -> Any:
        return backend.to_host(self.array, "Tensor.tolist()").tolist()

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        widened.forget()  # the caller may write into the array
        array = backend.to_host(self.array, "numpy.asarray(tensor)")
        return array if dtype is None else array.astype(dtype)

    def detach(self) -> "Tensor":
        """A new leaf sharing this tensor's array and version counter (and storage counter, if any)."""
        t = Tensor._wrap(self.array)
        t._version = self._version
        t._storage = self._storage
        return t

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

    def register_post_accumulate_grad_hook(self, hook: Callable[["Tensor"], None]) -> _HookHandle:
        """Call ``hook(self)`` after ``backward`` has accumulated this leaf's gradient into ``.grad``."""
        if not self._requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        if self.grad_fn is not None:
            raise RuntimeError("post accumulate grad hooks cannot be registered on non-leaf tensors")
        if self._post_accumulate_hooks is None:
            self._post_accumulate_hooks = []
        self._post_accumulate_hooks.append(hook)
        return _HookHandle(self._post_accumulate_hooks, hook)

    # ------------------------------------------------------ in-place writes
    def _check_inplace(self, name: str, other: Any) -> bool:
        """True when the write must be recorded on the tape (PyTorch's rules)."""
        other_grad = isinstance(other, Tensor) and other._requires_grad
        if not tinyamp.is_grad_enabled() or not (self._requires_grad or other_grad):
            return False
        if self.grad_fn is None and self._requires_grad:
            raise RuntimeError(f"{name}: a leaf Variable that requires grad is being used in an "
                               f"in-place operation (shape {list(self.shape)}, {dt.dtype_name(self.dtype)}); "
                               f"wrap it in ta.no_grad() or use the out-of-place op")
        return True

    def _check_result(self, name: str, result: "Tensor") -> None:
        """The result fits: self's shape, and a dtype that may be rounded into self's (PyTorch's rules)."""
        if result.shape != self.shape:
            raise RuntimeError(f"{name}: result of shape {list(result.shape)} and dtype "
                               f"{dt.dtype_name(result.dtype)} cannot be written in place into a tensor of "
                               f"shape {list(self.shape)} and dtype {dt.dtype_name(self.dtype)}")
        if result.dtype != self.dtype and not dt.can_cast_in_place(result.dtype, self.dtype):
            raise RuntimeError(f"{name}: result type {dt.dtype_name(result.dtype)} can't be cast to the "
                               f"desired output type {dt.dtype_name(self.dtype)} (shape {list(self.shape)}); "
                               f"an in-place op keeps its tensor's dtype: use the out-of-place op")

    def _old_value(self) -> "Tensor":
        """The tensor as it is now, as a separate node input for a recorded in-place op."""
        old = Tensor._wrap(self.array)
        old.grad_fn, old._out_index, old._requires_grad = self.grad_fn, self._out_index, self._requires_grad
        return old

    def _rebind(self, name: str, result: "Tensor") -> "Tensor":
        """A recorded in-place op: self becomes the op's output.

        The old array is left untouched (the node may have saved it) and self is
        rebound to the result; the version bump makes any other node that saved
        self fail loudly at backward instead of reading the new values.
        """
        self._check_result(name, result)
        if result.dtype != self.dtype:  # h.mul_(f): computed in float32, rounded into float16 (recorded)
            result = tinyamp.ops.cast(result, self.dtype)
        self.array = result.array
        self.grad_fn, self._out_index, self._requires_grad = result.grad_fn, result._out_index, True
        self._version[0] += 1
        self._storage = None  # a new array: earlier aliases keep the old one
        return self

    def _write(self, name: str, result: "Tensor") -> "Tensor":
        """An unrecorded in-place op: write into self's buffer (views see it), in self's dtype."""
        self._check_result(name, result)
        self._store(name, ..., result.array)
        return self

    def _store(self, name: str, key: Any, value: Any) -> None:
        """``data[key] = value`` (cast to self's dtype) and a version bump: every unrecorded write."""
        try:
            self.array[key] = value
        except IndexError as exc:
            raise IndexError(f"{name}: {exc} (tensor of shape {list(self.shape)}, "
                             f"{dt.dtype_name(self.dtype)})") from None
        except ValueError:
            if not getattr(self.array.flags, "writeable", True) and 0 not in self.array.strides:
                # A read-only NumPy array (``from_numpy`` of a non-writeable one): PyTorch would write
                # into it (its warning says that is undefined behaviour); tinyamp refuses.
                raise RuntimeError(f"{name}: the tensor (shape {list(self.shape)}) shares the memory of a "
                                   f"read-only NumPy array (from_numpy of a non-writeable array?); clone() it, "
                                   f"or make the array writeable, before writing") from None
            if not getattr(self.array.flags, "writeable", True):
                # NumPy's broadcast views (expand) are read-only; PyTorch refuses the write too.
                raise RuntimeError(f"{name}: unsupported operation: more than one element of the written-to "
                                   f"tensor (shape {list(self.shape)}, an expanded view) refers to a single "
                                   f"memory location. Please clone() the tensor before performing the "
                                   f"operation.") from None
            raise
        widened.forget()  # a kept widening of this array would be stale
        self._version[0] += 1
        if self._storage is not None:
            self._storage[0] += 1
            ALIASED_WRITES[0] += 1

    def _inplace_binary(self, name: str, op: Callable, other: Any) -> "Tensor":
        if self._check_inplace(name, other):
            return self._rebind(name, op(self._old_value(), other))
        with tinyamp.no_grad():
            result = op(self, other)
        return self._write(name, result)

    def add_(self, other: Any, alpha: Any = 1) -> "Tensor":
        other, alpha = _alpha_first("add_", other, alpha)
        if alpha != 1:
            other = other * alpha
        return self._inplace_binary("add_", tinyamp.ops.add, other)

    def sub_(self, other: Any, alpha: Any = 1) -> "Tensor":
        other, alpha = _alpha_first("sub_", other, alpha)
        if alpha != 1:
            other = other * alpha
        return self._inplace_binary("sub_", tinyamp.ops.sub, other)

    def mul_(self, other: Any) -> "Tensor":
        return self._inplace_binary("mul_", tinyamp.ops.mul, other)

    def div_(self, other: Any) -> "Tensor":
        return self._inplace_binary("div_", tinyamp.ops.div, other)

    def lerp_(self, end: Any, weight: Any) -> "Tensor":
        """self += weight * (end - self) (``ta.lerp``), in place; recorded when end or weight needs grad."""
        weight_grad = isinstance(weight, Tensor) and weight._requires_grad
        return self._inplace_binary("lerp_", lambda x, _: tinyamp.ops.lerp(x, end, weight),
                                    weight if weight_grad else end)

    def clamp_(self, min: Any = None, max: Any = None) -> "Tensor":  # noqa: A002 - torch names
        return self._inplace_binary("clamp_", lambda x, _: tinyamp.ops.clamp(x, min, max), None)

    clip_ = clamp_

    def masked_fill_(self, mask: Any, value: Any) -> "Tensor":
        return self._inplace_binary("masked_fill_", lambda x, _: tinyamp.ops.masked_fill(x, mask, value), None)

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
        return self._fill_random("normal_", lambda t: tinyamp.nn.init.normal_(t, mean, std, generator))

    def uniform_(self, from_: float = 0, to: float = 1, *, generator: Any = None, **kwargs: Any) -> "Tensor":
        """Fill with samples from U(from, to) (``from`` is PyTorch's keyword, also accepted)."""
        from_ = kwargs.pop("from", from_)
        if kwargs:
            raise TypeError(f"uniform_() got an unexpected keyword argument {next(iter(kwargs))!r}")
        if from_ > to:
            raise RuntimeError(f"uniform_ expects to return a [from, to) range, but found from={from_} > to={to}")
        return self._fill_random("uniform_", lambda t: tinyamp.nn.init.uniform_(t, from_, to, generator))

    def copy_(self, src: "Tensor") -> "Tensor":
        """Copy ``src`` (same shape; dtype and device may differ: this *is* the explicit cast)."""
        if not isinstance(src, Tensor):
            src = tinyamp.tensor(src)
        if src.shape != self.shape:
            raise RuntimeError(f"copy_: source shape {list(src.shape)} does not match "
                               f"destination shape {list(self.shape)}")
        if self._check_inplace("copy_", src):
            converted = src.to(self.device).to(self.dtype)
            return self._rebind("copy_", tinyamp.ops.clone(converted))
        self._store("copy_", ..., _converted(backend.to_device(src.array, self.device), self.dtype))
        return self

    def __setitem__(self, key: Any, value: Any) -> None:
        if tinyamp.is_grad_enabled() and (self._requires_grad or (isinstance(value, Tensor) and value._requires_grad)):
            raise RuntimeError(f"index assignment into a tensor that requires grad (shape {list(self.shape)}) "
                               f"is not recorded by autograd; build the result with ta.where or ta.cat, "
                               f"or assign under ta.no_grad()")
        if isinstance(value, Tensor):
            # Stored in self's dtype, as PyTorch's index_put_/copy_ do (a float16
            # tensor takes a float32 value rounded; this is the explicit write).
            value = _converted(value.array, self.dtype)
        self._store("index assignment", _index_key(key), value)

    # ------------------------------------------------------ Python operators
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
        out = tinyamp.ops.getitem(self, key)
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

    # ------------------------------------------------------ method forms of ops
    def __getattr__(self, name: str) -> Any:
        # Tensor methods that are just ops (x.exp(), x.sum(dim=1), x.reshape(...)):
        # resolved through the op package at call time, one table, no copies.
        method = tinyamp.ops.TENSOR_METHODS.get(name)
        if method is None:
            raise AttributeError(f"'Tensor' object has no attribute '{name}'")
        return method.__get__(self, Tensor)


# ``t.grad``: read through the slot's own C getter (no Python frame: it is read on every step),
# written through ``_set_grad``'s checks.
Tensor.grad = property(Tensor.__dict__["_grad"].__get__, Tensor._set_grad,  # type: ignore[assignment]
                       doc="The gradient accumulated by backward (None until then).")


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


def is_tensor(obj: Any) -> bool:
    """True when ``obj`` is a Tensor (an ``nn.Parameter`` included), as ``torch.is_tensor``."""
    return isinstance(obj, Tensor)


def _assert(condition: Any, message: str) -> None:
    """``torch._assert``: raise AssertionError(message) unless ``condition`` holds (a Tensor is read on the host)."""
    if not condition:
        raise AssertionError(message)
