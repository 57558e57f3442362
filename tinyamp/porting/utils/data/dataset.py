"""``torch.utils.data.dataset``'s path: datasets and splits (they live in :mod:`tinyamp.data.loader`)."""

from __future__ import annotations

from ....data.loader import Dataset, Subset, TensorDataset, random_split

__all__ = ["Dataset", "TensorDataset", "Subset", "random_split"]
