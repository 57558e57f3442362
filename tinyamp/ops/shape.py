"""Shape ops: views, joins, splits and padding whose backward rearranges the gradient back.

reshape/view/flatten/squeeze/unsqueeze are all one ``Reshape`` node; ``permute``
and ``transpose`` one ``Permute``. ``cat``/``stack`` and ``split``/``chunk`` are
each other's gradients; ``pad`` in constant mode is its own gradient (pad by the
negated widths crops), and the reflect/replicate/circular modes are gathers with
integer indices (``getitem``), whose gradient accumulates repeated positions.

All are NEUTRAL (they move values without arithmetic, so they run in whatever
dtype arrives) except ``cat`` and ``stack``, which are PROMOTE: joining float16
with float32 gives float32, as in PyTorch.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from .. import dtypes as dt
from ..precision import NEUTRAL, PROMOTE
from ..autograd.function import Function
from ..tensor import Tensor
from .broadcast import broadcast_to, sum_to
from .indexing import getitem


def _shape_arg(shape: tuple) -> tuple:
    """Accept both ``reshape(2, 3)`` and ``reshape((2, 3))``."""
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        return tuple(shape[0])
    return tuple(shape)


def _dim(op: str, dim: int, ndim: int, shape: Sequence[int]) -> int:
    """``dim`` as a non-negative axis of an ``ndim``-D tensor, or a clear IndexError."""
    low, high = -max(ndim, 1), max(ndim, 1) - 1
    if not isinstance(dim, (int, np.integer)) or not low <= dim <= high:
        raise IndexError(f"{op}: dimension {dim} out of range (expected to be in range of "
                         f"[{low}, {high}]) for a tensor of shape {list(shape)}")
    return int(dim) % max(ndim, 1)


def _describe(arrays: Sequence[Any]) -> str:
    return ", ".join(f"{list(a.shape)} {dt.dtype_name(a.dtype)}" for a in arrays)


class Reshape(Function):
    """y = x with a new shape; dx = gy with x's shape"""

    precision = NEUTRAL
    returns_view = True  # detach_() refuses its outputs, as PyTorch refuses views

    def __init__(self, shape: tuple) -> None:
        self.shape = shape

    def forward(self, xp: Any, x: Any) -> Any:
        try:
            return x.reshape(self.shape)
        except ValueError:
            raise ValueError(f"reshape: shape {list(self.shape)} is invalid for input of shape "
                             f"{list(x.shape)} ({x.size} elements)") from None

    def backward(self, gy: Tensor) -> Tensor:
        return reshape(gy, self.input_shapes[0])


class Permute(Function):
    """y = x with dimensions reordered; dx = gy with the inverse order"""

    precision = NEUTRAL
    returns_view = True  # detach_() refuses its outputs, as PyTorch refuses views

    def __init__(self, dims: tuple) -> None:
        self.dims = dims

    def forward(self, xp: Any, x: Any) -> Any:
        if sorted(d % max(x.ndim, 1) for d in self.dims) != list(range(x.ndim)):
            raise ValueError(f"permute: dims {list(self.dims)} are not a permutation of the "
                             f"{x.ndim} dimensions of shape {list(x.shape)}")
        return x.transpose(self.dims)

    def backward(self, gy: Tensor) -> Tensor:
        n = len(self.dims)
        inverse = [0] * n
        for i, d in enumerate(self.dims):
            inverse[d % n] = i
        return permute(gy, tuple(inverse))


class Cat(Function):
    """y = [x1, x2, ...] joined along dim; dxi = the matching piece of gy"""

    precision = PROMOTE

    def __init__(self, dim: int) -> None:
        self.dim = dim

    def forward(self, xp: Any, *xs: Any) -> Any:
        first = xs[0]
        dim = _dim("cat", self.dim, first.ndim, first.shape)
        for x in xs[1:]:
            if x.ndim != first.ndim or any(a != b for i, (a, b) in enumerate(zip(x.shape, first.shape))
                                           if i != dim):
                raise ValueError(f"cat: sizes of tensors must match except in dimension {dim}: "
                                 f"got {_describe(xs)}")
        self.axis, self.sizes = dim, [x.shape[dim] for x in xs]
        return xp.concatenate(xs, axis=dim)

    def backward(self, gy: Tensor) -> tuple:
        pieces = split(gy, self.sizes, self.axis)
        return tuple(p if need else None for p, need in zip(pieces, self.needs_input_grad))


