"""GradScaler's settings and checkpoint state: getters, setters, validation, state_dict.

Separate from ``grad_scaler.py`` (the scale/unscale_/step/update machinery):
these read or write the scaler's Python-side settings, and the few that read a
device value (``get_scale()``, the trackers, ``state_dict()``) are the scaler's
only host synchronisations.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .scaler_step import read_host


def check_positive(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"GradScaler: {name} must be a positive finite number, got {value!r}")
    return float(value)


def check_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"GradScaler: {name} must be an integer >= 1, got {value!r}")
    return int(value)


class ScalerSettingsMixin:
    """The settings half of :class:`tinyamp.amp.GradScaler` (PyTorch's accessor names)."""

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
        self._growth_interval = check_int("growth_interval", new_interval)

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
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 1.0):
            raise ValueError(f"The growth factor must be > 1.0 (and finite), got {value!r}")

    @staticmethod
    def _check_backoff_factor(value: Any) -> None:
        if not (isinstance(value, (int, float)) and 0.0 < value < 1.0):
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
        self._init_scale = check_positive("scale", state_dict["scale"])
        self.set_growth_factor(state_dict["growth_factor"])
        self.set_backoff_factor(state_dict["backoff_factor"])
        self.set_growth_interval(state_dict["growth_interval"])
        self._init_growth_tracker = int(state_dict["_growth_tracker"])
        self._hysteresis = check_int("hysteresis", state_dict.get("hysteresis", 1))
        self._init_hysteresis_tracker = int(state_dict.get("_hysteresis_tracker", self._hysteresis))
        self._min_scale = state_dict.get("min_scale", self._min_scale)
        self._max_scale = state_dict.get("max_scale", self._max_scale)
        if self._scale is not None:
            self._scale[...] = self._init_scale
            self._growth_tracker[...] = self._init_growth_tracker
            self._hysteresis_tracker[...] = self._init_hysteresis_tracker
