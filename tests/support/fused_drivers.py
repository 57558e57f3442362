"""Shared drivers for the fused-kernel tests: one optimizer run, three implementations.

``sgd_run`` and ``adam_run`` take an ``update`` function for one parameter
(``numpy_sgd``/``numpy_adam``, or the group kernels through ``sgd_as_group``/
``adam_as_group``) and run a few steps on fresh arrays
(some steps skipped with inf gradients), returning a snapshot of every array
after every step. The tests hand them the NumPy path of the optimizers, the
NumPy reference of the kernels, the emulated kernels (CPU) and the real ones
(GPU), and compare the snapshots bit for bit.
"""

from __future__ import annotations

from typing import Any, Callable

import ml_dtypes
import numpy as np

from tinyamp.optim.adam import _adam_param
from tinyamp.optim.sgd import _sgd_param

F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
BF16 = np.dtype(ml_dtypes.bfloat16)

SGD_CASES = [
    dict(lr=0.1, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False, maximize=False),
    dict(lr=0.05, momentum=0.0, dampening=0.0, weight_decay=1e-2, nesterov=False, maximize=True),
    dict(lr=0.1, momentum=0.9, dampening=0.0, weight_decay=0.0, nesterov=False, maximize=False),
    dict(lr=0.03, momentum=0.9, dampening=0.1, weight_decay=1e-4, nesterov=False, maximize=True),
    dict(lr=0.01, momentum=0.95, dampening=0.0, weight_decay=5e-4, nesterov=True, maximize=False),
]
ADAM_CASES = [
    dict(lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0, decoupled=False, amsgrad=False),
    dict(lr=3e-3, beta1=0.8, beta2=0.99, eps=1e-6, weight_decay=1e-2, decoupled=False, amsgrad=False),
    dict(lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=1e-2, decoupled=True, amsgrad=False),
    dict(lr=2e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, decoupled=True, amsgrad=True),
]
# (weight, gradient, low-precision copy or None): float32 weights with float32 or
# float16 gradients, O2 masters with a float16/bfloat16 copy, low-precision weights without masters.
DTYPE_CASES = [(F32, F32, None), (F32, F16, None), (F32, F32, F16), (F32, F32, BF16), (F16, F16, None),
               (BF16, BF16, None)]
# Keep flags per step: no AMP mask, kept, skipped (inf gradient), kept, skipped, kept.
KEEPS = [True, np.array(True), np.array(False), np.array(True), np.array(False), np.array(True)]
SHAPE = (5, 37)


def bits(array: np.ndarray) -> np.ndarray:
    """The raw bits of an array (any NaN normalised to one pattern)."""
    array = np.asarray(array)
    raw = array.view(f"u{array.dtype.itemsize}").copy()
    nan = np.isnan(array.astype(np.float64)) if array.dtype != np.bool_ else np.zeros(array.shape, bool)
    raw[nan] = 0
    return raw


def assert_same_bits(got: list, want: list, what: str = "") -> None:
    assert len(got) == len(want)
    for i, (a, b) in enumerate(zip(got, want)):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype and a.shape == b.shape, f"{what}[{i}]: {a.dtype}{a.shape} vs {b.dtype}{b.shape}"
        same = (bits(a) == bits(b)) & (np.isnan(a.astype(np.float64)) == np.isnan(b.astype(np.float64)))
        if not same.all():
            where = np.argwhere(~same)[:3].tolist()
            raise AssertionError(f"{what}[{i}] differs at {where}: {a.reshape(-1)[:4]} vs {b.reshape(-1)[:4]}")


def _gradient(rng: np.random.Generator, dtype: np.dtype, keep: Any) -> np.ndarray:
    g = (rng.standard_normal(SHAPE) * 0.5).astype(dtype)
    if keep is not True and not bool(keep):
        g[1, 3] = np.inf  # what a skipped step sees
    return g


