"""The stand-in's array functions: ufuncs, creation, reductions, shape, indexing and linear-algebra routines.

Each function is NumPy's, run on the arrays' private NumPy views, with CuPy's
rules around it: arguments must be stand-in arrays or scalars (a NumPy array
is CuPy's ``TypeError: Unsupported type``), a result is a new device array
(one launch, one allocation; 0-d instead of a NumPy scalar) and a view is
free. Only what tinyamp uses, and CuPy's neighbours of it, is here; anything
else raises ``AttributeError`` from the package (see ``__init__.py``).

Where CuPy's numerics differ from NumPy's and it matters to tinyamp, CuPy's
are imitated: float16/bfloat16 ``sum``/``mean``/``prod``/``cumsum``/``var``
accumulate in float32 and round once (CuPy's reduce type is float); a 16-bit
``matmul`` accumulates in float32 and returns the input dtype (NumPy with
ml_dtypes returns float32 for bfloat16).
"""

from __future__ import annotations

import builtins
import functools
from typing import Any, Callable

import ml_dtypes
import numpy as np

from . import cublas
from ._array import empty as _empty, host_to_device, ndarray, operand, produce, quiet_call, read_bytes, run
from ._counters import counters, footprint

_quiet = functools.partial(np.errstate, all="ignore")  # a fresh errstate each time: it is not reentrant
_LOW = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


def _device_array(value: Any, function: str) -> ndarray:
    """``value`` if it is a stand-in array; CuPy-style TypeError otherwise."""
    if type(value) is ndarray:
        return value
    raise TypeError(f"cupy.{function}: expected a cupy.ndarray, got {type(value)} "
                    f"(a host value must be copied with cupy.asarray first)")


def _scattered_bytes(target: ndarray, sources: list) -> int:
    """Bytes of ``target`` an indexed update (``add.at``, ``scatter_add``) touches: one element per index."""
    count = builtins.max((a.size for a in sources), default=target.size)  # max and min are cupy's below
    return builtins.min(count, target.size) * target.itemsize


def _out(out: Any, function: str) -> ndarray:
    if type(out) is not ndarray:
        raise TypeError(f"cupy.{function}: output arguments must be cupy.ndarray, got {type(out)}")
    return out


# ------------------------------------------------------------------- ufuncs
class ufunc:  # noqa: N801 - CuPy's name
    """A NumPy ufunc run as one device kernel: ``f(*args, out=None, dtype=None, casting='same_kind')``."""

    def __init__(self, numpy_ufunc: np.ufunc) -> None:
        self._ufunc = numpy_ufunc
        self.__name__ = self.name = numpy_ufunc.__name__
        self.nin, self.nout = numpy_ufunc.nin, numpy_ufunc.nout

    def __call__(self, *args: Any, out: Any = None, dtype: Any = None, casting: str = "same_kind") -> Any:
        if len(args) > self.nin:  # an output given by position, as NumPy allows
            args, out = args[:self.nin], args[self.nin]
        values = [operand(a) for a in args]
        devices = [a for a in args if type(a) is ndarray]
        function = self._ufunc
        if out is not None:
            target = _out(out, self.name)
            view = target._a
            run(self.name, lambda: quiet_call(function, *values, out=view, dtype=dtype, casting=casting),
                target, *devices, moved=(read_bytes(tuple(devices)), footprint(view)))
            return target
        return produce(self.name, lambda: quiet_call(function, *values, dtype=dtype, casting=casting), *devices)

    def at(self, a: ndarray, indices: Any, b: Any = None) -> None:
        """Unbuffered in-place ``a[indices] op= b`` (``cupy.add.at``), one launch."""
        target = _device_array(a, f"{self.name}.at")
        index = tuple(operand(i) for i in indices) if type(indices) is tuple else operand(indices)
        view, function = target._a, self._ufunc
        extra = () if b is None else (operand(b),)
        devices = [x for x in ((indices if type(indices) is tuple else (indices,)) + (b,)) if type(x) is ndarray]
        touched = _scattered_bytes(target, devices)
        run(f"{self.name}.at", lambda: quiet_call(function.at, view, index, *extra), target, *devices,
            moved=(read_bytes(tuple(devices)) + touched, touched))

    def __repr__(self) -> str:
        return f"<ufunc '{self.name}'>"


