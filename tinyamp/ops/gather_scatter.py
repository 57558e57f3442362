"""Gathers and scatters along a dim: ``gather``, ``scatter`` / ``scatter_`` (src or value) and ``scatter_add``.

``gather(x, dim, index)[i][j][k] = x[index[i][j][k]][j][k]`` (for dim 0), and the
scatters write the other way round. ``index`` is int64 (or int32) with x's number of
dims, no larger than x outside ``dim`` (nor than ``src``). The gradient of a
gather is a scatter-add (repeated indices sum, in float32 for 16-bit); that of
a scatter is ``gy`` with the written places zeroed, and a gather for ``src``.
Out-of-range indices raise (a scatter reads the index's bounds on the host, a
synchronisation on a GPU; a gather checks on the CPU only, as tinyamp's indexing).

gather is NEUTRAL; scatter_add is PROMOTE, as on PyTorch's CUDA autocast list, and so is scatter
with a src tensor (it joins two tensors' values, as cat and where do; PyTorch refuses two float dtypes
there). A float src into an integer tensor (or the reverse) is refused.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import backend
from .. import dtypes as dt
from ..precision import NEUTRAL, PROMOTE
from ..autograd.function import Function
from ..tensor import Tensor
from .shape import pad


def _full_index(xp: Any, index: Any, dim: int) -> tuple:
    """The advanced-indexing key that reads x[..., index, ...] at every position of ``index``."""
    key = []
    for d, size in enumerate(index.shape):
        if d == dim:
            key.append(index)
        else:
            key.append(xp.arange(size).reshape([-1 if e == d else 1 for e in range(index.ndim)]))
    return tuple(key)


def _scatter_add_into(xp: Any, out: Any, key: tuple, values: Any) -> None:
    if backend.is_cupy_array(out):
        backend.cuda_lib("cupyx").scatter_add(out, key, values)
    else:
        np.add.at(out, key, values)


def _describe(t: Any) -> str:
    return f"{list(t.shape)} {dt.dtype_name(t.dtype)}"


def _check(op: str, x: Tensor, dim: int, index: Any, src: "Tensor | None", bounds: bool) -> int:
    """dim as a non-negative axis, after PyTorch's checks of index (and src)."""
    n = max(x.ndim, 1)
    if not isinstance(dim, (int, np.integer)) or not -n <= dim < n:
        raise IndexError(f"{op}: Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {dim})")
    dim = int(dim) % n
    if not isinstance(index, Tensor):
        raise TypeError(f"{op}(): argument 'index' must be Tensor, not {type(index).__name__}")
    if index.dtype not in (dt.int64, dt.int32):
        raise RuntimeError(f"{op}(): Expected dtype int32/int64 for index, got {dt.dtype_name(index.dtype)} "
                           f"(index of shape {list(index.shape)})")
    if index.ndim != x.ndim and index.numel() and x.ndim:
        raise RuntimeError(f"{op}: Index tensor must have the same number of dimensions as input tensor "
                           f"(index {_describe(index)}, input {_describe(x)})")
    for d in range(index.ndim):
        if d != dim and index.shape[d] > x.shape[d]:
            raise RuntimeError(f"{op}: Size does not match at dimension {d} expected index {list(index.shape)} to "
                               f"be no larger than self {list(x.shape)} apart from dimension {dim}")
        if src is not None and index.shape[d] > src.shape[d]:
            raise RuntimeError(f"{op}: Expected index {list(index.shape)} to be no larger than src "
                               f"{list(src.shape)} in every dimension")
    if index.device != x.device or (src is not None and src.device != x.device):
        raise RuntimeError(f"{op}: expected index and src on {x.device}, got index on {index.device}"
                           + ("" if src is None else f" and src on {src.device}"))
    if bounds and index.numel() and (index.device.type == "cpu" or op != "gather"):
        ends = backend.to_host(index.device.xp.stack([index.array.min(), index.array.max()]),
                               f"{op}: the bounds check of its index")
        size = x.shape[dim] if x.ndim else 1
        for value in (int(ends[1]), int(ends[0])):
            if not 0 <= value < size:
                raise RuntimeError(f"{op}: index {value} is out of bounds for dimension {dim} with size {size}")
    return dim


class Gather(Function):
    """y = x[..., index, ...] along dim at every position of index; dx = zeros(x) scatter-added with gy"""

    precision = NEUTRAL

    def __init__(self, dim: int, index: Any) -> None:
        self.dim, self.index = dim, index

    def forward(self, xp: Any, x: Any) -> Any:
        return x[_full_index(xp, self.index, self.dim)] if x.ndim else x[()].copy()

    def backward(self, gy: Tensor) -> Tensor:
        return GatherGrad(self.dim, self.index, self.input_shapes[0])(gy)


