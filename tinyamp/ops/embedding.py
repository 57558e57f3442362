"""Embedding lookup: rows of a weight matrix gathered by integer indices.

``embedding(input, weight)`` returns ``weight[input]``; its weight gradient is a
scatter-add of the output gradient into the rows that were read, so repeated
indices accumulate (``numpy.add.at`` on the CPU, ``cupyx.scatter_add`` on a GPU,
reached through tinyamp.backend). float16/bfloat16 gradients accumulate in
float32 and are rounded once. ``padding_idx`` rows get a zero gradient. An
out-of-range index is refused (on a GPU at the next host read; its output row
is NaN and its gradient reaches no row: ``kernels/embedding.py``).

Both ops are NEUTRAL: a lookup does no arithmetic, so the output keeps the
weight's dtype (PyTorch leaves embedding off its autocast lists too).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import backend
from .. import dtypes as dt
from ..precision import NEUTRAL
from ..autograd.function import Function
from ..kernels.embedding import checked_indices
from ..tensor import Tensor


def _scatter_add(xp: Any, out: Any, index: Any, values: Any) -> None:
    """out[index[i]] += values[i], accumulating repeated indices."""
    if backend.is_cupy_array(out):
        backend.cuda_lib("cupyx").scatter_add(out, index, values)
    else:
        xp.add.at(out, index, values)


class Embedding(Function):
    """y = weight[idx]; dweight = scatter_add(gy at idx), zero at padding_idx"""

    precision = NEUTRAL

    def __init__(self, padding_idx: "int | None", check: bool = True) -> None:
        self.padding_idx, self.check = padding_idx, check

    def forward(self, xp: Any, idx: Any, weight: Any) -> Any:
        if idx.dtype.kind not in "iu":
            raise TypeError(f"embedding: indices must be an integer tensor (int64), got "
                            f"{list(idx.shape)} ({dt.dtype_name(idx.dtype)})")
        if weight.ndim != 2:
            raise ValueError(f"embedding: weight must be 2-D (num_embeddings, embedding_dim), "
                             f"got shape {list(weight.shape)}")
        self.poison = None
        if self.check and idx.size:
            # The CPU refuses a bad index; a GPU flags it for the next host read and reads row 0 instead.
            idx, self.poison = checked_indices(xp, idx, weight.shape)
        self.idx = idx  # an integer constant of the graph, kept for the scatter in backward
        out = weight[idx]
        if self.poison is not None and weight.dtype in dt.FLOATING:
            out = xp.where(self.poison[..., None], weight.dtype.type(np.nan), out)  # a scalar: no upload
        return out

    def backward(self, gy: Tensor) -> tuple:
        if not self.needs_input_grad[1]:
            return None, None
        rows = self.input_shapes[1][0]
        return None, EmbeddingGrad(self.idx, rows, self.padding_idx, self.poison)(gy)


class EmbeddingGrad(Function):
    """dweight = scatter_add(gy at idx) with padding rows zeroed; d(gy) = ggw[idx] (0 at padding)"""

    precision = NEUTRAL
    name = "embedding_grad"

    def __init__(self, idx: Any, rows: int, padding_idx: "int | None", poison: Any = None) -> None:
        self.idx, self.rows, self.padding_idx, self.poison = idx, rows, padding_idx, poison

    def forward(self, xp: Any, gy: Any) -> Any:
        dim = gy.shape[-1]
        acc = dt.opmath_dtype(gy.dtype)
        out = xp.zeros((self.rows, dim), dtype=acc)
        values = gy.reshape(-1, dim).astype(acc, copy=False)
        if self.poison is not None:  # out-of-range indices on a GPU: their gradient goes to no row
            values = xp.where(self.poison.reshape(-1, 1), np.dtype(acc).type(0), values)
        _scatter_add(xp, out, self.idx.reshape(-1), values)
        if self.padding_idx is not None:
            out[self.padding_idx] = 0
        return out.astype(gy.dtype, copy=False)

    def backward(self, ggw: Tensor) -> Tensor:
        # The adjoint of a scatter-add is a gather; positions that read the padding
        # row sent it nothing, so they get nothing back.
        gathered = Embedding(None, check=False)(Tensor._wrap(self.idx), ggw)
        if self.padding_idx is None:
            return gathered
        keep = (self.idx != self.padding_idx)[..., None].astype(ggw.dtype)
        return gathered * Tensor._wrap(keep)


def embedding(input: Tensor, weight: Tensor, padding_idx: "int | None" = None) -> Tensor:  # noqa: A002
    """Rows of ``weight`` (num_embeddings, dim) at integer ``input`` of any shape: shape input.shape + (dim,)."""
    if padding_idx is not None:
        rows = weight.shape[0]
        if not -rows <= padding_idx < rows:
            raise ValueError(f"embedding: padding_idx {padding_idx} must be within num_embeddings "
                             f"{rows} (weight shape {list(weight.shape)})")
        padding_idx %= rows
    return Embedding(padding_idx)(input, weight)


METHODS: dict = {}  # functions only (torch.nn.functional), not Tensor methods
