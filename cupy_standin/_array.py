"""The stand-in's ``ndarray``: CuPy's array type and strictness over NumPy views of pool memory.

An array is a NumPy view (``_a``) of a block from the stand-in's memory pool,
plus the ``MemoryPointer`` that keeps the block alive. The NumPy view is
private: the array is *not* an ``numpy.ndarray`` and converts to one only
explicitly, as a CuPy array does:

- ``numpy.asarray(x)`` raises CuPy's ``TypeError`` ("Implicit conversion to a
  NumPy array is not allowed..."); ``x.get()``, ``cupy.asnumpy(x)``,
  ``x.item()``, ``x.tolist()``, ``bool/int/float(x)`` and ``repr(x)`` copy to
  the host and count a device-to-host copy and a synchronisation.
- a NumPy array given to an operation raises ``TypeError: Unsupported type
  <class 'numpy.ndarray'>``; Python and NumPy scalars are fine.
- results that NumPy would make scalars stay 0-d device arrays.
- views (basic indexing, ``reshape`` of a contiguous array, ``transpose``,
  ``swapaxes``, ``expand_dims``, ``broadcast_to``) share memory and cost no
  launch; anything that makes new values launches one kernel and allocates.
- boolean-mask indexing and ``nonzero`` read a count on the host (a sync).

NumPy's floating-point warnings are silenced inside each operation: a GPU
never warns about an overflow.
"""

from __future__ import annotations

import functools
import math
import sys
from typing import Any, Callable

import numpy as np

from . import _capture, _memory
from ._counters import counters, footprint
from ._device import Device

PYTHON_SCALARS = (int, float, bool, complex)
IMPLICIT_CONVERSION = ("Implicit conversion to a NumPy array is not allowed. "
                       "Please use `.get()` to construct a NumPy array explicitly.")
_quiet = functools.partial(np.errstate, all="ignore")  # a fresh errstate each time: it is not reentrant

try:  # NumPy 2 keeps its floating-point error state in a context variable; setting it directly
    # costs a third of np.errstate, which the hot paths (every ufunc and reduction) pay.
    from numpy._core._ufunc_config import _extobj_contextvar as _ERRSTATE
    with np.errstate(all="ignore"):
        _IGNORE_ALL = _ERRSTATE.get()
except (ImportError, AttributeError):  # pragma: no cover - another NumPy: the public errstate
    _ERRSTATE = None


def quiet_call(function: Any, *args: Any, **kwargs: Any) -> Any:
    """``function(*args, **kwargs)`` with NumPy's floating-point warnings off (a GPU never warns)."""
    if _ERRSTATE is None:  # pragma: no cover
        with _quiet():
            return function(*args, **kwargs)
    token = _ERRSTATE.set(_IGNORE_ALL)
    try:
        return function(*args, **kwargs)
    finally:
        _ERRSTATE.reset(token)


class Flags:
    """``x.flags``: ``c_contiguous``, ``f_contiguous``, ``owndata`` (also as ``flags["C_CONTIGUOUS"]``)."""

    __slots__ = ("c_contiguous", "f_contiguous", "owndata")

    def __init__(self, c_contiguous: bool, f_contiguous: bool, owndata: bool) -> None:
        self.c_contiguous, self.f_contiguous, self.owndata = c_contiguous, f_contiguous, owndata

    def __getitem__(self, name: str) -> bool:
        return {"C_CONTIGUOUS": self.c_contiguous, "F_CONTIGUOUS": self.f_contiguous,
                "OWNDATA": self.owndata}[name]

    def __repr__(self) -> str:
        return (f"  C_CONTIGUOUS : {self.c_contiguous}\n  F_CONTIGUOUS : {self.f_contiguous}\n"
                f"  OWNDATA : {self.owndata}")


# ----------------------------------------------------------------- creation
def empty(shape: Any, dtype: Any = float, strides: "tuple | None" = None) -> "ndarray":
    """A new array on a fresh pool block (uninitialised: it holds whatever the block held)."""
    dtype = np.dtype(dtype)
    shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(n) for n in shape)
    if any(n < 0 for n in shape):
        raise ValueError(f"negative dimensions are not allowed: {shape}")
    return _allocate(shape, dtype, math.prod(shape) * dtype.itemsize, strides)