class Stack(Function):
    """y = [x1, x2, ...] joined along a new dim; dxi = gy[..., i, ...]"""

    precision = PROMOTE

    def __init__(self, dim: int) -> None:
        self.dim = dim

    def forward(self, xp: Any, *xs: Any) -> Any:
        first = xs[0]
        if any(x.shape != first.shape for x in xs):
            raise ValueError(f"stack: expects each tensor to be equal size, got {_describe(xs)}")
        self.axis = _dim("stack", self.dim, first.ndim + 1, first.shape)
        return xp.stack(xs, axis=self.axis)

    def backward(self, gy: Tensor) -> tuple:
        shape = self.input_shapes[0]
        pieces = split(gy, 1, self.axis)
        return tuple(reshape(p, shape) if need else None for p, need in zip(pieces, self.needs_input_grad))


class Split(Function):
    """(y1, y2, ...) = consecutive pieces of x along dim; dx = cat(gy1, gy2, ...)"""

    precision = NEUTRAL
    returns_view = True  # detach_() refuses its outputs, as PyTorch refuses views

    def __init__(self, sizes: Sequence[int], dim: int) -> None:
        self.sizes, self.dim = list(sizes), dim

    def forward(self, xp: Any, x: Any) -> tuple:
        index = [slice(None)] * x.ndim
        pieces, start = [], 0
        for size in self.sizes:
            index[self.dim] = slice(start, start + size)
            pieces.append(x[tuple(index)])  # views: no copy until someone writes
            start += size
        return tuple(pieces)

    def backward(self, *grads: Tensor) -> Tensor:
        # The engine has zero-filled the gradients of pieces nobody used.
        return cat(list(grads), self.dim)


class Pad(Function):
    """y = x with constant borders (negative widths crop); dx = gy padded by the negated widths"""

    precision = NEUTRAL

    def __init__(self, widths: Sequence[tuple[int, int]], value: float) -> None:
        self.widths, self.value = [tuple(w) for w in widths], value

    def forward(self, xp: Any, x: Any) -> Any:
        shape = [n + before + after for n, (before, after) in zip(x.shape, self.widths)]
        if any(n < 0 for n in shape):
            raise ValueError(f"pad: padding {self.widths} gives a negative size {shape} for input "
                             f"of shape {list(x.shape)} ({dt.dtype_name(x.dtype)})")
        # Negative widths crop the source; positive ones leave a border in the result.
        source = tuple(slice(max(-b, 0), n - max(-a, 0)) for n, (b, a) in zip(x.shape, self.widths))
        target = tuple(slice(max(b, 0), s - max(a, 0)) for s, (b, a) in zip(shape, self.widths))
        out = xp.full(shape, self.value, dtype=x.dtype)
        out[target] = x[source]
        return out

    def backward(self, gy: Tensor) -> Tensor:
        return Pad([(-b, -a) for b, a in self.widths], 0)(gy)


# ---------------------------------------------------------------------------
# Public functions
# ---------------------------------------------------------------------------

def reshape(x: Tensor, *shape: Any, **kwargs: Any) -> Tensor:
    """``reshape(2, 3)``, ``reshape((2, 3))`` or ``reshape(shape=(2, 3))`` (PyTorch's keyword)."""
    if kwargs:
        if shape or set(kwargs) != {"shape"}:
            raise TypeError(f"reshape(): expected the shape as positional ints, a tuple or shape=, got "
                            f"{list(shape)} and keywords {sorted(kwargs)}")
        shape = (kwargs["shape"],)
    shape = _shape_arg(shape)
    return x if x.shape == shape else Reshape(shape)(x)


def view(x: Tensor, *shape: Any) -> Tensor:
    return reshape(x, *shape)


def permute(x: Tensor, *dims: Any) -> Tensor:
    return Permute(_shape_arg(dims))(x)


def transpose(x: Tensor, dim0: int, dim1: int) -> Tensor:
    dims = list(range(x.ndim))
    dims[dim0], dims[dim1] = dims[dim1], dims[dim0]
    return Permute(tuple(dims))(x)


def t(x: Tensor) -> Tensor:
    """The transpose of a matrix; 0-d and 1-D tensors come back as they are (``torch.t``)."""
    if x.ndim > 2:
        raise ValueError(f"t: expects a tensor with <= 2 dimensions, got shape {list(x.shape)}; "
                         f"use transpose(dim0, dim1) or .mT")
    return x if x.ndim < 2 else transpose(x, 0, 1)


