"""GradScaler's settings: their checks, getters and setters, ``state_dict``, and ``update(new_scale)``.

:class:`ScalerSettings` is :class:`~tinyamp.amp.grad_scaler.GradScaler`'s base:
everything PyTorch's scaler offers for reading, tuning and checkpointing it. The
loss-scaling mechanism itself (scale, unscale, the skipped step, the scale rule)
is in ``grad_scaler.py``. Reading a device value here (``get_scale``, the
trackers, ``state_dict``) is a host synchronisation, counted by ``read_host``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import backend
from ..kernels.loss_scale import DEFAULT_MIN_SCALE
from ..tensor import Tensor
from .scaler_step import read_host


def _check_positive(name: str, value: Any) -> float:
    """A positive finite Python or NumPy number (a scale read back from a checkpoint may be np.float32)."""
    if (isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating))
            or not math.isfinite(value) or value <= 0):
        raise ValueError(f"GradScaler: {name} must be a positive finite number, got {value!r}")
    return float(value)


_INT32_MAX = 2 ** 31 - 1  # the trackers are int32 on the device (as PyTorch's)


def _check_int(name: str, value: Any, low: int = 1) -> int:
    if (isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer))
            or not low <= value <= _INT32_MAX):
        raise ValueError(f"GradScaler: {name} must be an integer >= {low} and <= {_INT32_MAX} (its counter is "
                         f"int32), got {value!r}")
    return int(value)


class ScalerSettings:
    """The settings half of ``GradScaler`` (its attributes are set by ``GradScaler.__init__``)."""

    def _set_scale(self, new_scale: Any, xp: Any, dev: backend.Device) -> None:
        """``update(new_scale)``: the scale set by the user, within min_scale/max_scale."""
        low = DEFAULT_MIN_SCALE if self._min_scale is None else self._min_scale
        high = float(np.finfo(np.float32).max) if self._max_scale is None else self._max_scale
        if isinstance(new_scale, Tensor):
            if new_scale.numel() != 1 or new_scale.requires_grad:
                raise ValueError("new_scale should be a float or a 1-element tinyamp Tensor with "
                                 "requires_grad=False.")
            # Checking a device value would need a sync: clamp it into the bounds on the device; a NaN
            # leaves the scale as it was.
            value = backend.to_device(new_scale.array, dev).reshape(()).astype(np.float32)
            self._scale[...] = xp.where(xp.isnan(value), self._scale, xp.clip(value, np.float32(low), np.float32(high)))
            return
        if isinstance(new_scale, bool) or not isinstance(new_scale, (int, float)):
            raise TypeError(f"new_scale should be a float or a 1-element tinyamp Tensor with "
                            f"requires_grad=False, got {type(new_scale).__name__}")
        value = float(np.float32(new_scale))
        if not (math.isfinite(value) and low <= value <= high):
            raise ValueError(f"GradScaler.update: new_scale {new_scale!r} is outside [{low}, {high}] "
                             f"(min_scale/max_scale, and float32's positive finite range)")
        self._scale[...] = value


    # ------------------------------------------------------------ accessors
    def get_scale(self) -> float:
        """The current scale as a Python float (a host sync once initialised); 1.0 when disabled."""
        if not self._enabled:
            return 1.0
        return self._init_scale if self._scale is None else read_host(self._scale)

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def set_growth_factor(self, new_factor: float) -> None:
        self._check_growth_factor(new_factor)
        self._growth_factor = float(new_factor)

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def set_backoff_factor(self, new_factor: float) -> None:
        self._check_backoff_factor(new_factor)
        self._backoff_factor = float(new_factor)

    def get_growth_interval(self) -> int:
        return self._growth_interval

    def set_growth_interval(self, new_interval: int) -> None:
        self._growth_interval = _check_int("growth_interval", new_interval)

    def get_hysteresis(self) -> int:
        return self._hysteresis

    def is_enabled(self) -> bool:
        return self._enabled

    def _get_growth_tracker(self) -> int:
        if not self._enabled:
            return 0
        return self._init_growth_tracker if self._growth_tracker is None else int(read_host(self._growth_tracker))

    def _get_hysteresis_tracker(self) -> int:
        if not self._enabled:
            return 0
        if self._hysteresis_tracker is None:
            return self._init_hysteresis_tracker
        return int(read_host(self._hysteresis_tracker))

    @staticmethod
    def _check_growth_factor(value: Any) -> None:
        if not (isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
                and math.isfinite(value) and value > 1.0):
            raise ValueError(f"The growth factor must be > 1.0 (and finite), got {value!r}")

    @staticmethod
    def _check_backoff_factor(value: Any) -> None:
        if not (isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
                and 0.0 < value < 1.0):
            raise ValueError(f"The backoff factor must be in (0, 1), got {value!r}")

    # ------------------------------------------------------------ state dict
    def state_dict(self) -> dict:
        """Scale, factors, interval, hysteresis and both trackers (Python numbers); {} when disabled."""
        if not self._enabled:
            return {}
        return {"scale": self.get_scale(), "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor, "growth_interval": self._growth_interval,
                "_growth_tracker": self._get_growth_tracker(), "hysteresis": self._hysteresis,
                "_hysteresis_tracker": self._get_hysteresis_tracker(), "min_scale": self._min_scale,
                "max_scale": self._max_scale}

    def load_state_dict(self, state_dict: dict) -> None:
        """Load a ``state_dict()`` (PyTorch's keys suffice; the extra ones default)."""
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError("The source state dict is empty, possibly because it was saved from a disabled "
                               "instance of GradScaler.")
        # Everything is checked (with the constructor's checks) before anything changes.
        scale = _check_positive("scale", state_dict["scale"])
        growth_factor, backoff_factor = state_dict["growth_factor"], state_dict["backoff_factor"]
        self._check_growth_factor(growth_factor)
        self._check_backoff_factor(backoff_factor)
        growth_interval = _check_int("growth_interval", state_dict["growth_interval"])
        growth_tracker = _check_int("_growth_tracker", state_dict["_growth_tracker"], low=0)
        hysteresis = _check_int("hysteresis", state_dict.get("hysteresis", 1))
        hysteresis_tracker = _check_int("_hysteresis_tracker", state_dict.get("_hysteresis_tracker", hysteresis),
                                        low=0)
        bounds = []
        for name in ("min_scale", "max_scale"):
            value = state_dict.get(name, getattr(self, f"_{name}"))
            bounds.append(None if value is None else float(np.float32(_check_positive(name, value))))
        min_scale, max_scale = bounds
        if min_scale is not None and min_scale > scale:
            raise ValueError(f"GradScaler.load_state_dict: min_scale ({min_scale}) must be <= scale ({scale})")
        if max_scale is not None and max_scale < scale:
            raise ValueError(f"GradScaler.load_state_dict: max_scale ({max_scale}) must be >= scale ({scale})")
        self._init_scale = scale
        self._growth_factor, self._backoff_factor = float(growth_factor), float(backoff_factor)
        self._growth_interval, self._init_growth_tracker = growth_interval, growth_tracker
        self._hysteresis, self._init_hysteresis_tracker = hysteresis, hysteresis_tracker
        self._min_scale, self._max_scale = min_scale, max_scale
        if self._scale is not None:
            self._scale[...] = self._init_scale
            self._growth_tracker[...] = self._init_growth_tracker
            self._hysteresis_tracker[...] = self._init_hysteresis_tracker
