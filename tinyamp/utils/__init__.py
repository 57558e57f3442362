"""``tinyamp.utils``: PyTorch's ``torch.utils`` spellings, so ``torch.utils.data`` ports by the import."""

from __future__ import annotations

from . import data

__all__ = ["data"]