class Repeat(Function):
    """y = x tiled sizes[i] times along dim i (a new array, as PyTorch's); dx = gy summed over the copies"""

    precision = NEUTRAL

    def __init__(self, sizes: tuple) -> None:
        self.sizes = sizes

    def forward(self, xp: Any, x: Any) -> Any:
        return xp.tile(x, self.sizes)  # always a copy: writing into the result never reaches x

    def backward(self, gy: Tensor) -> Tensor:
        shape = (1,) * (len(self.sizes) - len(self.input_shapes[0])) + self.input_shapes[0]
        paired = tuple(v for r, s in zip(self.sizes, shape) for v in (r, s))  # (r0, s0, r1, s1, ...)
        summed = sum_to(reshape(gy, paired), tuple(v for s in shape for v in (1, s)))
        return reshape(summed, self.input_shapes[0])


def repeat(x: Tensor, *sizes: Any) -> Tensor:
    """Tile ``x`` ``sizes[i]`` times along dim i (extra leading sizes add dims): ``Tensor.repeat``, a copy."""
    sizes = _shape_arg(sizes)
    if len(sizes) < x.ndim or any(r < 0 for r in sizes):
        raise ValueError(f"repeat: needs one non-negative count per dimension (at least {x.ndim}), got "
                         f"{list(sizes)} for shape {list(x.shape)}")
    return Repeat(tuple(int(r) for r in sizes))(x)