_UFUNCS = ["add", "subtract", "multiply", "divide", "true_divide", "floor_divide", "remainder", "mod", "fmod",
           "power", "float_power", "negative", "positive", "absolute", "fabs", "sign", "copysign", "reciprocal",
           "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "cbrt", "square", "sin", "cos", "tan",
           "arcsin", "arccos", "arctan", "arctan2", "sinh", "cosh", "tanh", "arcsinh", "arccosh", "arctanh",
           "maximum", "minimum", "fmax", "fmin", "equal", "not_equal", "less", "less_equal", "greater",
           "greater_equal", "logical_and", "logical_or", "logical_xor", "logical_not", "isfinite", "isinf",
           "isnan", "signbit", "floor", "ceil", "trunc", "rint", "bitwise_and", "bitwise_or", "bitwise_xor",
           "invert", "left_shift", "right_shift", "hypot", "nextafter", "ldexp", "frexp", "modf"]
for _name in _UFUNCS:
    globals()[_name] = ufunc(getattr(np, _name))
globals()["abs"] = globals()["absolute"]  # cupy.abs


def clip(a: ndarray, a_min: Any = None, a_max: Any = None, out: Any = None, **kwargs: Any) -> ndarray:
    """max(min(a, a_max), a_min), one kernel."""
    a = _device_array(a, "clip")
    view, low, high = a._a, operand(a_min) if a_min is not None else None, operand(a_max) if a_max is not None \
        else None
    devices = [a] + [x for x in (a_min, a_max) if type(x) is ndarray]
    if out is not None:
        target = _out(out, "clip")._a
        run("clip", lambda: np.copyto(target, quiet_call(np.clip, view, low, high), casting="unsafe"), out, *devices,
            moved=(read_bytes(tuple(devices)), footprint(target)))
        return out
    return produce("clip", lambda: quiet_call(np.clip, view, low, high), *devices)


def around(a: ndarray, decimals: int = 0, out: Any = None) -> ndarray:
    x = _device_array(a, "around")
    view = x._a
    return produce("round", lambda: np.round(view, decimals), x)


round = around  # noqa: A001 - cupy.round


def where(condition: Any, x: Any = None, y: Any = None) -> Any:
    """Three arguments: an elementwise choice (one kernel). One argument: ``nonzero`` (a sync)."""
    if x is None and y is None:
        return nonzero(condition)
    if x is None or y is None:
        raise ValueError("Must provide both 'x' and 'y' or neither.")
    values = (operand(condition), operand(x), operand(y))
    return produce("where", lambda: quiet_call(np.where, *values),
                   *(v for v in (condition, x, y) if type(v) is ndarray))


