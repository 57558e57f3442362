"""Automatic mixed precision: autocast, precision tags, the loss scaler and the report."""

from __future__ import annotations

from .autocast import (autocast, autocast_cache_info, clear_autocast_cache, get_autocast_dtype,
                       get_op_precision, is_autocast_available, is_autocast_cache_enabled, is_autocast_enabled,
                       reset_op_precision, set_op_precision)
from .custom_function import custom_bwd, custom_fwd
from .op_table import OpInfo, OpTable, op_table
from .policy import FP32, LOWER, NEUTRAL, PROMOTE, Precision, compute_dtype
from .grad_scaler import AmpScaler, GradScaler
from .report import Trace, trace

__all__ = ["autocast", "is_autocast_enabled", "get_autocast_dtype", "Precision", "LOWER", "FP32",
           "PROMOTE", "NEUTRAL", "compute_dtype", "custom_fwd", "custom_bwd", "set_op_precision",
           "get_op_precision", "reset_op_precision", "op_table", "OpTable", "OpInfo", "trace", "Trace",
           "clear_autocast_cache", "autocast_cache_info", "is_autocast_cache_enabled", "is_autocast_available"]
__all__ += ["GradScaler", "AmpScaler"]
from . import grad_stats  # noqa: E402
from .grad_stats import exponent_histogram, plot_exponent_histogram  # noqa: E402
__all__ += ["grad_stats", "exponent_histogram", "plot_exponent_histogram"]
