"""Cross-entropy of 2-D logits against int64 class indices, fused: forward and backward on arrays.

``ops/loss.py``'s ``CrossEntropy`` hands (N, C) float16/bfloat16/float32 logits
here (other shapes and float64 take its general path). Everything is computed
in float32 (16-bit logits are widened exactly) and rounded once to the output
dtype:

- :func:`forward`: the loss (``"none"``, ``"mean"`` or ``"sum"``) and what the
  backward reads (each row's log-sum-exp, the "mean" divisor).
- :func:`backward`: the logits' gradient, in ``out_dtype``.

On NumPy arrays the work is the few NumPy operations below; on CuPy arrays it
is one kernel launch each way (``cuda_loss.py``), which repeats these
operations in the same order, including NumPy's pairwise order for every sum,
so the two agree bit for bit given the same ``exp`` and ``log`` (the device's
``expf``/``logf`` and NumPy's vectorised ones round differently in the last
bit for some inputs). The NumPy path is, operation for operation, the general
path of ``CrossEntropy`` specialised to two dimensions, so it keeps its results
bit for bit.

Targets: a row whose target is ``ignore_index`` weighs 0. An out-of-range
target is refused by the caller on the CPU (a host check is free there); on a
GPU, and here when the caller did not check, it weighs NaN, so the loss and the
gradients are NaN (GradScaler then skips the step) without a host sync.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import numpy as np

from .. import dtypes as dt
from .cuda import cuda_launch, cuda_loss
from .convert import convert

FUSED_DTYPES = cuda_launch.FUSED_DTYPES
_ONE = np.ones((), dt.float32)  # backward's "mean" divisor when every target is ignored (a 0 gradient, not 0/0)
_ONE.flags.writeable = False


class TargetOutOfRange(Exception):
    """A target outside [0, C) that is not ignore_index (the NumPy path's host check)."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value


class Saved(NamedTuple):
    """What the NumPy backward reads: per-row log-sum-exp (N, 1), divisor, weights, validity, targets."""

    lse: np.ndarray
    count: Any
    row_weight: np.ndarray
    valid: np.ndarray
    safe: np.ndarray


def fusable(x: Any, target: Any, weight: Any) -> bool:
    """Whether :func:`forward` takes these: (N, C) logits with N, C >= 1 in a 16/32-bit float dtype."""
    return (x.ndim == 2 and x.shape[0] > 0 and x.shape[1] > 0 and x.dtype in FUSED_DTYPES
            and target.shape == (x.shape[0],) and target.dtype == dt.int64
            and (weight is None or (weight.shape == (x.shape[1],) and weight.dtype in FUSED_DTYPES)))


def forward(x: Any, target: Any, weight: Any, *, ignore_index: int, reduction: str, label_smoothing: float,
            out_dtype: Any, check_range: bool = True, exp: Callable = np.exp,
            log: Callable = np.log, out_of_range: "Callable[[int], Exception] | None" = None) -> tuple[Any, Any]:
    """(loss in ``out_dtype``, saved state for :func:`backward`).

    On the NumPy path an out-of-range target raises :class:`TargetOutOfRange`
    unless ``check_range`` is False (then it gives NaN, as on a GPU). On a GPU
    it gives NaN and sets a device flag that the next host read turns into
    ``out_of_range(value)`` (``backend.defer_device_check``).
    ``exp``/``log`` replace NumPy's float32 ``exp``/``log`` there (the tests
    pass the C library's, to compare with the kernel run on a CPU).
    """
    eps = label_smoothing
    if cuda_launch.on_gpu(x):
        return cuda_loss.forward(x, target, weight, ignore_index=ignore_index, reduction=reduction,
                                 hot_c=np.float32(1.0 - eps), smooth_c=np.float32(eps / x.shape[1]),
                                 smoothing=bool(eps), out_dtype=out_dtype, out_of_range=out_of_range)
    # inf/nan logits give inf/nan losses and gradients (as on a GPU and in PyTorch), silently.
    with np.errstate(all="ignore"):
        return _forward_numpy(x, target, weight, ignore_index, reduction, eps, out_dtype, check_range, exp, log)


def _forward_numpy(x: Any, target: Any, weight: Any, ignore_index: int, reduction: str, eps: float,
                   out_dtype: Any, check_range: bool, exp: Callable, log: Callable) -> tuple[Any, Any]:
    n, classes = x.shape
    valid = target != ignore_index
    bad = valid & ((target < 0) | (target >= classes))
    has_bad = bool(bad.any())
    if has_bad and check_range:
        raise TargetOutOfRange(int(target[bad][0]))
    safe = np.where(valid & ~bad if has_bad else valid, target, 0)
    row_weight = (weight.astype(dt.float32)[safe] * valid if weight is not None else valid.astype(dt.float32))
    if has_bad:
        row_weight[bad] = np.nan
    xf = x if x.dtype == dt.float32 else x.astype(dt.float32)
    m = xf.max(axis=1, keepdims=True)
    m = np.where(m != -np.inf, m, np.float32(0))  # an all -inf row shifts by 0, not by the infinity
    z = xf - m  # +inf - +inf = nan: the documented result
    lse = log(exp(z).sum(axis=1, keepdims=True))
    loss = -row_weight * (z[np.arange(n), safe] - lse[:, 0])
    if eps:
        w = 1 if weight is None else weight.astype(dt.float32)
        smooth = -((z - lse) * w).sum(axis=1) * valid
        loss = (1.0 - eps) * loss + (eps / classes) * smooth
    count = row_weight.sum()
    saved = Saved(lse + m, count, row_weight, valid, safe)
    if reduction == "none":
        return np.asarray(loss, dtype=out_dtype), saved
    total = loss.sum()
    if reduction == "mean":
        total = total / count  # every target ignored: 0/0 = nan
    return np.asarray(total, dtype=out_dtype), saved


def saved_lse(saved: Any, n: int) -> Any:
    """Each row's log-sum-exp, shape (N, 1) float32, from either path's saved state."""
    if isinstance(saved, Saved):
        return saved.lse
    return saved[:n].reshape(n, 1)


def backward(x: Any, target: Any, weight: Any, gy: Any, saved: Any, *, ignore_index: int, reduction: str,
             label_smoothing: float, out_dtype: Any, via_float32: bool = False,
             exp: Callable = np.exp) -> Any:
    """The gradient of the loss with respect to the logits, in ``out_dtype``.

    ``gx = u * (softmax(x) * s - q)`` with ``q`` the (weighted, smoothed) target
    distribution, ``s = sum_c q`` and ``u`` the upstream gradient (divided by the
    total target weight for "mean"). ``via_float32`` rounds to float32 before
    ``out_dtype`` (what a float32 result cast back to 16 bits gives).
    """
    eps = label_smoothing
    n, classes = x.shape
    if cuda_launch.on_gpu(x):
        return cuda_loss.backward(x, target, weight, gy, saved, ignore_index=ignore_index, reduction=reduction,
                                  hot_c=np.float32(1.0 - eps), smooth_d=eps / classes, smoothing=bool(eps),
                                  out_dtype=out_dtype, via_float32=via_float32)
    with np.errstate(all="ignore"):
        return _backward_numpy(x, weight, gy, saved, reduction, eps, out_dtype, via_float32, exp)


def _backward_numpy(x: Any, weight: Any, gy: Any, saved: Saved, reduction: str, eps: float, out_dtype: Any,
                    via_float32: bool, exp: Callable) -> Any:
    n, classes = x.shape
    u = gy.astype(dt.float32, copy=False)
    if reduction == "none":
        u = u[:, None]
    elif reduction == "mean":
        u = u / np.where(saved.count == 0, _ONE, saved.count)
    hot = (1.0 - eps) * saved.row_weight[:, None]
    total, smooth = hot, None
    if eps:
        # NumPy's dtypes, kept: (eps / C) * a bool array is float64, so these terms are float64.
        w = weight.astype(dt.float32) if weight is not None else np.ones(classes, dt.float32)
        valid = saved.valid[:, None]
        smooth = (eps / classes) * valid * w.reshape(1, classes)
        total = total + (eps / classes) * valid * w.sum()
    xf = x if x.dtype == dt.float32 else x.astype(dt.float32)
    g = exp(xf - saved.lse) * (total * u)
    g[np.arange(n), saved.safe] -= (hot * u)[:, 0]
    if smooth is not None:
        g -= smooth * u
    if via_float32:
        g = g.astype(dt.float32, copy=False)
    if out_dtype == dt.float16 and g.dtype == dt.float32:
        # NumPy's float32 -> float16 cast takes a slow path for every value that underflows, and a
        # softmax times a loss scale is mostly such values: convert's kernels give the same bits.
        return convert(g, dt.float16)
    return g.astype(out_dtype, copy=False)
