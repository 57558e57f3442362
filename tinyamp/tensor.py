"""Tensor: an xp array (NumPy or CuPy) plus what autograd needs to know about it.

A Tensor holds ``array`` (the raw NumPy/CuPy array), ``grad``, ``requires_grad``,
``grad_fn`` (the node that made it, None for leaves) and a version counter bumped by
in-place writes. ``t.data`` is PyTorch's: another Tensor on the same array, detached,
with its own version counter (writes through it are invisible to autograd's
saved-tensor check, as in PyTorch), but every write through the tensor or its
``.data`` bumps a storage counter they share (``_storage``, which O2 master weights
read) and ``ALIASED_WRITES`` (on which the autocast weight-cast cache empties itself at
the next outermost region), so neither keeps a copy of the old values.

In-place writes bump the version counter, so a node that saved the tensor for
backward notices the change and fails loudly (PyTorch's rule). Outside autograd
the write goes into the tensor's buffer (views see it, ``_write``); when the tape
must record it, the op runs out of place and the tensor is rebound to the result
(``_rebind``).

What builds on Tensor installs itself on the class from above, as DeZero's
``setup_variable`` does, so this module imports none of it: the rest of PyTorch's
Tensor API (operators, ``to``/``half``/``numpy``, ``add_``, ``x[i] = v``, methods that
are ops such as ``x.exp()``, the recorded in-place form ``_rebind``) from
``ops/methods.py``; ``backward`` from ``autograd/engine.py``; the conversion of
Python data (``Tensor([1.0, 2.0])``) from ``factories.py``.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from . import backend
from . import dtypes as dt
from .grad_mode import is_grad_enabled

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
    _from_data: Callable[[Any], Any]  # Python data -> a CPU array (PyTorch's rules): installed by factories.py
    # Let NumPy defer to our reflected operators (np.float32(2) * t -> t.__rmul__).
    __array_ufunc__ = None

    def __init__(self, data: Any, requires_grad: bool = False) -> None:
        storage = None
        if isinstance(data, Tensor):  # shares the array, as PyTorch shares storage
            storage = data._storage
            data = data.array
        elif not (isinstance(data, np.ndarray) or backend.is_cupy_array(data)):
            data = Tensor._from_data(data)
        else:
            data = dt.native_array(data)  # no complex, object, string arrays
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
    def dtype(self) -> Any:
        """PyTorch's ``torch.dtype`` object for the array's NumPy dtype (equal to it: ``x.dtype == np.float16``)."""
        return dt.as_public(self.array.dtype)

    @property
    def device(self) -> backend.Device:
        return backend.device_of(self.array)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.array.shape

    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

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

    # ------------------------------------------------------------ values
    def item(self) -> Any:
        if self.array.size != 1:
            raise RuntimeError(f"a Tensor with {self.array.size} elements cannot be converted to a "
                               f"Python scalar (shape {list(self.shape)})")
        return backend.to_host(self.array, _ITEM).reshape(()).item()

    def detach(self) -> "Tensor":
        """A new leaf sharing this tensor's array and version counter (and storage counter, if any)."""
        t = Tensor._wrap(self.array)
        t._version = self._version
        t._storage = self._storage
        return t

    # ------------------------------------------------------------- autograd
    # backward(gradient=None, retain_graph=None, create_graph=False, inputs=None): from autograd/engine.py.

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
        if not is_grad_enabled() or not (self._requires_grad or other_grad):
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
        self._version[0] += 1
        if self._storage is not None:
            self._storage[0] += 1
            ALIASED_WRITES[0] += 1


# ``t.grad``: read through the slot's own C getter (no Python frame: it is read on every step),
# written through ``_set_grad``'s checks.
Tensor.grad = property(Tensor.__dict__["_grad"].__get__, Tensor._set_grad,  # type: ignore[assignment]
                       doc="The gradient accumulated by backward (None until then).")
