"""The loss-scale cases the CPU, stand-in and GPU kernel tests share: the unscale kernel's dtype pairs, the
update rule's hyper-parameters and its state grid around the thresholds, and the NumPy path they are held to."""

from __future__ import annotations

import numpy as np

from tests.support import fused_drivers as fd
from tinyamp.kernels import loss_scale

UNSCALE_PAIRS = [(fd.F32, fd.F32), (fd.F16, fd.F32), (fd.BF16, fd.BF16), (fd.BF16, fd.F32), (fd.F16, fd.F16)]

HYPERS = [
    dict(growth_factor=2.0, backoff_factor=0.5, growth_interval=3, hysteresis=1, min_scale=None, max_scale=None),
    dict(growth_factor=1.5, backoff_factor=0.3, growth_interval=1, hysteresis=3, min_scale=0.125,
         max_scale=2.0 ** 20),
    dict(growth_factor=1e30, backoff_factor=1e-30, growth_interval=2, hysteresis=2, min_scale=None, max_scale=None),
]
SCALES = [loss_scale.DEFAULT_MIN_SCALE, 0.125, 1.0, 3.0, 65536.0, 2.0 ** 20, 2.0 ** 127, 3.4e38]


def scale_states(hyper: dict):
    """Every combination of found_inf, trackers and scale around the rule's thresholds."""
    interval = hyper["growth_interval"]
    for found in (0.0, 1.0):
        for growth in sorted({0, max(interval - 2, 0), interval - 1, interval}):
            for hyst in range(hyper["hysteresis"] + 2):
                for scale in SCALES:
                    yield (np.full((), scale, np.float32), np.full((), growth, np.int32),
                           np.full((), hyst, np.int32), np.full((), found, np.float32))


def numpy_update_scale(*arrays, **hyper) -> None:
    with np.errstate(over="ignore"):
        loss_scale.update_scale(np, *arrays, **hyper)
