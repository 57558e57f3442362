"""Automatic mixed precision: autocast, precision tags, the loss scaler and the report."""

from __future__ import annotations

from .autocast import autocast, get_autocast_dtype, is_autocast_enabled
from .policy import FP32, LOWER, NEUTRAL, PROMOTE, Precision, compute_dtype

__all__ = ["autocast", "is_autocast_enabled", "get_autocast_dtype", "Precision", "LOWER", "FP32",
           "PROMOTE", "NEUTRAL", "compute_dtype"]