def _allocate(shape: tuple, dtype: np.dtype, nbytes: int, strides: "tuple | None") -> "ndarray":
    """``empty`` for a checked shape and dtype: the hot path of every result."""
    memptr = (getattr(_memory._thread_local, "allocator", None) or _memory._current_allocator)(nbytes)
    if nbytes:
        mem = memptr.mem
        view = np.ndarray(shape, dtype, buffer=mem.buffer, offset=memptr.ptr - mem.ptr, strides=strides)
    else:
        view = np.empty(shape, dtype)
    made = object.__new__(ndarray)
    made._a, made._data, made._base = view, memptr, None
    return made


def _dense_strides(result: np.ndarray) -> "tuple | None":
    """``result``'s strides when they describe a dense, gap-free layout (NumPy's order='K'), else None (C)."""
    if result.flags.c_contiguous or result.ndim < 2:
        return None
    if result.flags.f_contiguous:
        return result.strides
    if all(s > 0 for s in result.strides):
        extent = sum((n - 1) * s for n, s in zip(result.shape, result.strides)) + result.itemsize
        if extent == result.nbytes:
            return result.strides
    return None


def read_bytes(arrays: tuple) -> int:
    """Bytes a kernel reads from ``arrays`` (stand-in arrays): each distinct view's elements once."""
    if len(arrays) == 1:
        return footprint(arrays[0]._a)
    seen, total = set(), 0
    for a in arrays:
        view = a._a
        key = (view.__array_interface__["data"][0], view.shape, view.strides)
        if key not in seen:
            seen.add(key)
            total += footprint(view)
    return total


def adopt(result: Any, kernel: str, keep_layout: bool = False, read: int = 0) -> "ndarray":
    """A device array holding ``result`` (a host NumPy value just computed "on the device"): one launch.

    ``keep_layout`` keeps an F-ordered or permuted dense layout (CuPy's
    ``astype`` with order='K'); otherwise the result is C-contiguous, as CuPy's
    ufunc and reduction outputs are. Not recorded by a capture: device work
    goes through :func:`produce` or :func:`run`.
    """
    if type(result) is not np.ndarray:
        result = np.asarray(result)
    out = _allocate(result.shape, result.dtype, result.nbytes, _dense_strides(result) if keep_layout else None)
    if result.size:
        np.copyto(out._a, result, casting="unsafe")
    counters.launch(kernel, read, out.nbytes)
    return out


def produce(kernel: str, compute: Callable[[], Any], *arrays: "ndarray", keep_layout: bool = False,
            read: "int | None" = None) -> "ndarray":
    """A new device array holding ``compute()``: one launch of ``kernel``, reading ``arrays`` (or ``read``
    bytes) and writing the result.

    While a stream captures, the node recorded writes ``compute()`` into the
    same memory at each replay, so ``compute`` must close over NumPy views
    (``x._a``) and scalars, never over stand-in arrays (a graph does not keep
    its arrays alive). ``arrays`` are the stand-in arrays it reads.
    """
    out = adopt(compute(), kernel, keep_layout, read_bytes(arrays) if read is None else read)
    if _capture.active is not None:
        view = out._a
        _capture.record(kernel, lambda: _write(view, compute()), (*arrays, out))
    return out


def run(kernel: str, action: Callable[[], None], *arrays: "ndarray", moved: "tuple[int, int]" = (0, 0)) -> None:
    """Do ``action`` (an in-place write into device memory): one launch of ``kernel`` reading and writing
    ``moved`` bytes (unless declared, see ``_counters``), recorded by a capture."""
    action()
    counters.launch(kernel, *moved)
    if _capture.active is not None:
        _capture.record(kernel, action, arrays)


def _write(view: np.ndarray, result: Any) -> None:
    if view.size:
        np.copyto(view, result, casting="unsafe")


def operand(value: Any) -> Any:
    """What NumPy computes with for one argument of a device operation, or CuPy's TypeError."""
    kind = type(value)
    if kind is ndarray:
        return value._a
    if kind in PYTHON_SCALARS or isinstance(value, np.generic):
        return value
    raise TypeError(f"Unsupported type {kind}")


def host_copy(array: "ndarray", *, blocking: bool = True, order: str = "K", cause: str = "get") -> np.ndarray:
    """A host copy of ``array``: one device-to-host copy, and a synchronisation when blocking."""
    counters.add("d2h", cause)
    if blocking:
        counters.add("syncs", cause)
    return np.array(array._a, copy=True, order=order)


def host_to_device(value: Any, dtype: Any = None) -> "ndarray":
    """``value`` (NumPy array, list, scalar) copied to a new device array: one host-to-device copy."""
    host = np.asarray(value, dtype=dtype)
    if host.dtype == object:
        raise ValueError(f"Unsupported dtype {host.dtype}")
    out = empty(host.shape, host.dtype)
    if host.size:
        np.copyto(out._a, host)
    counters.add("h2d", "pinned" if _memory.is_pinned(host) else "pageable")
    return out


