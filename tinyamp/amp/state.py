"""The autocast state that ``Function.__call__`` reads on every op.

It sits below the autograd layer (DESIGN.md section 1 import rule) so the one
place that runs ops can see whether autocast is on without importing
``amp.autocast``. ``None`` means autocast is off, which keeps the check on the
hot path to one ``ContextVar.get`` and an ``is None``.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class AutocastState:
    """One active autocast region (the innermost enabled one)."""

    dtype: np.dtype                      # float16 or bfloat16
    device_type: str = "cpu"
    cache_enabled: bool = True
    # Per-region tag overrides by op name: {"exp": Precision.LOWER, ...}.
    overrides: dict = field(default_factory=dict)
    # The weight-cast cache shared by the outermost region and its children.
    cache: Any = None


_autocast_state: ContextVar["AutocastState | None"] = ContextVar("tinyamp_autocast", default=None)


def current() -> "AutocastState | None":
    """The active autocast state, or None when autocast is off."""
    return _autocast_state.get()


def set_state(state: "AutocastState | None") -> Any:
    """Install ``state``; returns a token for :func:`reset_state`."""
    return _autocast_state.set(state)


def reset_state(token: Any) -> None:
    _autocast_state.reset(token)