def flatten(x: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    """Merge dims ``start_dim..end_dim`` into one (a 0-d tensor becomes 1-D)."""
    if x.ndim == 0:
        return reshape(x, (1,))
    start = _dim("flatten", start_dim, x.ndim, x.shape)
    end = _dim("flatten", end_dim, x.ndim, x.shape)
    if start > end:
        raise ValueError(f"flatten: start_dim {start_dim} cannot come after end_dim {end_dim} "
                         f"(shape {list(x.shape)})")
    shape = x.shape[:start] + (math.prod(x.shape[start:end + 1]),) + x.shape[end + 1:]
    return reshape(x, shape)


def squeeze(x: Tensor, dim: "int | Sequence[int] | None" = None) -> Tensor:
    """Drop size-1 dims (all of them, or those in ``dim``; others in ``dim`` are kept)."""
    if dim is None:
        drop = {i for i, n in enumerate(x.shape) if n == 1}
    else:
        dims = (dim,) if isinstance(dim, (int, np.integer)) else tuple(dim)
        drop = {d for d in (_dim("squeeze", d, x.ndim, x.shape) for d in dims) if x.ndim and x.shape[d] == 1}
    return reshape(x, tuple(n for i, n in enumerate(x.shape) if i not in drop))


def unsqueeze(x: Tensor, dim: int) -> Tensor:
    """Insert a size-1 dim at ``dim`` (``-1`` appends)."""
    d = _dim("unsqueeze", dim, x.ndim + 1, x.shape)
    return reshape(x, x.shape[:d] + (1,) + x.shape[d:])


def _tensor_list(op: str, tensors: Any) -> list:
    if isinstance(tensors, Tensor) or not isinstance(tensors, (list, tuple)):
        raise TypeError(f"{op}: expected a list or tuple of Tensors, got {type(tensors).__name__}")
    if not tensors:
        raise ValueError(f"{op}: expected a non-empty list of Tensors")
    return list(tensors)


def cat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """Join tensors along an existing dim; mixed float dtypes join in the widest."""
    return Cat(dim)(*_tensor_list("cat", tensors))


concat = concatenate = cat


def stack(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """Join equal-shaped tensors along a new dim."""
    return Stack(dim)(*_tensor_list("stack", tensors))


def split(x: Tensor, split_size_or_sections: "int | Sequence[int]", dim: int = 0) -> tuple:
    """Pieces of ``x`` along ``dim``: equal ``int`` sizes (the last may be smaller) or listed sizes."""
    d = _dim("split", dim, x.ndim, x.shape)
    n = x.shape[d]
    if isinstance(split_size_or_sections, (int, np.integer)):
        size = int(split_size_or_sections)
        if size <= 0 and n > 0:
            raise ValueError(f"split: split_size must be positive, got {size} (shape {list(x.shape)})")
        sizes = [min(size, n - start) for start in range(0, n, size)] if n else [0]
    else:
        sizes = [int(s) for s in split_size_or_sections]
        if sum(sizes) != n or any(s < 0 for s in sizes):
            raise ValueError(f"split: split sizes {sizes} must be non-negative and sum to {n}, the size "
                             f"of dimension {d} of shape {list(x.shape)}")
    return Split(sizes, d)(x)


def chunk(x: Tensor, chunks: int, dim: int = 0) -> tuple:
    """``ceil(n / chunks)``-sized pieces; like PyTorch, may return fewer than ``chunks``."""
    if chunks <= 0:
        raise ValueError(f"chunk: chunks must be positive, got {chunks} (shape {list(x.shape)})")
    n = x.shape[_dim("chunk", dim, x.ndim, x.shape)]
    return split(x, max(-(-n // chunks), 1), dim)


def unbind(x: Tensor, dim: int = 0) -> tuple:
    """The slices of ``x`` along ``dim``, each without that dim."""
    d = _dim("unbind", dim, x.ndim, x.shape)
    shape = x.shape[:d] + x.shape[d + 1:]
    return tuple(reshape(p, shape) for p in split(x, 1, d))


def _pad_indices(mode: str, n: int, before: int, after: int, what: str) -> np.ndarray:
    """Source index of every output position along one dim for the gather modes."""
    if mode == "reflect" and (before >= n or after >= n):
        raise ValueError(f"pad: reflect padding ({before}, {after}) must be smaller than the dimension "
                         f"size {n}: {what}")
    if mode == "circular" and (before > n or after > n):
        raise ValueError(f"pad: circular padding ({before}, {after}) must not exceed the dimension "
                         f"size {n}: {what}")
    if n == 0:
        raise ValueError(f"pad: {mode} padding needs a non-empty dimension: {what}")
    position = np.arange(-before, n + after)
    if mode == "reflect":  # mirror about the first and last element (which are not repeated)
        return np.where(position < 0, -position, np.where(position > n - 1, 2 * (n - 1) - position, position))
    if mode == "replicate":
        return np.clip(position, 0, n - 1)
    # circular: negative widths crop first and the wrap comes from what is left (as PyTorch)
    start, stop = max(-before, 0), n - max(-after, 0)
    if stop <= start:
        raise ValueError(f"pad: circular padding ({before}, {after}) crops all {n} elements: {what}")
    return start + np.arange(-max(before, 0), stop - start + max(after, 0)) % (stop - start)


def pad(x: Tensor, pad: Sequence[int], mode: str = "constant", value: "float | None" = None) -> Tensor:
    """PyTorch's ``F.pad``: ``pad`` lists (before, after) widths from the LAST dim backwards.

    The reflect/replicate/circular modes pad any number of trailing dims of any
    input (PyTorch only takes 1-3 dims of a 2-D to 5-D input there).
    """
    pad = tuple(int(p) for p in pad)
    what = f"input {list(x.shape)} {dt.dtype_name(x.dtype)}, pad {list(pad)}"
    if len(pad) % 2 or len(pad) // 2 > x.ndim:
        raise ValueError(f"pad: padding length must be even and at most twice the number of "
                         f"dimensions: {what}")
    widths = [(0, 0)] * x.ndim
    for i in range(len(pad) // 2):
        widths[x.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    if mode == "constant":
        return Pad(widths, 0 if value is None else value)(x)
    if mode not in ("reflect", "replicate", "circular"):
        raise ValueError(f"pad: unknown mode {mode!r}; expected 'constant', 'reflect', 'replicate' "
                         f"or 'circular'")
    if value not in (None, 0):
        raise ValueError(f"pad: padding value {value} is only meaningful in constant mode ({mode} given)")
    out = x
    for d, (before, after) in enumerate(widths):
        if before or after:
            index = _pad_indices(mode, x.shape[d], before, after, what)
            out = getitem(out, (slice(None),) * d + (index,))
    return out


def contiguous(x: Tensor, memory_format: Any = None) -> Tensor:
    """No-op: tinyamp ops accept any memory layout; ``memory_format`` (``channels_last``) is accepted and the
    layout stays row-major."""
    if memory_format is not None and not isinstance(memory_format, dt.memory_format):
        raise TypeError(f"contiguous(): memory_format must be a tinyamp.memory_format, got {memory_format!r}")
    return x


def narrow(x: Tensor, dim: int, start: int, length: int) -> Tensor:
    d = _dim("narrow", dim, x.ndim, x.shape)
    start = start + x.shape[d] if start < 0 else start
    if start < 0 or length < 0 or start + length > x.shape[d]:
        raise IndexError(f"narrow: start {start} and length {length} exceed dimension {d} of shape "
                         f"{list(x.shape)}")
    sizes = [start, length, x.shape[d] - start - length]
    return split(x, sizes, d)[1]


METHODS = {"reshape": reshape, "view": view, "permute": permute, "transpose": transpose,
           "flatten": flatten, "squeeze": squeeze, "unsqueeze": unsqueeze, "split": split,
           "chunk": chunk, "unbind": unbind, "contiguous": contiguous, "narrow": narrow,
           "t": t, "repeat": repeat, "view_as": lambda x, other: reshape(x, other.shape),
           "reshape_as": lambda x, other: reshape(x, other.shape)}
