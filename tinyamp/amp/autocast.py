"""autocast: the context manager/decorator, and how a cast is inserted for an op.

(First cut by the core engine; the autocast issue completes the weight-cast
cache, per-op overrides and custom_fwd/custom_bwd here.)
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np

import tinyamp

from .. import dtypes as dt
from . import state as amp_state
from .policy import Precision

_GLOBAL_OVERRIDES: dict[str, Precision] = {}


def global_overrides() -> dict[str, Precision]:
    """Tag overrides by op name that apply in every region."""
    return _GLOBAL_OVERRIDES


def cast_input(op: Any, tensor: Any, target: np.dtype, state: "amp_state.AutocastState | None",
               tag: Precision) -> Any:
    """The recorded cast of one of ``op``'s inputs to ``target``."""
    return tinyamp.ops.cast(tensor, target)


class autocast:
    """Run ops in mixed precision: ``with ta.amp.autocast(): ...`` or ``@ta.amp.autocast()``."""

    def __init__(self, device_type: str | None = None, dtype: Any = None, enabled: bool = True,
                 cache_enabled: bool = True) -> None:
        self.device_type = device_type or "cpu"
        self.dtype = dt.float16 if dtype is None else dt.as_dtype(dtype)
        if self.dtype not in dt.LOW_PRECISION:
            raise ValueError(f"autocast: dtype must be float16 or bfloat16, got {dt.dtype_name(self.dtype)}")
        self.enabled = bool(enabled)
        self.cache_enabled = bool(cache_enabled)

    def __enter__(self) -> "autocast":
        new = amp_state.AutocastState(self.dtype, self.device_type, self.cache_enabled) if self.enabled else None
        self._token = amp_state.set_state(new)
        return self

    def __exit__(self, *exc: Any) -> None:
        amp_state.reset_state(self._token)

    def __call__(self, func: Callable) -> Callable:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with autocast(self.device_type, self.dtype, self.enabled, self.cache_enabled):
                return func(*args, **kwargs)
        return wrapper


def is_autocast_enabled(device_type: str | None = None) -> bool:
    return amp_state.current() is not None


def get_autocast_dtype(device_type: str | None = None) -> np.dtype:
    state = amp_state.current()
    return dt.float16 if state is None else state.dtype