def sgd_run(update: Callable, case: dict, dtypes: tuple, seed: int = 0) -> list:
    """Snapshots of (w, buf, step, low) after each of len(KEEPS) SGD steps."""
    w_dt, g_dt, low_dt = dtypes
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(SHAPE).astype(w_dt)
    momentum = case["momentum"] != 0
    buf = np.zeros(SHAPE, w_dt) if momentum else None
    step = np.zeros((), np.float32) if momentum else None
    low = None if low_dt is None else w.astype(low_dt)
    snapshots = []
    for keep in KEEPS:
        with np.errstate(all="ignore"):
            update(w, _gradient(rng, g_dt, keep), buf, step, keep, low=low, **case)
        snapshots.append([a.copy() for a in (w, buf, step, low) if a is not None])
    return snapshots


def adam_run(update: Callable, case: dict, dtypes: tuple, seed: int = 0) -> list:
    """Snapshots of (w, m, v, v_max, step, low) after each Adam step."""
    case = dict(case)
    amsgrad = case.pop("amsgrad")
    w_dt, g_dt, low_dt = dtypes
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(SHAPE).astype(w_dt)
    m, v = np.zeros(SHAPE, w_dt), np.zeros(SHAPE, w_dt)
    v_max = np.zeros(SHAPE, w_dt) if amsgrad else None
    step = np.zeros((), np.float32)
    low = None if low_dt is None else w.astype(low_dt)
    snapshots = []
    for keep in KEEPS:
        with np.errstate(all="ignore"):
            update(w, _gradient(rng, g_dt, keep), m, v, v_max, step, keep, low=low, **case)
        snapshots.append([a.copy() for a in (w, m, v, v_max, step, low) if a is not None])
    return snapshots


def numpy_sgd(w: Any, g: Any, buf: Any, step: Any, keep: Any, *, low: Any = None, **case: Any) -> None:
    """The optimizer's NumPy path, plus the O2 write-back ``Optimizer._finish`` does."""
    _sgd_param(np, w, g, buf, step, keep, **case)
    if low is not None:
        low[...] = w.astype(low.dtype)


def numpy_adam(w: Any, g: Any, m: Any, v: Any, v_max: Any, step: Any, keep: Any, *, low: Any = None,
               **case: Any) -> None:
    _adam_param(np, w, g, m, v, v_max, step, keep, **case)
    if low is not None:
        low[...] = w.astype(low.dtype)


def case_id(case: dict) -> str:
    return "-".join(f"{k}={v}" for k, v in case.items() if v not in (0, 0.0, False) and k != "lr")


# ----------------------------------------------------- multi-tensor kernels
def found_of(keep: Any) -> Any:
    """The scaler's found_inf for a driver's keep flag (None: no AMP)."""
    return None if keep is True else np.full((1,), 0.0 if bool(keep) else 1.0, np.float32)


def sgd_as_group(sgd_group: Callable, to_device: Callable = np.asarray) -> Callable:
    """A driver ``update`` running ``cuda_optim.sgd_group`` on a group of one tensor."""
    def update(w, g, buf, step, keep, *, low=None, lr, momentum, dampening, weight_decay, nesterov, maximize):
        hyper = to_device(np.array([lr, momentum, dampening, weight_decay], np.float64))
        found = found_of(keep)
        sgd_group([w], [g], None if buf is None else [buf], None if step is None else [step], [low],
                  None if found is None else to_device(found), hyper, nesterov=nesterov, maximize=maximize)
    return update


def adam_as_group(adam_group: Callable, to_device: Callable = np.asarray) -> Callable:
    """A driver ``update`` running ``cuda_optim.adam_group`` on a group of one tensor."""
    def update(w, g, m, v, v_max, step, keep, *, low=None, lr, beta1, beta2, eps, weight_decay, decoupled):
        hyper = to_device(np.array([lr, beta1, beta2, eps, weight_decay], np.float64))
        found = found_of(keep)
        adam_group([w], [g], [m], [v], None if v_max is None else [v_max], [step], [low],
                   None if found is None else to_device(found), hyper, decoupled=decoupled)
    return update
