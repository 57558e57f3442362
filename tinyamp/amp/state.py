"""The autocast state that ``Function.__call__`` reads on every op.

It sits below the autograd layer (DESIGN.md section 1 import rule) so the one
place that runs ops can see whether autocast is on without importing
``amp.autocast``. ``None`` means autocast is off, which keeps the check on the
hot path to one ``ContextVar.get`` and an ``is None``.

Two context variables, both per thread (and per asyncio task):

- the *state*: the innermost **enabled** region (dtype, overrides, cache), or
  None inside an ``enabled=False`` region and outside every region;
- the *scope*: the innermost region of any kind. It carries what nested
  regions share even across a disabled region in between: the weight-cast
  cache of the outermost region and the per-op overrides in force.
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
    device_type: "str | None" = None     # None: ops on every device; "cpu"/"cuda": only there
    cache_enabled: bool = True
    # Per-region tag overrides by op name: {"exp": Precision.LOWER, ...}.
    overrides: dict = field(default_factory=dict)
    # The weight-cast cache shared by the outermost region and its children
    # (None when this region has cache_enabled=False).
    cache: Any = None


@dataclass
class AutocastScope:
    """What a region hands to the regions nested in it, enabled or not."""

    cache: Any                           # the outermost region's WeightCastCache
    overrides: dict = field(default_factory=dict)
    cache_enabled: bool = True


_autocast_state: ContextVar["AutocastState | None"] = ContextVar("tinyamp_autocast", default=None)
_autocast_scope: ContextVar["AutocastScope | None"] = ContextVar("tinyamp_autocast_scope", default=None)


def current() -> "AutocastState | None":
    """The active autocast state, or None when autocast is off."""
    return _autocast_state.get()


def set_state(state: "AutocastState | None") -> Any:
    """Install ``state``; returns a token for :func:`reset_state`."""
    return _autocast_state.set(state)


def reset_state(token: Any) -> None:
    _autocast_state.reset(token)


def current_scope() -> "AutocastScope | None":
    """The innermost autocast region of any kind, or None outside all of them."""
    return _autocast_scope.get()


def set_scope(scope: "AutocastScope | None") -> Any:
    return _autocast_scope.set(scope)


def reset_scope(token: Any) -> None:
    _autocast_scope.reset(token)