# ------------------------------------------------------------------ indexing
def _is_basic(key: Any) -> bool:
    kind = type(key)
    return kind is int or kind is slice or key is None or key is Ellipsis or (
        isinstance(key, np.integer) and not isinstance(key, np.bool_))


def _index_operand(key: Any, keep: list) -> Any:
    """One advanced index as NumPy sees it; host index arrays go to the device first (CuPy does too).

    A device copy made here is appended to ``keep``: its pool block must stay
    allocated while NumPy reads the view.
    """
    if type(key) is ndarray:
        if key.dtype == np.bool_:
            _read_mask_count()
        return key._a
    if isinstance(key, (np.ndarray, list, tuple, bool, np.bool_)):
        host = np.asarray(key)
        if host.size == 0 and isinstance(key, (list, tuple)):
            host = host.astype(np.int32)  # an empty list means no indices, not an empty mask
        if host.dtype.kind not in "biu":
            raise IndexError(f"arrays used as indices must be of integer or boolean type (actual: {host.dtype.type})")
        device = host_to_device(host)
        keep.append(device)
        if host.dtype == np.bool_:
            _read_mask_count()
        return device._a
    raise IndexError("only integers, slices (`:`), ellipsis (`...`), numpy.newaxis (`None`) and integer or "
                     "boolean arrays are valid indices")


def _read_mask_count() -> None:
    """A boolean mask's number of True values is scanned on the device and read by the host."""
    counters.launch("scan")
    counters.add("d2h", "mask")
    counters.add("syncs", "mask")


def _split_key(key: Any, keep: list) -> tuple[tuple, bool]:
    """(the key as NumPy indexes ``_a`` with it, whether every part is basic); see ``_index_operand``."""
    parts = key if type(key) is tuple else (key,)
    if all(_is_basic(k) for k in parts):
        if Ellipsis not in parts:
            parts = parts + (Ellipsis,)  # a view even when every axis gets an integer (CuPy: a 0-d view)
        return parts, True
    return tuple(k if _is_basic(k) else _index_operand(k, keep) for k in parts), False


def _wrapped(shape: tuple, parts: tuple) -> tuple:
    """CuPy's rule for integer-array indices, in reads and writes: each is taken modulo its axis's length
    (unless 0), so an index out of range wraps around rather than raising (``_routines_indexing.pyx``:
    ``_prepare_array_indexing`` for ``take``, ``indices % adim`` in the scatter kernels of ``__setitem__``)."""
    taking = [0 if k is None or k is Ellipsis else k.ndim if getattr(k, "dtype", None) == np.bool_ else 1
              for k in parts]
    out, axis = [], 0
    for k, took in zip(parts, taking):
        if k is Ellipsis:
            axis += len(shape) - sum(taking)
        elif isinstance(k, np.ndarray) and k.dtype.kind in "iu" and axis < len(shape) and shape[axis]:
            k = np.mod(k, shape[axis])
        out.append(k)
        axis += took
    return tuple(out)


