"""Indexing: ``x[key]`` (``getitem``) and its gradient, a scatter-add (``GetItemGrad``).

Keys follow NumPy/PyTorch: ints, slices (any step, negative bounds), ``None``,
``Ellipsis``, integer arrays or Tensors (advanced indexing, repeats allowed) and
boolean masks. The key is normalised once (Tensors and lists become arrays on
the indexed tensor's device, masks become the integer arrays of their
``nonzero()``), so forward and backward see the same thing.

The gradient of a gather is a scatter that must *sum* where an index repeats
(``x[[0, 0]]`` uses ``x[0]`` twice), so advanced keys scatter with ``add.at``
(``cupyx.scatter_add`` on the GPU), in float32 for float16/bfloat16 gradients.
``GetItemGrad`` is itself differentiable: its backward is ``getitem`` with the
same key, so double backward works. Both are NEUTRAL. ``one_hot`` (labels to
int64 indicator vectors) is here too.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import backend
from .. import dtypes as dt
from ..precision import NEUTRAL
from ..autograd.function import Function
from ..tensor import Tensor


def _is_array(k: Any) -> bool:
    return isinstance(k, np.ndarray) or backend.is_cupy_array(k)


def normalize_key(key: Any, device: backend.Device) -> tuple:
    """``key`` as a tuple of ints/slices/None/Ellipsis/integer arrays on ``device``.

    Boolean masks become the integer arrays of their ``nonzero()`` (the same
    selection, in the same order), so one scatter-add serves every advanced key.
    """
    items = key if isinstance(key, tuple) else (key,)
    result: list = []
    for k in items:
        if isinstance(k, Tensor):
            k = k.array
        elif isinstance(k, list):
            k = np.asarray(k)
            if k.dtype == object or k.dtype.kind not in "biu":
                raise IndexError(f"getitem: a list index must hold only ints or only bools, got {k.tolist()}")
        if _is_array(k):
            if k.dtype.kind not in "biu":
                raise IndexError(f"getitem: tensors used as indices must be integer or bool, "
                                 f"got {dt.dtype_name(k.dtype)}")
            k = backend.to_device(k, device)
            if k.dtype == np.bool_ and k.ndim > 0:
                if backend.is_cupy_array(k):
                    backend.note_sync()  # the GPU's nonzero reads its count on the host
                result.extend(k.nonzero())
                continue
        result.append(k)
    return tuple(result)


def _is_advanced(key: tuple) -> bool:
    return any(_is_array(k) for k in key)


def _index_error(exc: Exception, shape: tuple, dtype: Any) -> IndexError:
    return IndexError(f"getitem: {exc} (tensor of shape {list(shape)}, {dt.dtype_name(dtype)})")


class GetItem(Function):
    """y = x[key]; dx = zeros_like(x) with gy scatter-added at key"""

    precision = NEUTRAL
    returns_view = True  # detach_() refuses its outputs, as PyTorch refuses views

    def __init__(self, key: tuple) -> None:
        self.key = key

    def forward(self, xp: Any, x: Any) -> Any:
        try:
            y = x[self.key]  # basic keys give a view, advanced ones a copy
        except (IndexError, ValueError, TypeError) as exc:
            raise _index_error(exc, x.shape, x.dtype) from None
        if isinstance(y, np.generic):
            # An integer per dimension: NumPy returns a scalar copy; a trailing
            # Ellipsis gives the 0-d view PyTorch returns (x[0, 0].mul_(2) writes into x).
            y = x[self.key + (Ellipsis,)]
        return y

    def backward(self, gy: Tensor) -> Tensor:
        return GetItemGrad(self.key, self.input_shapes[0])(gy)


class GetItemGrad(Function):
    """dx = zeros(shape) with g scatter-added at key (repeats sum); d(g) = getitem(gg, key)"""

    precision = NEUTRAL
    name = "getitem_backward"

    def __init__(self, key: tuple, shape: tuple) -> None:
        self.key, self.shape = key, shape

    def forward(self, xp: Any, g: Any) -> Any:
        if not _is_advanced(self.key):
            # Basic indexing never selects an element twice: a plain write is exact.
            out = xp.zeros(self.shape, dtype=g.dtype)
            out[self.key] = g
            return out
        # Repeated indices add up; float16 sums of many repeats would round at every
        # step, so low precision accumulates in float32 and rounds once.
        acc = dt.opmath_dtype(g.dtype)
        out = xp.zeros(self.shape, dtype=acc)
        values = g.astype(acc, copy=False)
        if backend.is_cupy_array(out):
            backend.cuda_lib("cupyx").scatter_add(out, self.key, values)
        else:
            np.add.at(out, self.key, values)
        return out if out.dtype == g.dtype else out.astype(g.dtype)

    def backward(self, gg: Tensor) -> Tensor:
        return GetItem(self.key)(gg)


def getitem(x: Tensor, key: Any) -> Tensor:
    """``x[key]`` with NumPy/PyTorch semantics; differentiable in ``x``."""
    return GetItem(normalize_key(key, x.device))(x)


def index_select(x: Tensor, dim: int, index: Any) -> Tensor:
    """``x`` gathered along ``dim`` at the 1-D integer ``index`` (repeats allowed)."""
    if not -max(x.ndim, 1) <= dim < max(x.ndim, 1):
        raise IndexError(f"index_select: dimension {dim} out of range for shape {list(x.shape)}")
    index = index.array if isinstance(index, Tensor) else np.asarray(index)
    if index.ndim != 1:
        raise IndexError(f"index_select: index must be 1-D, got shape {list(index.shape)}")
    return getitem(x, (slice(None),) * (dim % max(x.ndim, 1)) + (index,))


class OneHot(Function):
    """y[..., c] = 1 where x == c else 0 (int64, shape x.shape + (num_classes,)); no gradient"""

    precision = NEUTRAL

    def __init__(self, num_classes: int) -> None:
        self.num_classes = num_classes

    def forward(self, xp: Any, x: Any) -> Any:
        if x.dtype.kind not in "iu":
            raise RuntimeError(f"one_hot is only applicable to index tensor of type LongTensor (an integer "
                               f"tensor), got {dt.dtype_name(x.dtype)} of shape {list(x.shape)}; use .long()")
        # The range checks read the data on the host (one synchronisation on a GPU).
        if x.size and int(x.min()) < 0:
            raise RuntimeError(f"one_hot: Class values must be non-negative (got {int(x.min())})")
        n = self.num_classes if self.num_classes >= 0 else (int(x.max()) + 1 if x.size else 0)
        if x.size and int(x.max()) >= n:
            raise RuntimeError(f"one_hot: Class values must be smaller than num_classes "
                               f"(got {int(x.max())} with num_classes={n})")
        return (x[..., None] == xp.arange(n)).astype(xp.int64)


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    """``torch.nn.functional.one_hot``: int64 indicator vectors; ``num_classes=-1`` means max + 1."""
    return OneHot(num_classes)(tensor)


METHODS = {"index_select": index_select}
