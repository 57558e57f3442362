"""``custom_fwd`` / ``custom_bwd``: autocast for user-defined Functions, with PyTorch's meaning.

A user Function (``class F(ta.autograd.Function)`` with static ``forward`` and
``backward``) runs its forward under the caller's autocast state, like any
code, and its backward under the engine's (autocast off). These decorators
change that:

- ``@custom_fwd(cast_inputs=dtype)``: inside an autocast region, floating
  Tensor arguments are cast to ``dtype`` and forward runs with autocast off.
  ``Function.apply`` makes those casts recorded nodes before the Function
  records its inputs, so each gradient comes back in its argument's dtype.
- ``@custom_fwd`` (no ``cast_inputs``): forward runs as usual; the region is
  remembered on ``ctx``.
- ``@custom_bwd``: backward runs under the region forward ran in (its dtype,
  bfloat16 included, and its overrides).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import numpy as np

from .. import dtypes as dt
from .. import precision
from ..ops.cast import cast
from ..tensor import Tensor
from .autocast import _check_device_type, autocast, get_autocast_dtype, is_autocast_enabled


def _cast_floats(value: Any, dtype: np.dtype) -> Any:
    """Floating (not float64) Tensors inside ``value`` cast to ``dtype``; the rest untouched."""
    if isinstance(value, Tensor):
        if value.dtype in dt.FLOATING and value.dtype != dt.float64 and value.dtype != dtype:
            return cast(value, dtype)
        return value
    if isinstance(value, (list, tuple)):
        return type(value)(_cast_floats(v, dtype) for v in value)
    if isinstance(value, dict):
        return {k: _cast_floats(v, dtype) for k, v in value.items()}
    return value


def custom_fwd(fwd: "Callable | None" = None, *, device_type: "str | None" = None,
               cast_inputs: Any = None) -> Callable:
    """Decorate a user Function's ``forward`` (under ``@staticmethod``), as in PyTorch.

    ``cast_inputs=None``: forward runs under the caller's autocast state and
    records it for :func:`custom_bwd`. ``cast_inputs=dtype``: inside an
    autocast region, floating Tensor arguments are cast to ``dtype`` (recorded
    casts, so gradients return in each argument's dtype) and forward runs with
    autocast off; outside a region the arguments are left alone.
    """
    if fwd is None:
        return functools.partial(custom_fwd, device_type=device_type, cast_inputs=cast_inputs)
    _check_device_type(device_type)
    target = None
    if cast_inputs is not None:
        target = dt.as_dtype(cast_inputs)
        if target not in dt.FLOATING:
            raise ValueError(f"custom_fwd: cast_inputs must be a floating dtype, got {dt.dtype_name(target)}")

    @functools.wraps(fwd)
    def decorate_fwd(ctx: Any, *args: Any, **kwargs: Any) -> Any:
        on = is_autocast_enabled(device_type)
        ctx._dtype = get_autocast_dtype(device_type)
        if target is None:
            ctx._autocast_at_forward = precision.current_autocast() if on else None
            return fwd(ctx, *args, **kwargs)
        ctx._autocast_at_forward = None  # backward runs with autocast off, like forward
        if not on:
            return fwd(ctx, *args, **kwargs)
        with autocast(enabled=False):
            return fwd(ctx, *_cast_floats(args, target), **_cast_floats(kwargs, target))

    decorate_fwd._amp_cast_inputs = target          # read by Function.apply
    decorate_fwd._amp_device_type = device_type
    return decorate_fwd


def custom_bwd(bwd: "Callable | None" = None, *, device_type: "str | None" = None) -> Callable:
    """Decorate a user Function's ``backward``: it runs under the forward's autocast state.

    The engine runs backward with autocast off; this replays the region that
    was active when forward ran (its dtype, bfloat16 included, and overrides),
    without the weight-cast cache, which belongs to the forward region.
    """
    if bwd is None:
        return functools.partial(custom_bwd, device_type=device_type)
    _check_device_type(device_type)

    @functools.wraps(bwd)
    def decorate_bwd(ctx: Any, *args: Any, **kwargs: Any) -> Any:
        forward_state = getattr(ctx, "_autocast_at_forward", None)
        replay = None if forward_state is None else dataclasses.replace(forward_state, cache=None)
        token = precision.set_autocast(replay)
        try:
            return bwd(ctx, *args, **kwargs)
        finally:
            precision.reset_autocast(token)

    return decorate_bwd
