"""``ta.cuda.amp``: PyTorch's deprecated ``torch.cuda.amp`` spellings, kept so older AMP scripts port by the import.

``torch.cuda.amp.GradScaler(...)`` and ``torch.cuda.amp.autocast(...)`` are ``torch.amp``'s with
``device="cuda"``; like PyTorch they warn (FutureWarning) and point at the ``ta.amp`` spelling.
"""

from __future__ import annotations

import warnings
from typing import Any

from ..amp.autocast import autocast as _autocast
from ..amp.custom_fwd import custom_bwd, custom_fwd
from ..amp.grad_scaler import GradScaler as _GradScaler
from ..dtypes import float16

__all__ = ["GradScaler", "autocast", "custom_fwd", "custom_bwd"]


class GradScaler(_GradScaler):
    """``ta.amp.GradScaler("cuda", ...)`` under its deprecated name."""

    def __init__(self, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True) -> None:
        warnings.warn("`torch.cuda.amp.GradScaler(args...)` is deprecated. Please use "
                      "`torch.amp.GradScaler('cuda', args...)` instead.", FutureWarning, stacklevel=2)
        super().__init__("cuda", init_scale=init_scale, growth_factor=growth_factor,
                         backoff_factor=backoff_factor, growth_interval=growth_interval, enabled=enabled)


class autocast(_autocast):  # noqa: N801 - PyTorch's name
    """``ta.amp.autocast("cuda", ...)`` under its deprecated name."""

    def __init__(self, enabled: bool = True, dtype: Any = float16, cache_enabled: bool = True) -> None:
        warnings.warn("`torch.cuda.amp.autocast(args...)` is deprecated. Please use "
                      "`torch.amp.autocast('cuda', args...)` instead.", FutureWarning, stacklevel=2)
        super().__init__("cuda", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)
