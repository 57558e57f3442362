"""SGD and Adam/AdamW updates of one float32 NumPy parameter in one numba pass.

The NumPy paths in ``optim/sgd.py`` and ``optim/adam.py`` spell the update as
whole-array operations: a dozen temporaries the size of the parameter. On the
CPU, when the step is kept (the host knows: reading ``found_inf`` costs nothing
there) and the parameter, its gradient and its state are contiguous float32,
these do the same float32 arithmetic element by element, in the same order and
with every Python scalar rounded to float32 as NumPy rounds it (numba never
fuses ``a * b + c``: no fastmath), so the results are bit for bit NumPy's.
Adam's bias corrections are computed on the host as the NumPy path does: in
float64 with the C library's ``pow``, then rounded to float32.

Each function returns False (having done nothing) when it does not apply; the
caller then takes the NumPy path.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ... import dtypes as dt
from . import cpu_path
from .cpu_numba import KERNELS

_F32 = np.float32
_ONE = np.float32(1.0)
_DUMMY = np.zeros(1, np.float32)  # for a state buffer an update does not have


def _applies(w: Any, *arrays: Any, kernel: str = "cpu_optim") -> bool:
    """Whether the numba pass takes ``w`` and its per-element ``arrays`` (NumPy, float32, C-contiguous).

    The kernels index every array by ``w``'s flat index without bounds checks,
    so another shape is refused here, never read past.
    """
    for a in (w, *arrays):
        if a is not None and a.shape != w.shape:
            raise ValueError(f"{kernel}: an array of shape {list(a.shape)} does not fit the weight of shape "
                             f"{list(w.shape)}")
        if a is not None and (type(a) is not np.ndarray or a.dtype != dt.float32 or not a.flags.c_contiguous):
            return False
    return cpu_path.resolve(None) == "numba"


def sgd_update(w: Any, g: Any, buf: Any, step: Any, *, lr: float, momentum: float, dampening: float,
               weight_decay: float, nesterov: bool, maximize: bool) -> bool:
    """``optim.sgd._sgd_param`` for a kept step, in place; ``buf``/``step`` None without momentum."""
    if not _applies(w, g, buf, kernel="sgd_update"):
        return False
    momentum_on = momentum != 0
    started = momentum_on and float(step) > 0  # the first step seeds the buffer with the gradient
    KERNELS["sgd_f32"](w.reshape(-1), g.reshape(-1), _DUMMY if buf is None else buf.reshape(-1), _F32(lr),
                       _F32(momentum), _F32(1 - dampening), _F32(weight_decay), weight_decay != 0, bool(maximize),
                       momentum_on, started, bool(nesterov))
    if momentum_on:
        step[...] = step + _ONE
    return True


def adam_update(w: Any, g: Any, m: Any, v: Any, v_max: Any, step: Any, *, lr: float, beta1: float, beta2: float,
                eps: float, weight_decay: float, decoupled: bool) -> bool:
    """``optim.adam._adam_param`` for a kept step, in place (``v_max`` None without AMSGrad)."""
    if not _applies(w, g, m, v, v_max, kernel="adam_update"):
        return False
    t = float(_F32(step) + _ONE)  # (step + 1) in float32, as the NumPy path, then used in float64
    step_size = _F32(lr / (1 - beta1 ** t))
    bias2_sqrt = _F32(math.sqrt(1 - beta2 ** t))
    KERNELS["adam_f32"](w.reshape(-1), g.reshape(-1), m.reshape(-1), v.reshape(-1),
                        _DUMMY if v_max is None else v_max.reshape(-1), step_size, bias2_sqrt, _F32(1 - beta1),
                        _F32(beta2), _F32(1 - beta2), _F32(eps), _F32(weight_decay), _F32(1 - lr * weight_decay),
                        weight_decay != 0, bool(decoupled), v_max is not None)
    step[...] = step + _ONE
    return True
