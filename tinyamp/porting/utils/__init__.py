"""``tinyamp.utils``: PyTorch's ``torch.utils`` spellings, so ``torch.utils.data`` and
``torch.utils.checkpoint`` port by the import."""

from __future__ import annotations

from . import checkpoint, data

__all__ = ["checkpoint", "data"]