class ndarray:  # noqa: N801 - CuPy's name
    """``cupy.ndarray`` of the stand-in (see the module docstring)."""

    __slots__ = ("_a", "_data", "_base", "__weakref__")
    __array_priority__ = 100
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, shape: Any, dtype: Any = float, memptr: Any = None, strides: Any = None,
                 order: str = "C") -> None:
        if memptr is None:
            made = empty(shape, dtype, strides)
            self._a, self._data, self._base = made._a, made._data, None
            return
        dtype = np.dtype(dtype)
        shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(shape)
        nbytes = math.prod(shape) * dtype.itemsize
        buffer, offset = _memory.resolve(memptr.ptr, nbytes, "cupy.ndarray(memptr=...)")
        self._a = np.ndarray(shape, dtype, buffer=buffer, offset=offset, strides=strides)
        self._data, self._base = memptr, None

    @classmethod
    def _make(cls, view: np.ndarray, data: Any, base: "ndarray | None") -> "ndarray":
        made = object.__new__(cls)
        made._a, made._data, made._base = view, data, base
        return made

    def _view(self, view: np.ndarray) -> "ndarray":
        """A new array sharing this one's memory (no launch, no allocation)."""
        return ndarray._make(view, self._data, self if self._base is None else self._base)

    # ------------------------------------------------------------ attributes
    shape = property(lambda self: self._a.shape)
    dtype = property(lambda self: self._a.dtype)
    ndim = property(lambda self: self._a.ndim)
    size = property(lambda self: self._a.size)
    nbytes = property(lambda self: self._a.nbytes)
    itemsize = property(lambda self: self._a.itemsize)
    strides = property(lambda self: self._a.strides)
    base = property(lambda self: self._base)

    @property
    def flags(self) -> Flags:
        flags = self._a.flags
        return Flags(flags.c_contiguous, flags.f_contiguous, self._base is None)

    @property
    def data(self) -> "_memory.MemoryPointer":
        """The ``MemoryPointer`` of this array's first element (``x.data.ptr``)."""
        mem = self._data.mem
        if self._a.size == 0 or mem.buffer is None:
            return self._data
        return _memory.MemoryPointer(mem, self._a.__array_interface__["data"][0] - mem.ptr)

    @property
    def device(self) -> Device:
        return Device(self._data.device_id)

    @property
    def T(self) -> "ndarray":  # noqa: N802
        return self._view(self._a.T)

    @property
    def mT(self) -> "ndarray":  # noqa: N802
        return self._view(self._a.swapaxes(-1, -2))

    # ------------------------------------------------------- host transfers
    def get(self, stream: Any = None, order: str = "C", out: "np.ndarray | None" = None,
            blocking: bool = True) -> np.ndarray:
        """A NumPy copy (device-to-host copy; waits for the device unless ``blocking=False``)."""
        if order == "C" and not self._a.flags.c_contiguous and self._a.size:
            counters.launch("copy")  # CuPy makes a contiguous device copy first
        host = host_copy(self, blocking=blocking, order=order)
        if out is None:
            return host
        if not isinstance(out, np.ndarray) or out.shape != self.shape or out.dtype != self.dtype:
            raise ValueError(f"get(out=...): out must be a numpy.ndarray of shape {self.shape} and dtype "
                             f"{self.dtype}")
        out[...] = host
        return out

    def set(self, arr: np.ndarray, stream: Any = None) -> None:
        """Copy a NumPy array of the same shape and dtype into this array (host-to-device)."""
        if not isinstance(arr, np.ndarray) or arr.shape != self.shape or arr.dtype != self.dtype:
            raise ValueError(f"set: expected a numpy.ndarray of shape {self.shape} and dtype {self.dtype}")
        self._a[...] = arr
        counters.add("h2d", "pinned" if _memory.is_pinned(arr) else "pageable")

    def item(self) -> Any:
        if self.size != 1:
            raise ValueError("can only convert an array of size 1 to a Python scalar")
        return host_copy(self, cause="item").item()

    def tolist(self) -> Any:
        return host_copy(self, cause="tolist").tolist()

    def tobytes(self, order: str = "C") -> bytes:
        return host_copy(self, cause="tobytes").tobytes(order)

    def __bool__(self) -> bool:
        if self.size == 1:
            return bool(host_copy(self, cause="bool"))
        if self.size == 0:
            raise ValueError("The truth value of an empty array is ambiguous. Use `array.size > 0` "
                             "to check that an array is not empty.")
        raise ValueError("The truth value of an array with more than one element is ambiguous. "
                         "Use a.any() or a.all()")

    def __int__(self) -> int:
        return int(host_copy(self, cause="int"))

    def __float__(self) -> float:
        return float(host_copy(self, cause="float"))

    def __complex__(self) -> complex:
        return complex(host_copy(self, cause="complex"))

    def __repr__(self) -> str:
        return repr(host_copy(self, cause="repr"))

    def __str__(self) -> str:
        return str(host_copy(self, cause="str"))

    def __format__(self, spec: str) -> str:
        return format(host_copy(self, cause="format"), spec)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        raise TypeError(IMPLICIT_CONVERSION)

    def __copy__(self) -> "ndarray":
        return self.copy()

    def __deepcopy__(self, memo: dict) -> "ndarray":
        return self.copy()

    # ---------------------------------------------------- NumPy protocols
    def __array_function__(self, func: Any, types: tuple, args: tuple, kwargs: dict) -> Any:
        module = sys.modules[__package__]  # the stand-in's cupy namespace (this package)
        for part in func.__module__.split(".")[1:]:
            module = getattr(module, part, None)
            if module is None:
                return NotImplemented
        ours = getattr(module, func.__name__, None)
        if ours is None or ours is func or not all(issubclass(t, ndarray) for t in types):
            return NotImplemented
        return ours(*args, **kwargs)

    # ---------------------------------------------------------- container
    def __len__(self) -> int:
        if self.ndim == 0:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def __iter__(self) -> Any:
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d array")
        return (self[i] for i in range(self.shape[0]))

    def __getitem__(self, key: Any) -> "ndarray":
        keep: list = []
        parts, basic = _split_key(key, keep)
        if basic:
            return self._view(self._a[parts])
        view = self._a
        return produce("take", lambda: view[_wrapped(view.shape, parts)], self, *keep)

    def __setitem__(self, key: Any, value: Any) -> None:
        keep: list = []  # device copies of host indices and values, alive until the write is done
        parts, basic = _split_key(key, keep)
        kind = type(value)
        if kind is ndarray:
            source = value._a
        elif kind in PYTHON_SCALARS or isinstance(value, np.generic):
            source = value
        elif isinstance(value, (np.ndarray, list, tuple)):
            host = np.asarray(value, dtype=self.dtype)
            if basic:  # CuPy fills a basic selection from a host value, which must be a scalar
                if host.shape != ():
                    raise ValueError(f"non-scalar {'numpy.ndarray' if kind is np.ndarray else kind.__name__} "
                                     "cannot be used for fill")
                source = host[()]
            else:  # an advanced selection copies the host value to the device first
                keep.append(host_to_device(host))
                source = keep[-1]._a
        else:
            raise TypeError(f"Unsupported type {kind}")
        target = self._a

        def where() -> tuple:  # integer-array indices wrapped as they are when the write runs (or is replayed)
            return parts if basic else _wrapped(target.shape, parts)

        def write() -> None:
            with _quiet():
                target[where()] = source

        selected = target[where()]  # a view (basic) or a copy of the selection (advanced): its size is what is written
        written = footprint(selected) if basic else selected.nbytes
        read = read_bytes(tuple(keep) + ((value,) if kind is ndarray else ()))
        run("setitem" if not basic else "copy" if kind is ndarray else "fill", write, self, *keep,
            *((value,) if kind is ndarray else ()), moved=(read, written))

    # ------------------------------------------------------- shape methods
    def reshape(self, *shape: Any, order: str = "C") -> "ndarray":
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        try:
            return self._view(np.reshape(self._a, shape, order=order, copy=False))
        except ValueError as exc:
            if "copy" not in str(exc):
                raise
        view = self._a
        return produce("copy", lambda: np.reshape(view, shape, order=order), self)

    def ravel(self, order: str = "C") -> "ndarray":
        return self.reshape(-1, order=order)

    def flatten(self, order: str = "C") -> "ndarray":
        view = self._a
        return produce("copy", lambda: view.flatten(order), self)

    def view(self, dtype: Any = None) -> "ndarray":
        return self._view(self._a.view() if dtype is None else self._a.view(dtype))

    def transpose(self, *axes: Any) -> "ndarray":
        return self._view(self._a.transpose(*axes))

    def swapaxes(self, axis1: int, axis2: int) -> "ndarray":
        return self._view(self._a.swapaxes(axis1, axis2))

    def squeeze(self, axis: Any = None) -> "ndarray":
        return self._view(self._a.squeeze(axis))

    def diagonal(self, offset: int = 0, axis1: int = 0, axis2: int = 1) -> "ndarray":
        return self._view(self._a.diagonal(offset, axis1, axis2))

    # ------------------------------------------------------- value methods
    def astype(self, dtype: Any, order: str = "K", casting: Any = None, subok: Any = None,
               copy: bool = True) -> "ndarray":
        dtype = np.dtype(dtype)
        if not copy and dtype == self.dtype:
            return self
        view = self._a
        return produce("astype", lambda: quiet_call(view.astype, dtype, order=order), self, keep_layout=True)

    def copy(self, order: str = "C") -> "ndarray":
        view = self._a
        return produce("copy", lambda: view.copy(order), self, keep_layout=order != "C")

    def fill(self, value: Any) -> None:
        if type(value) is ndarray:
            if value.shape != ():
                raise ValueError("non-scalar cupy.ndarray cannot be used for fill")
            value = value.astype(self.dtype, copy=False)
            bool(value == 0)  # CuPy tests for a zero fill (a memset) on the host: a device-to-host read
            source: Any = value._a
        else:
            host = np.asarray(value, dtype=self.dtype)
            if host.shape != ():
                raise ValueError("non-scalar numpy.ndarray cannot be used for fill")
            source = host[()]
        target = self._a
        run("fill", lambda: target.__setitem__(Ellipsis, source), self, moved=(0, footprint(target)))

    # The Python operators, __array_ufunc__, __reduce__ and the value methods (sum, max, clip,
    # ...) are attached by _operators.py: they call the functions of _routines.py, which build
    # ndarrays.