def isclose(a: Any, b: Any, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> ndarray:
    left, right = operand(a), operand(b)
    return produce("isclose", lambda: quiet_call(np.isclose, left, right, rtol=rtol, atol=atol, equal_nan=equal_nan),
                   *(v for v in (a, b) if type(v) is ndarray))


def _cublas_product(x: ndarray, y: ndarray) -> None:
    """CuPy computes a floating matrix product with its cuBLAS wrappers (a vector dot product excepted, a
    reduction kernel), so it refuses one while the current stream captures, before anything runs."""
    if x.ndim == 1 and y.ndim == 1:
        return
    if x.dtype.kind in "fc" or x.dtype in _LOW or y.dtype.kind in "fc" or y.dtype in _LOW:
        cublas.refuse_while_capturing()


def matmul(a: Any, b: Any, out: Any = None, dtype: Any = None) -> ndarray:
    """``a @ b``: float32 accumulation for 16-bit inputs, rounded once to their dtype (CuPy's cuBLAS paths)."""
    x, y = _device_array(a, "matmul"), _device_array(b, "matmul")
    if x.ndim == 0 or y.ndim == 0:
        raise ValueError("matmul: Input operand 1 does not have enough dimensions")
    _cublas_product(x, y)
    left, right, low = x._a, y._a, x.dtype if x.dtype in _LOW and x.dtype == y.dtype else None

    def compute() -> Any:
        if low is not None:
            return np.matmul(left.astype(np.float32), right.astype(np.float32)).astype(low)
        return np.matmul(left, right)

    if out is not None:
        target = _out(out, "matmul")._a
        run("matmul", lambda: np.copyto(target, compute(), casting="unsafe"), out, x, y,
            moved=(read_bytes((x, y)), footprint(target)))
        return out
    return produce("matmul", compute, x, y)


def dot(a: Any, b: Any, out: Any = None) -> ndarray:
    x, y = _device_array(a, "dot"), _device_array(b, "dot")
    _cublas_product(x, y)
    left, right = x._a, y._a
    return produce("dot", lambda: np.dot(left, right), x, y)


# ----------------------------------------------------------------- creation
def empty(shape: Any, dtype: Any = float, order: str = "C") -> ndarray:
    """An uninitialised array: one allocation, no launch."""
    if order not in ("C", "F"):
        raise ValueError(f"order not understood: {order!r}")
    if order == "F":
        return empty(tuple(reversed(_shape(shape))), dtype).T
    return _empty(shape, dtype)


def _shape(shape: Any) -> tuple:
    return (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(n) for n in shape)


def zeros(shape: Any, dtype: Any = float, order: str = "C") -> ndarray:
    """Zeros: one allocation and a memset."""
    out = empty(shape, dtype, order)
    view = out._a
    run("memset", lambda: view.fill(0), out, moved=(0, view.nbytes))
    return out


def ones(shape: Any, dtype: Any = float, order: str = "C") -> ndarray:
    out = empty(shape, dtype, order)
    view = out._a
    run("fill", lambda: view.fill(1), out, moved=(0, view.nbytes))
    return out


def full(shape: Any, fill_value: Any, dtype: Any = None, order: str = "C") -> ndarray:
    if dtype is None:
        dtype = fill_value.dtype if type(fill_value) is ndarray else np.asarray(fill_value).dtype
    out = empty(shape, dtype, order)
    copyto(out, fill_value, casting="unsafe")
    return out


def _like(a: Any, dtype: Any, shape: Any) -> tuple:
    a = _device_array(a, "*_like")
    return (a.shape if shape is None else shape), (a.dtype if dtype is None else dtype)


def empty_like(a: Any, dtype: Any = None, order: str = "K", subok: Any = None, shape: Any = None) -> ndarray:
    return empty(*_like(a, dtype, shape))


def zeros_like(a: Any, dtype: Any = None, order: str = "K", subok: Any = None, shape: Any = None) -> ndarray:
    return zeros(*_like(a, dtype, shape))


def ones_like(a: Any, dtype: Any = None, order: str = "K", subok: Any = None, shape: Any = None) -> ndarray:
    return ones(*_like(a, dtype, shape))


def full_like(a: Any, fill_value: Any, dtype: Any = None, order: str = "K", subok: Any = None,
              shape: Any = None) -> ndarray:
    new_shape, new_dtype = _like(a, dtype, shape)
    return full(new_shape, fill_value, new_dtype)


def arange(start: Any, stop: Any = None, step: Any = 1, dtype: Any = None) -> ndarray:
    return produce("arange", lambda: np.arange(start, stop, step, dtype=dtype) if stop is not None
                   else np.arange(start, dtype=dtype))


def linspace(start: Any, stop: Any, num: int = 50, endpoint: bool = True, retstep: bool = False,
             dtype: Any = None, axis: int = 0) -> ndarray:
    return produce("linspace", lambda: np.linspace(start, stop, num, endpoint=endpoint, dtype=dtype, axis=axis))


def eye(N: int, M: "int | None" = None, k: int = 0, dtype: Any = float, order: str = "C") -> ndarray:  # noqa: N803
    out = zeros((N, N if M is None else M), dtype)
    view = out._a
    run("fill", lambda: np.copyto(view, np.eye(N, M, k, dtype=dtype)), out, moved=(0, view.nbytes))
    return out


def identity(n: int, dtype: Any = float) -> ndarray:
    return eye(n, dtype=dtype)


def asarray(a: Any, dtype: Any = None, order: Any = None, *, blocking: bool = False) -> ndarray:
    """A device array: ``a`` itself (cast if ``dtype`` differs) or a host value copied to the device."""
    if type(a) is ndarray:
        return a if dtype is None else a.astype(dtype, copy=False)
    return host_to_device(a, dtype)


def array(obj: Any, dtype: Any = None, copy: Any = True, order: str = "K", subok: bool = False,
          ndmin: int = 0, *, blocking: bool = False) -> ndarray:
    """``asarray`` that copies a device array unless ``copy`` is False/None."""
    if type(obj) is ndarray:
        result = obj.astype(obj.dtype if dtype is None else dtype, copy=bool(copy))
    else:
        result = host_to_device(obj, dtype)
    while result.ndim < ndmin:
        result = result[None]
    return result


def ascontiguousarray(a: Any, dtype: Any = None) -> ndarray:
    a = _device_array(a, "ascontiguousarray")
    dtype = a.dtype if dtype is None else np.dtype(dtype)
    if a._a.flags.c_contiguous and dtype == a.dtype:
        return a
    view = a._a
    return produce("copy", lambda: np.ascontiguousarray(view, dtype=dtype), a)


def asnumpy(a: Any, stream: Any = None, order: str = "C", out: Any = None, blocking: bool = True) -> np.ndarray:
    """A host copy of a device array (a NumPy value passes through unchanged, as in CuPy)."""
    if type(a) is ndarray:
        return a.get(stream=stream, order=order, out=out, blocking=blocking)
    return np.asarray(a, order=order)


def copyto(dst: Any, src: Any, casting: str = "same_kind", where: Any = None) -> None:
    """``dst[...] = src`` with broadcasting, one kernel; a host source must be a scalar, as in CuPy. As CuPy's,
    one ``cudaMemcpyAsync`` instead when ``src`` has ``dst``'s dtype and (here) shape and both are contiguous."""
    dst = _out(dst, "copyto")
    if where is None and type(src) is ndarray and src.dtype == dst.dtype and src.shape == dst.shape and dst.size:
        both = src.flags, dst.flags
        if builtins.all(f.c_contiguous for f in both) or builtins.all(f.f_contiguous for f in both):
            dst.data.copy_from_device_async(src.data, src.nbytes)
            return
    if isinstance(src, np.ndarray):
        if src.size != 1:
            raise ValueError("non-scalar numpy.ndarray cannot be used for copyto")
        src = src.squeeze()[()]
    value, mask, target = operand(src), True if where is None else operand(where), dst._a
    sources = tuple(v for v in (src, where) if type(v) is ndarray)
    run("copy", lambda: quiet_call(np.copyto, target, value, casting=casting, where=mask), dst, *sources,
        moved=(read_bytes(sources), footprint(target)))


# --------------------------------------------------------------- reductions
def _reduction(name: str, accumulate_low_in_float32: bool) -> Callable:
    numpy_function = getattr(np, name)

    def reduce(a: Any, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False,
               **kwargs: Any) -> ndarray:
        x = _device_array(a, name)
        extra = dict(kwargs, axis=axis, keepdims=keepdims) if name not in ("cumsum", "cumprod") else dict(
            kwargs, axis=axis)
        view = x._a

        def compute() -> Any:
            with _quiet():
                if dtype is None and accumulate_low_in_float32 and view.dtype in _LOW:
                    return numpy_function(view.astype(np.float32), dtype=np.float32, **extra).astype(view.dtype)
                if accumulate_low_in_float32:
                    return numpy_function(view, dtype=dtype, **extra)
                return numpy_function(view, **extra)

        if out is not None:
            target = _out(out, name)._a
            run(name, lambda: np.copyto(target, compute(), casting="unsafe"), out, x,
                moved=(read_bytes((x,)), footprint(target)))
            return out
        return produce(name, compute, x)

    reduce.__name__ = name
    return reduce


sum = _reduction("sum", True)  # noqa: A001
prod = _reduction("prod", True)
mean = _reduction("mean", True)
var = _reduction("var", True)
std = _reduction("std", True)
cumsum = _reduction("cumsum", True)
cumprod = _reduction("cumprod", True)
amax = max = _reduction("max", False)  # noqa: A001
amin = min = _reduction("min", False)  # noqa: A001
any = _reduction("any", False)  # noqa: A001
all = _reduction("all", False)  # noqa: A001
nansum = _reduction("nansum", True)
nanmax = _reduction("nanmax", False)
nanmin = _reduction("nanmin", False)


def _kernel(kernel: str, function: Callable, *operands: Any, **kwargs: Any) -> ndarray:
    """``function(*operands, **kwargs)`` on the operands' device memory as one kernel (a capture records it).

    Each operand is a stand-in array (read through its view) or a host value
    (frozen, as a launch argument is).
    """
    values = [operand(v) if type(v) is ndarray else v for v in operands]
    return produce(kernel, lambda: quiet_call(function, *values, **kwargs),
                   *(v for v in operands if type(v) is ndarray))


def argmax(a: Any, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False) -> ndarray:
    return _kernel("argmax", np.argmax, _device_array(a, "argmax"), axis=axis, keepdims=keepdims)


def argmin(a: Any, axis: Any = None, dtype: Any = None, out: Any = None, keepdims: bool = False) -> ndarray:
    return _kernel("argmin", np.argmin, _device_array(a, "argmin"), axis=axis, keepdims=keepdims)


def count_nonzero(a: Any, axis: Any = None) -> ndarray:
    return _kernel("count_nonzero", np.count_nonzero, _device_array(a, "count_nonzero"), axis=axis)


def trace(a: Any, offset: int = 0, axis1: int = 0, axis2: int = 1, dtype: Any = None, out: Any = None) -> ndarray:
    return _kernel("trace", np.trace, _device_array(a, "trace"), offset, axis1, axis2, dtype)


# -------------------------------------------------------- sorting, searching
def nonzero(a: Any) -> tuple:
    """Indices of the non-zero elements: their number is read on the host first (a sync)."""
    x = _device_array(a, "nonzero")
    counters.launch("scan")
    counters.add("d2h", "nonzero")
    counters.add("syncs", "nonzero")
    return tuple(_kernel("nonzero", np.asarray, index) for index in np.nonzero(x._a))


def argwhere(a: Any) -> ndarray:
    x = _device_array(a, "argwhere")
    counters.launch("scan")
    counters.add("d2h", "argwhere")
    counters.add("syncs", "argwhere")
    return _kernel("argwhere", np.asarray, np.argwhere(x._a))


def sort(a: Any, axis: int = -1) -> ndarray:
    return _kernel("sort", np.sort, _device_array(a, "sort"), axis=axis)


def argsort(a: Any, axis: int = -1, kind: Any = None) -> ndarray:
    return _kernel("argsort", np.argsort, _device_array(a, "argsort"), axis=axis, kind="stable")


def partition(a: Any, kth: Any, axis: int = -1) -> ndarray:
    return _kernel("partition", np.partition, _device_array(a, "partition"), kth, axis=axis)


def searchsorted(a: Any, v: Any, side: str = "left", sorter: Any = None) -> ndarray:
    operand(v)  # CuPy's TypeError for a host array
    return _kernel("searchsorted", np.searchsorted, _device_array(a, "searchsorted"), v, side=side)


# ---------------------------------------------------------------- indexing
def take(a: Any, indices: Any, axis: Any = None, out: Any = None) -> ndarray:
    operand(indices)
    return _kernel("take", np.take, _device_array(a, "take"), indices, axis=axis)


def einsum(subscripts: str, *operands: Any, **kwargs: Any) -> ndarray:
    """``cupy.einsum``: one kernel (CuPy contracts through cuBLAS or its own kernels; NumPy's sum of products here)."""
    arrays = [_device_array(o, "einsum") for o in operands]
    return _kernel("einsum", lambda *xs: np.asarray(np.einsum(subscripts, *xs, **kwargs)), *arrays)


def take_along_axis(a: Any, indices: Any, axis: Any) -> ndarray:
    return _kernel("take_along_axis", np.take_along_axis, _device_array(a, "take_along_axis"),
                   _device_array(indices, "take_along_axis"), axis)


def put_along_axis(a: Any, indices: Any, values: Any, axis: Any) -> None:
    target, index = _device_array(a, "put_along_axis"), _device_array(indices, "put_along_axis")
    view, index_view, value = target._a, index._a, operand(values)
    sources = (index, *((values,) if type(values) is ndarray else ()))
    run("put_along_axis", lambda: np.put_along_axis(view, index_view, value, axis), target, *sources,
        moved=(read_bytes(sources), index.size * target.itemsize))


def put(a: Any, ind: Any, v: Any, mode: str = "wrap") -> None:
    target = _device_array(a, "put")
    view, index, value = target._a, operand(ind), operand(v)
    sources = tuple(x for x in (ind, v) if type(x) is ndarray)
    run("put", lambda: np.put(view, index, value, mode=mode), target, *sources,
        moved=(read_bytes(sources), np.size(index) * target.itemsize))


def repeat(a: Any, repeats: Any, axis: Any = None) -> ndarray:
    return _kernel("repeat", np.repeat, _device_array(a, "repeat"), repeats, axis=axis)


def tile(a: Any, reps: Any) -> ndarray:
    return _kernel("tile", np.tile, _device_array(a, "tile"), reps)


def diag(v: Any, k: int = 0) -> ndarray:
    return _kernel("diag", np.diag, _device_array(v, "diag"), k)


def tril(m: Any, k: int = 0) -> ndarray:
    return _kernel("tril", np.tril, _device_array(m, "tril"), k)


def triu(m: Any, k: int = 0) -> ndarray:
    return _kernel("triu", np.triu, _device_array(m, "triu"), k)


# ------------------------------------------------------------------- shape
def reshape(a: Any, newshape: Any, order: str = "C") -> ndarray:
    return _device_array(a, "reshape").reshape(newshape, order=order)


def ravel(a: Any, order: str = "C") -> ndarray:
    return _device_array(a, "ravel").ravel(order)


def transpose(a: Any, axes: Any = None) -> ndarray:
    return _device_array(a, "transpose").transpose(axes)


def swapaxes(a: Any, axis1: int, axis2: int) -> ndarray:
    return _device_array(a, "swapaxes").swapaxes(axis1, axis2)


def moveaxis(a: Any, source: Any, destination: Any) -> ndarray:
    x = _device_array(a, "moveaxis")
    return x._view(np.moveaxis(x._a, source, destination))


def squeeze(a: Any, axis: Any = None) -> ndarray:
    return _device_array(a, "squeeze").squeeze(axis)


def expand_dims(a: Any, axis: Any) -> ndarray:
    x = _device_array(a, "expand_dims")
    return x._view(np.expand_dims(x._a, axis))


def broadcast_to(array: Any, shape: Any) -> ndarray:
    """A read-only view repeating ``array`` along new or length-1 axes (no copy)."""
    x = _device_array(array, "broadcast_to")
    return x._view(np.broadcast_to(x._a, shape))


def atleast_1d(*arrays: Any) -> Any:
    out = [a if a.ndim >= 1 else a.reshape(1) for a in (_device_array(x, "atleast_1d") for x in arrays)]
    return out[0] if len(out) == 1 else out


def concatenate(arrays: Any, axis: "int | None" = 0, out: Any = None, dtype: Any = None) -> ndarray:
    parts = [_device_array(a, "concatenate") for a in arrays]
    views = [a._a for a in parts]
    return produce("concatenate", lambda: np.concatenate(views, axis=axis, dtype=dtype), *parts)


def stack(arrays: Any, axis: int = 0, out: Any = None, dtype: Any = None) -> ndarray:
    parts = [_device_array(a, "stack") for a in arrays]
    views = [a._a for a in parts]
    return produce("concatenate", lambda: np.stack(views, axis=axis, dtype=dtype), *parts)


def pad(array: Any, pad_width: Any, mode: str = "constant", **kwargs: Any) -> ndarray:
    return _kernel("pad", np.pad, _device_array(array, "pad"), pad_width, mode=mode, **kwargs)


def flip(m: Any, axis: Any = None) -> ndarray:
    x = _device_array(m, "flip")
    return x._view(np.flip(x._a, axis))


def shape(a: Any) -> tuple:
    return _device_array(a, "shape").shape


def ndim(a: Any) -> int:
    return _device_array(a, "ndim").ndim


def size(a: Any, axis: "int | None" = None) -> int:
    x = _device_array(a, "size")
    return x.size if axis is None else x.shape[axis]


def may_share_memory(a: Any, b: Any, max_work: Any = None) -> bool:
    return bool(np.may_share_memory(operand(a), operand(b)))


def shares_memory(a: Any, b: Any, max_work: Any = None) -> bool:
    return bool(np.shares_memory(operand(a), operand(b)))


# --------------------------------------------------------- dtype helpers
def result_type(*arrays_and_dtypes: Any) -> np.dtype:
    return np.result_type(*[a.dtype if type(a) is ndarray else a for a in arrays_and_dtypes])


def can_cast(from_: Any, to: Any, casting: str = "safe") -> bool:
    return np.can_cast(from_.dtype if type(from_) is ndarray else from_, to, casting)


# --------------------------------------------------------- ndarray methods
def _sort_in_place(self: ndarray, axis: int = -1, kind: Any = None) -> None:
    view = self._a
    run("sort", lambda: view.sort(axis=axis), self, moved=(view.nbytes, view.nbytes))


def _partition_in_place(self: ndarray, kth: Any, axis: int = -1) -> None:
    view = self._a
    run("partition", lambda: view.partition(kth, axis=axis), self, moved=(view.nbytes, view.nbytes))


# x.sum(...) is sum(x, ...), and so on (sort and partition work in place, as the methods do).
ARRAY_METHODS = {
    "sum": sum, "prod": prod, "mean": mean, "var": var, "std": std, "cumsum": cumsum, "cumprod": cumprod,
    "max": max, "min": min, "any": any, "all": all, "argmax": argmax, "argmin": argmin, "clip": clip,
    "round": around, "dot": dot, "nonzero": nonzero, "sort": _sort_in_place, "argsort": argsort, "take": take,
    "repeat": repeat, "trace": trace, "partition": _partition_in_place, "put": put,
}
