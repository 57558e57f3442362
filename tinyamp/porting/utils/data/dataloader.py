"""``torch.utils.data.dataloader``'s path: the DataLoader and its collation (from :mod:`tinyamp.data.loader`)."""

from __future__ import annotations

from ....data.loader import DataLoader, default_collate, get_worker_info

__all__ = ["DataLoader", "default_collate", "get_worker_info"]
