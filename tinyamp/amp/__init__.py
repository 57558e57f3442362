"""Automatic mixed precision: autocast, precision tags, casting, the loss scaler and the op table.

The instruments for studying it (the precision report, the shadow run, gradient
statistics, swamping, memory accounting) are in :mod:`tinyamp.study`, above nn and
optim; this namespace re-exports their public names (``ta.amp.trace``,
``ta.amp.shadow_run``, ...), and no module of the mechanism imports them.
"""

from __future__ import annotations

from ..precision import FP32, LOWER, NEUTRAL, PROMOTE, Precision, compute_dtype
from .autocast import (autocast, get_autocast_dtype, is_autocast_available, is_autocast_cache_enabled,
                       is_autocast_enabled)
from .casting import autocast_cache_info, clear_autocast_cache
from .custom_fwd import custom_bwd, custom_fwd
from .op_table import OpInfo, OpTable, get_op_precision, op_table, reset_op_precision, set_op_precision
from .grad_scaler import AmpScaler, GradScaler
from . import recipe
from .fp8_autocast import exclude_first_last, fp8_autocast, is_fp8_enabled
from ..porting import cuda_amp
from ..study import (ShadowReport, Trace, explain_fp8, exponent_histogram, grad_stats, plot_exponent_histogram,
                     shadow_run, trace)

__all__ = ["autocast", "is_autocast_enabled", "get_autocast_dtype", "Precision", "LOWER", "FP32",
           "PROMOTE", "NEUTRAL", "compute_dtype", "custom_fwd", "custom_bwd", "set_op_precision",
           "get_op_precision", "reset_op_precision", "op_table", "OpTable", "OpInfo", "trace", "Trace",
           "clear_autocast_cache", "autocast_cache_info", "is_autocast_cache_enabled", "is_autocast_available"]
__all__ += ["GradScaler", "AmpScaler", "shadow_run", "ShadowReport"]
__all__ += ["grad_stats", "exponent_histogram", "plot_exponent_histogram"]
__all__ += ["recipe", "fp8_autocast", "exclude_first_last", "is_fp8_enabled", "explain_fp8"]