class GatherGrad(Function):
    """dx = zeros(shape) with g added at index along dim (repeats sum); d(g) = gather(gg, dim, index)"""

    precision = NEUTRAL
    name = "gather_backward"

    def __init__(self, dim: int, index: Any, shape: tuple) -> None:
        self.dim, self.index, self.shape = dim, index, shape

    def forward(self, xp: Any, g: Any) -> Any:
        acc = dt.opmath_dtype(g.dtype)  # repeated indices add up: float32 for 16-bit, one rounding
        out = xp.zeros(self.shape, dtype=acc)
        _scatter_add_into(xp, out, _full_index(xp, self.index, self.dim), g.astype(acc, copy=False))
        return out.astype(g.dtype, copy=False)

    def backward(self, gg: Tensor) -> Tensor:
        return Gather(self.dim, self.index)(gg)


class Scatter(Function):
    """y = x with src (or a value) written at index along dim; dx = gy zeroed there, dsrc = gather(gy, dim, index)"""

    precision = PROMOTE

    def __init__(self, dim: int, index: Any, value: Any = None) -> None:
        self.dim, self.index, self.value = dim, index, value

    def forward(self, xp: Any, x: Any, *src: Any) -> Any:
        key = _full_index(xp, self.index, self.dim)
        out = x.copy()
        out[key] = src[0][tuple(slice(0, n) for n in self.index.shape)] if src else self.value
        return out

    def backward(self, gy: Tensor) -> tuple:
        zeroed = Scatter(self.dim, self.index, 0)(gy)
        if len(self.input_shapes) == 1:
            return (zeroed,)
        gathered = Gather(self.dim, self.index)(gy)
        return zeroed, _pad_to(gathered, self.input_shapes[1])


class ScatterAdd(Function):
    """y = x with src added at index along dim (repeats sum); dx = gy, dsrc = gather(gy, dim, index)"""

    precision = PROMOTE

    def __init__(self, dim: int, index: Any) -> None:
        self.dim, self.index = dim, index

    def forward(self, xp: Any, x: Any, src: Any) -> Any:
        acc = dt.opmath_dtype(x.dtype)
        out = x.astype(acc, copy=True)
        values = src[tuple(slice(0, n) for n in self.index.shape)].astype(acc, copy=False)
        _scatter_add_into(xp, out, _full_index(xp, self.index, self.dim), values)
        return out.astype(x.dtype, copy=False)

    def backward(self, gy: Tensor) -> tuple:
        return gy, _pad_to(Gather(self.dim, self.index)(gy), self.input_shapes[1])


def _pad_to(g: Tensor, shape: tuple) -> Tensor:
    """``g`` (index-shaped) zero-padded at the end of each dim to src's shape: src beyond index is unused."""
    if g.shape == shape:
        return g
    widths = []
    for have, want in reversed(list(zip(g.shape, shape))):
        widths += [0, want - have]
    return pad(g, widths)


def gather(input: Tensor, dim: int, index: Tensor, *, sparse_grad: bool = False) -> Tensor:  # noqa: A002
    """``torch.gather``: out[i][j] = input[index[i][j]][j] (dim 0), out[i][j] = input[i][index[i][j]] (dim 1)."""
    dim = _check("gather", input, dim, index, None, bounds=True)
    return Gather(dim, index.array)(input)


def scatter(input: Tensor, dim: int, index: Tensor, src: Any = None, *, value: Any = None,  # noqa: A002
            reduce: "str | None" = None) -> Tensor:
    """``torch.scatter``: a copy of input with ``src`` (a tensor, or a number) written at ``index`` along ``dim``."""
    if src is None and value is None:
        raise TypeError("scatter() missing 1 required argument: 'src' or 'value'")
    if reduce is not None:
        if reduce != "add" or not isinstance(src, Tensor):
            raise NotImplementedError(f"scatter: reduce={reduce!r} is not implemented in tinyamp (only 'add' with a "
                                      f"src tensor, which is scatter_add)")
        return scatter_add(input, dim, index, src)
    source = src if isinstance(src, Tensor) else None
    dim = _check("scatter", input, dim, index, source, bounds=True)
    if source is None:
        return Scatter(dim, index.array, value if src is None else src)(input)
    if source.dtype != input.dtype and not (source.is_floating_point() and input.is_floating_point()):
        raise RuntimeError(f"scatter(): Expected self.dtype to be equal to src.dtype (self {_describe(input)}, "
                           f"src {_describe(source)}; two floating dtypes are promoted)")
    return Scatter(dim, index.array)(input, source)


def scatter_add(input: Tensor, dim: int, index: Tensor, src: Tensor) -> Tensor:  # noqa: A002
    """``torch.scatter_add``: a copy of input with ``src`` added at ``index`` along ``dim`` (repeats sum)."""
    dim = _check("scatter_add", input, dim, index, src, bounds=True)
    return ScatterAdd(dim, index.array)(input, src)


def _in_place(name: str, op: Any) -> Any:
    def method(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        return self._inplace_binary(name, lambda x, _: op(x, *args, **kwargs),
                                    next((a for a in list(args) + list(kwargs.values()) if isinstance(a, Tensor)
                                          and a.dtype.kind == "f"), None))
    method.__name__ = name
    method.__doc__ = f"``{op.__name__}`` written into the tensor in place."
    return method


METHODS = {"gather": gather, "scatter": scatter, "scatter_add": scatter_add,
           "scatter_": _in_place("scatter_", scatter), "scatter_add_": _in_place("scatter_add_", scatter_add)}
