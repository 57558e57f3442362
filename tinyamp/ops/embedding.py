"""Embedding lookup: rows of a weight matrix gathered by integer indices.

``embedding(input, weight)`` returns ``weight[input]``; its weight gradient is a
scatter-add of the output gradient into the rows that were read, so repeated
indices accumulate (one kernel each way: ``kernels/embedding.py``).
float16/bfloat16 gradients accumulate in float32 and are rounded once.
``padding_idx`` rows get a zero gradient. An out-of-range index is refused (on
a GPU at the next host read; its output row is NaN and its gradient reaches no
row: ``kernels/embedding.py``).

Both ops are NEUTRAL: a lookup does no arithmetic, so the output keeps the
weight's dtype (PyTorch leaves embedding off its autocast lists too).
"""

from __future__ import annotations

from typing import Any

from .. import dtypes as dt
from ..precision import NEUTRAL
from ..autograd.function import Function
from ..tensor import Tensor
from ..kernels import embedding as embedding_kernels


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
        # The CPU refuses a bad index; a GPU flags it for the next host read (kernels/embedding.py).
        out, self.idx, self.poison = embedding_kernels.forward(idx, weight, self.check)
        return out  # self.idx: the indices read, an integer constant of the graph for the backward's scatter

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
        return embedding_kernels.backward(gy, self.idx, self.rows, self.padding_idx, self.poison)

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
