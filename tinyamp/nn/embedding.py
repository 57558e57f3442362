"""Embedding: a lookup table from integer ids to learned vectors."""

from __future__ import annotations

from typing import Any

from ..tensor import Tensor
from . import init
from .module import Module
from .parameter import Parameter
from ..factories import empty
from ..ops.embedding import embedding


class Embedding(Module):
    """``Embedding(num_embeddings, embedding_dim, padding_idx=None)``; weight ~ N(0, 1).

    The row at ``padding_idx`` starts at zero and receives no gradient.
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ValueError(f"Embedding: padding_idx {padding_idx} must be within num_embeddings "
                                 f"({num_embeddings})")
            padding_idx %= num_embeddings
        self.num_embeddings, self.embedding_dim, self.padding_idx = num_embeddings, embedding_dim, padding_idx
        self.weight = Parameter(empty(num_embeddings, embedding_dim, dtype=dtype, device=device))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.normal_(self.weight)
        if self.padding_idx is not None:
            self.weight.array[self.padding_idx] = 0

    def forward(self, ids: Tensor) -> Tensor:
        if self.padding_idx is None:
            return embedding(ids, self.weight)
        return embedding(ids, self.weight, padding_idx=self.padding_idx)

    def extra_repr(self) -> str:
        text = f"{self.num_embeddings}, {self.embedding_dim}"
        return text + (f", padding_idx={self.padding_idx}" if self.padding_idx is not None else "")
