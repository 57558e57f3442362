"""Classification and regression losses: cross_entropy, nll_loss, mse_loss, l1_loss, huber_loss, smooth_l1_loss.

All are FP32-tagged, as in PyTorch's autocast lists: a loss sums many terms and
its gradient is the first thing loss scaling multiplies, so it runs in float32.
Outside autocast, float16/bfloat16 inputs are computed in float32 internally and
the result is rounded once to the input dtype. Mixed dtypes follow PyTorch:
``mse_loss``/``l1_loss`` promote input and target to one dtype first
(``promoted_inputs``: float16 with float32 is float32), while a class
``weight`` must have the input's dtype.

``reduction`` is ``"none"``, ``"mean"`` or ``"sum"``. Shapes must match exactly:
PyTorch broadcasts ``mse_loss(input, target)`` with a warning; tinyamp refuses
with an error naming both shapes, because a silently broadcast loss trains the
wrong model. Class weights and targets are constants (no gradient), as in
PyTorch. The binary cross-entropy losses live in ``ops/loss_binary.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import backend
from .. import dtypes as dt
from ..precision import FP32
from ..autograd.function import Function
from ..grad_mode import is_grad_enabled
from ..kernels import cross_entropy as fused_loss
from ..tensor import Tensor
from .cast import cast
from .clamp_where import clamp
from .reduce import sum as _sum
from .softmax import shifted, softmax

REDUCTIONS = ("none", "mean", "sum")


def check_reduction(op: str, reduction: str) -> None:
    if reduction not in REDUCTIONS:
        raise ValueError(f"{op}: {reduction!r} is not a valid value for reduction; "
                         f"expected 'none', 'mean' or 'sum'")


def check_constant(op: str, name: str, t: "Tensor | None") -> None:
    """Weights of losses get no gradient (as in PyTorch): refuse rather than drop one."""
    if t is not None and t.requires_grad and is_grad_enabled():
        raise RuntimeError(f"{op}: the derivative for '{name}' is not implemented (it is a constant "
                           f"of the loss); pass {name}.detach()")


def reduce_loss(xp: Any, loss: Any, reduction: str, out_dtype: Any) -> Any:
    """Apply ``reduction`` to an elementwise loss array; the result in ``out_dtype``."""
    if reduction == "none":
        return xp.asarray(loss, dtype=out_dtype)  # asarray: NumPy gives 0-d results as scalars
    total = loss.sum()
    if reduction == "mean":
        total = total / loss.size
    return xp.asarray(total, dtype=out_dtype)


def scale_grad(gy: Tensor, reduction: str, count: int) -> Tensor:
    """The upstream gradient of each element: gy itself, or gy / count for "mean"."""
    return gy / count if reduction == "mean" else gy


class _OutOfRange:
    """The error an out-of-range target found on a GPU raises at the next host read (shapes kept, not arrays)."""

    __slots__ = ("name", "shape", "dtype", "target_shape", "ignore_index")

    def __init__(self, name: str, shape: tuple, dtype: Any, target_shape: tuple, ignore_index: int) -> None:
        self.name, self.shape, self.dtype = name, shape, dtype
        self.target_shape, self.ignore_index = target_shape, ignore_index

    def __call__(self, value: int) -> IndexError:
        classes = self.shape[1]
        return IndexError(f"{self.name}: target value {value} is out of range for {classes} classes (input "
                          f"{list(self.shape)} ({dt.dtype_name(self.dtype)}), target shape "
                          f"{list(self.target_shape)}); expected values in [0, {classes}) or ignore_index="
                          f"{self.ignore_index}. Found on the GPU by an earlier cross_entropy launch and raised "
                          f"at this host read: the loss and gradients of that step are NaN")


def describe(x: Any) -> str:
    return f"{list(x.shape)} ({dt.dtype_name(x.dtype)})"


# ------------------------------------------------------------ class indices
class ClassIndexLoss(Function):
    """Shared machinery of cross_entropy and nll_loss (class-index targets).

    Every per-sample loss is ``-sum_c q[c] * logp[c]`` where ``q`` is a constant
    target distribution: the (weighted) one-hot of the target, mixed with the
    uniform distribution by label smoothing, zero for ignored samples.
    """

    precision = FP32

    def __init__(self, weighted: bool, ignore_index: int, reduction: str,
                 label_smoothing: float = 0.0) -> None:
        self.weighted, self.ignore_index = weighted, ignore_index
        self.reduction, self.label_smoothing = reduction, label_smoothing

    def check(self, x: Any, target: Any, weight: Any) -> None:
        """Refuse inputs of the wrong kind, shape or dtype; keep the class axis."""
        op = self.name
        if x.ndim == 0 or x.dtype not in dt.FLOATING:
            raise ValueError(f"{op}: input must be a floating tensor of shape (C,), (N, C) or "
                             f"(N, C, d1, ...), got {describe(x)}")
        self.axis = 0 if x.ndim == 1 else 1
        classes = x.shape[self.axis]
        expected = x.shape[:self.axis] + x.shape[self.axis + 1:]
        if target.dtype != dt.int64:
            raise TypeError(f"{op}: target must hold int64 class indices, got {describe(target)} for "
                            f"input {describe(x)} (class-probability targets are not supported; "
                            f"use target.long() for integer labels)")
        if target.shape != expected:
            raise ValueError(f"{op}: target shape {list(target.shape)} does not match input shape "
                             f"{list(x.shape)}; expected target shape {list(expected)} "
                             f"(the input without its class dimension {self.axis})")
        if weight is not None and (weight.shape != (classes,) or weight.dtype != x.dtype):
            raise ValueError(f"{op}: weight must have shape [{classes}] and the input's dtype "
                             f"{dt.dtype_name(x.dtype)}, got {describe(weight)}")

    def out_of_range(self, x: Any, target: Any, value: int) -> IndexError:
        classes = x.shape[self.axis]
        return IndexError(f"{self.name}: target value {value} is out of range for {classes} classes "
                          f"(input {describe(x)}, target shape {list(target.shape)}); expected "
                          f"values in [0, {classes}) or ignore_index={self.ignore_index}")

    def prepare(self, xp: Any, x: Any, target: Any, weight: Any) -> None:
        """Check the inputs; keep the class axis, the safe targets and their weights."""
        self.check(x, target, weight)
        classes = x.shape[self.axis]
        valid = target != self.ignore_index
        bad = valid & ((target < 0) | (target >= classes))
        # On a GPU the range is not checked on the host (that would be a host sync
        # every step): an out-of-range target reads class 0 with a nan weight, so
        # its loss, the reduced loss and the gradients are nan (GradScaler skips).
        on_gpu = backend.is_cupy_array(bad)
        if not on_gpu and bad.any():
            raise self.out_of_range(x, target, int(target[bad].reshape(-1)[0]))
        cdt = dt.opmath_dtype(x.dtype)
        self.valid = valid
        self.safe = xp.where(valid & ~bad if on_gpu else valid, target, 0)
        self.w_t = (weight.astype(cdt)[self.safe] if weight is not None
                    else xp.ones(target.shape, dtype=cdt)) * valid
        if on_gpu:
            self.w_t = xp.where(bad, np.dtype(cdt).type(np.nan), self.w_t)  # a kernel argument, not an upload
        self.weight = weight
        self.count = self.w_t.sum()  # the "mean" divisor: the weight of the kept targets

    def picked(self, xp: Any, values: Any) -> Any:
        """values[..., target, ...] along the class axis."""
        index = xp.expand_dims(self.safe, self.axis)
        return xp.take_along_axis(values, index, axis=self.axis).squeeze(self.axis)

    def finish(self, xp: Any, loss: Any, out_dtype: Any) -> Any:
        if self.reduction == "none":
            return xp.asarray(loss, dtype=out_dtype)  # asarray: NumPy gives 0-d results as scalars
        total = loss.sum()
        if self.reduction == "mean":
            # Every target ignored: 0/0 = nan, as PyTorch. (errstate silences NumPy; CuPy never warns.)
            with np.errstate(invalid="ignore", divide="ignore"):
                total = total / self.count
        return xp.asarray(total, dtype=out_dtype)

    def divisor(self, xp: Any) -> Any:
        """The "mean" divisor for gradients: 1 where every target is ignored (then none gets one)."""
        return xp.where(self.count == 0, xp.ones((), self.count.dtype), self.count)

    def row_weights(self, xp: Any, ndim: int, classes: int) -> tuple:
        """(one-hot weight, s = sum_c q, smoothing weight per class or None), class axis kept.

        ``q = onehot(target) * onehot_weight + smoothing_weight`` and ``s = sum_c q``;
        all three are zero for ignored samples.
        """
        eps = self.label_smoothing
        w_t = xp.expand_dims(self.w_t, self.axis)
        hot, total, smooth = (1.0 - eps) * w_t, (1.0 - eps) * w_t, None
        if eps:
            shape = [1] * ndim
            shape[self.axis] = classes
            w = self.weight.astype(w_t.dtype) if self.weight is not None else xp.ones(classes, w_t.dtype)
            valid = xp.expand_dims(self.valid, self.axis)
            smooth = (eps / classes) * valid * w.reshape(shape)
            total = total + (eps / classes) * valid * w.sum()
        return hot, total, smooth

    def target_distribution(self, xp: Any, shape_x: tuple, dtype: Any) -> tuple[Tensor, Tensor]:
        """Constants ``q`` (the input's shape) and ``s = sum_c q`` (class axis kept, size 1)."""
        classes = shape_x[self.axis]
        hot, total, smooth = self.row_weights(xp, len(shape_x), classes)
        shape = [1] * len(shape_x)
        shape[self.axis] = classes
        q = hot * (xp.arange(classes).reshape(shape) == xp.expand_dims(self.safe, self.axis))
        if smooth is not None:
            q = q + smooth
        return Tensor._wrap(q.astype(dtype, copy=False)), Tensor._wrap(total.astype(dtype, copy=False))

    def target_index(self, xp: Any) -> tuple:
        """A fancy index selecting each sample's target element of an input-shaped array."""
        shape = self.safe.shape
        # One broadcastable arange per non-class dimension (an open grid), the target in between.
        rest = [xp.arange(n).reshape([n if i == d else 1 for i in range(len(shape))])
                for d, n in enumerate(shape)]
        rest.insert(self.axis, self.safe)
        return tuple(rest)

    def upstream(self, gy: Tensor) -> Tensor:
        """gy per sample, with a size-1 class axis so it broadcasts over classes."""
        if self.reduction == "none":
            shape = list(gy.shape)
            shape.insert(self.axis, 1)
            return gy.reshape(tuple(shape))
        if self.reduction == "mean":
            return gy / Tensor._wrap(self.divisor(gy.device.xp).astype(gy.dtype))
        return gy

    def reduce_like_forward(self, per_sample: Tensor) -> Tensor:
        """Per-sample values summed the way the forward reduced them (the adjoint of upstream)."""
        if self.reduction == "none":
            return per_sample
        total = _sum(per_sample)
        if self.reduction == "mean":
            return total / Tensor._wrap(self.divisor(per_sample.device.xp).astype(total.dtype))
        return total


class CrossEntropy(ClassIndexLoss):
    """y = -sum_c q_c log_softmax(x)_c; dx = gy * (softmax(x) * sum_c q_c - q)

    (N, C) logits in float16/bfloat16/float32 take the fused kernels of
    ``kernels/cross_entropy.py`` (one pass each way; one launch each on a GPU);
    other shapes and float64 the general path below, with the same results.
    Under autocast (FP32) 16-bit logits arrive widened by a Cast node, whose
    backward rounds the float32 gradient back to their dtype.
    """

    precision = FP32
    name = "cross_entropy"
    save_inputs = (0,)
    fused: Any = None  # what the fused backward reads (None: the general path ran)

    def forward(self, xp: Any, x: Any, target: Any, weight: Any = None) -> Any:
        if fused_loss.fusable(x, target, weight):
            self.check(x, target, weight)
            self.inputs = (target, weight)
            try:
                loss, self.fused = fused_loss.forward(
                    x, target, weight, ignore_index=self.ignore_index, reduction=self.reduction,
                    label_smoothing=self.label_smoothing, out_dtype=x.dtype,
                    out_of_range=_OutOfRange(self.name, x.shape, x.dtype, target.shape, self.ignore_index))
            except fused_loss.TargetOutOfRange as bad:
                raise self.out_of_range(x, target, bad.value) from None
            return loss
        self.prepare(xp, x, target, weight)
        z, m = shifted(xp, x, self.axis)
        lse = xp.log(xp.exp(z).sum(axis=self.axis, keepdims=True))
        logp = z - lse
        self.lse = lse + m  # log-sum-exp per sample: backward rebuilds softmax as exp(x - lse)
        loss = -self.w_t * self.picked(xp, logp)
        eps = self.label_smoothing
        if eps:
            classes = x.shape[self.axis]
            w = 1 if weight is None else weight.astype(logp.dtype).reshape(
                (classes,) + (1,) * (x.ndim - self.axis - 1))
            smooth = -(logp * w).sum(axis=self.axis) * self.valid
            loss = (1.0 - eps) * loss + (eps / classes) * smooth
        return self.finish(xp, loss, x.dtype)

    def backward(self, gy: Tensor) -> tuple:
        (x,) = self.saved_tensors
        gx = CrossEntropyGrad(self)(x, gy)
        return (gx, None) + ((None,) if self.weighted else ())

    def fused_backward(self, x: Any, gy: Any) -> Any:
        """The logits' gradient from the fused forward's state, in the logits' dtype."""
        target, weight = self.inputs
        return fused_loss.backward(x, target, weight, gy, self.fused, ignore_index=self.ignore_index,
                                   reduction=self.reduction, label_smoothing=self.label_smoothing,
                                   out_dtype=x.dtype)

    def general_state(self, xp: Any, x: Any) -> None:
        """The general path's per-target state (for double backward after a fused forward)."""
        if self.fused is None or hasattr(self, "w_t"):
            return
        target, weight = self.inputs
        if isinstance(self.fused, fused_loss.Saved):  # the NumPy path computed it already
            self.valid, self.safe, self.w_t = self.fused.valid, self.fused.safe, self.fused.row_weight
            self.count, self.lse, self.weight = self.fused.count, self.fused.lse, weight
        else:
            self.prepare(xp, x, target, weight)
            self.lse = fused_loss.saved_lse(self.fused, x.shape[0])


class CrossEntropyGrad(Function):
    """gx = u (softmax(x) s - q); dx = p (c - sum(c p)) with c = ggx s u, dgy = reduce(sum_c ggx (p s - q))"""

    precision = FP32
    name = "cross_entropy_backward"
    save_inputs = (0, 1)

    def __init__(self, loss: CrossEntropy) -> None:
        self.loss = loss

    def forward(self, xp: Any, x: Any, gy: Any) -> Any:
        # One fused pass: softmax from the saved log-sum-exp, scaled, minus the
        # target's weight at each sample's target (and the smoothing mass).
        loss = self.loss
        if loss.fused is not None:
            return loss.fused_backward(x, gy)
        cdt = dt.opmath_dtype(x.dtype)
        u = gy.astype(cdt, copy=False)
        if loss.reduction == "none":
            u = xp.expand_dims(u, loss.axis)
        elif loss.reduction == "mean":
            u = u / loss.divisor(xp)
        hot, total, smooth = loss.row_weights(xp, x.ndim, x.shape[loss.axis])
        g = xp.exp(x.astype(cdt, copy=False) - loss.lse) * (total * u)
        g[loss.target_index(xp)] -= (hot * u).squeeze(loss.axis)  # one element per sample
        if smooth is not None:
            g -= smooth * u
        return g.astype(x.dtype, copy=False)

    def backward(self, ggx: Tensor) -> tuple:
        x, gy = self.saved_tensors
        loss = self.loss
        loss.general_state(x.device.xp, x.array)
        q, s = loss.target_distribution(x.device.xp, x.shape, x.dtype)
        p = softmax(x, loss.axis)
        u = loss.upstream(gy)
        dx = dgy = None
        if self.needs_input_grad[0]:
            c = ggx * s * u  # softmax's vector-Jacobian product with cotangent c
            dx = p * (c - _sum(c * p, loss.axis, keepdim=True))
        if self.needs_input_grad[1]:
            dgy = loss.reduce_like_forward(_sum(ggx * (p * s - q), loss.axis))
        return dx, dgy


class NllLoss(ClassIndexLoss):
    """y = -sum_c q_c x_c (x holds log-probabilities); dx = -gy * q"""

    precision = FP32
    name = "nll_loss"

    def forward(self, xp: Any, x: Any, target: Any, weight: Any = None) -> Any:
        self.prepare(xp, x, target, weight)
        loss = -self.w_t * self.picked(xp, x.astype(self.w_t.dtype, copy=False))
        return self.finish(xp, loss, x.dtype)

    def backward(self, gy: Tensor) -> tuple:
        shape, dtype = self.input_shapes[0], self.input_dtypes[0]
        q, _ = self.target_distribution(gy.device.xp, shape, dtype)
        gx = -q * self.upstream(gy)
        return (gx, None) + ((None,) if self.weighted else ())


# --------------------------------------------------------------- regression
class PairLoss(Function):
    """Shared checks of mse_loss and l1_loss: input and target of one shape, promoted to one dtype."""

    precision = FP32
    promoted_inputs = slice(0, 2)  # mse_loss(float16, float32) is float32, as in PyTorch
    save_inputs = (0, 1)

    def __init__(self, reduction: str) -> None:
        self.reduction = reduction

    def difference(self, xp: Any, x: Any, t: Any) -> Any:
        if x.shape != t.shape:
            raise ValueError(f"{self.name}: input shape {list(x.shape)} and target shape "
                             f"{list(t.shape)} differ; tinyamp does not broadcast a loss "
                             f"(reshape one of them explicitly)")
        if x.dtype not in dt.FLOATING:  # the dtypes are one already (promoted_inputs)
            raise TypeError(f"{self.name}: input and target must be floating tensors, got "
                            f"{describe(x)} and {describe(t)}")
        self.size = x.size
        cdt = dt.opmath_dtype(x.dtype)
        return x.astype(cdt, copy=False) - t.astype(cdt, copy=False)


class MseLoss(PairLoss):
    """y = reduce((x - t)^2); dx = 2 (x - t) gy, dt = -dx"""

    precision = FP32
    name = "mse_loss"

    def forward(self, xp: Any, x: Any, t: Any) -> Any:
        d = self.difference(xp, x, t)
        return reduce_loss(xp, d * d, self.reduction, x.dtype)

    def backward(self, gy: Tensor) -> tuple:
        x, t = self.saved_tensors
        gx = (x - t) * (scale_grad(gy, self.reduction, self.size) * 2)
        return (gx if self.needs_input_grad[0] else None,
                -gx if self.needs_input_grad[1] else None)


class L1Loss(PairLoss):
    """y = reduce(|x - t|); dx = sign(x - t) gy, dt = -dx"""

    precision = FP32
    name = "l1_loss"

    def forward(self, xp: Any, x: Any, t: Any) -> Any:
        d = self.difference(xp, x, t)
        return reduce_loss(xp, xp.abs(d), self.reduction, x.dtype)

    def backward(self, gy: Tensor) -> tuple:
        x, t = self.saved_tensors
        xp = x.device.xp
        # sign(x - t) is piecewise constant: a constant of the graph (its derivative is 0).
        sign = Tensor._wrap(xp.sign(x.array - t.array))
        gx = sign * scale_grad(gy, self.reduction, self.size)
        return (gx if self.needs_input_grad[0] else None,
                -gx if self.needs_input_grad[1] else None)


class HuberLoss(PairLoss):
    """y = reduce(0.5 d^2 if |d| < delta else delta (|d| - 0.5 delta)), d = x - t; dx = clamp(d, -delta, delta) gy"""

    precision = FP32
    name = "huber_loss"

    def __init__(self, reduction: str, delta: float) -> None:
        super().__init__(reduction)
        self.delta = delta

    def forward(self, xp: Any, x: Any, t: Any) -> Any:
        d = self.difference(xp, x, t)
        a = xp.abs(d)
        loss = xp.where(a < self.delta, 0.5 * d * d, self.delta * (a - 0.5 * self.delta))
        return reduce_loss(xp, loss, self.reduction, x.dtype)

    def backward(self, gy: Tensor) -> tuple:
        x, t = self.saved_tensors
        # The derivative of the loss is d clipped to [-delta, delta]; clamp's own derivative
        # (1 inside, 0 outside) is the second derivative, so double backward comes with it.
        gx = clamp(x - t, -self.delta, self.delta) * scale_grad(gy, self.reduction, self.size)
        return (gx if self.needs_input_grad[0] else None,
                -gx if self.needs_input_grad[1] else None)


class SmoothL1Loss(PairLoss):
    """y = reduce(0.5 d^2 / beta if |d| < beta else |d| - 0.5 beta), d = x - t; dx = clamp(d / beta, -1, 1) gy"""

    precision = FP32
    name = "smooth_l1_loss"

    def __init__(self, reduction: str, beta: float) -> None:
        super().__init__(reduction)
        self.beta = beta

    def forward(self, xp: Any, x: Any, t: Any) -> Any:
        d = self.difference(xp, x, t)
        a = xp.abs(d)
        if self.beta == 0:  # PyTorch: beta = 0 is exactly l1_loss
            return reduce_loss(xp, a, self.reduction, x.dtype)
        loss = xp.where(a < self.beta, 0.5 * d * d / self.beta, a - 0.5 * self.beta)
        return reduce_loss(xp, loss, self.reduction, x.dtype)

    def backward(self, gy: Tensor) -> tuple:
        x, t = self.saved_tensors
        scale = scale_grad(gy, self.reduction, self.size)
        if self.beta == 0:  # sign(d): a constant of the graph, as l1_loss's
            gx = Tensor._wrap(x.device.xp.sign(x.array - t.array)) * scale
        else:
            gx = clamp((x - t) / self.beta, -1.0, 1.0) * scale
        return (gx if self.needs_input_grad[0] else None,
                -gx if self.needs_input_grad[1] else None)


# ---------------------------------------------------------------- functions
def cross_entropy(input: Tensor, target: Tensor, weight: "Tensor | None" = None,  # noqa: A002
                  ignore_index: int = -100, reduction: str = "mean",
                  label_smoothing: float = 0.0) -> Tensor:
    """Cross-entropy of logits ``input`` (C,), (N, C) or (N, C, d1, ...) against int64 class indices.

    One fused op: log_softmax, the pick and the reduction in one forward pass;
    the backward is ``softmax(x) - onehot`` (weighted, smoothed, scaled).
    "mean" divides by the total weight of the targets that are not ``ignore_index``.
    """
    check_reduction("cross_entropy", reduction)
    check_constant("cross_entropy", "weight", weight)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1], got {label_smoothing}")
    op = CrossEntropy(weight is not None, ignore_index, reduction, float(label_smoothing))
    return op(input, target) if weight is None else op(input, target, weight)


def nll_loss(input: Tensor, target: Tensor, weight: "Tensor | None" = None,  # noqa: A002
             ignore_index: int = -100, reduction: str = "mean") -> Tensor:
    """Negative log-likelihood of log-probabilities ``input`` at int64 class indices ``target``."""
    check_reduction("nll_loss", reduction)
    check_constant("nll_loss", "weight", weight)
    op = NllLoss(weight is not None, ignore_index, reduction)
    return op(input, target) if weight is None else op(input, target, weight)


def mse_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:  # noqa: A002
    """Squared error; ``input`` and ``target`` must have the same shape."""
    check_reduction("mse_loss", reduction)
    return MseLoss(reduction)(input, target)


def l1_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:  # noqa: A002
    """Absolute error; ``input`` and ``target`` must have the same shape."""
    check_reduction("l1_loss", reduction)
    return L1Loss(reduction)(input, target)


def huber_loss(input: Tensor, target: Tensor, reduction: str = "mean", delta: float = 1.0,  # noqa: A002
               weight: "Tensor | None" = None) -> Tensor:
    """Squared error for |input - target| < delta, linear (slope delta) beyond; same shapes required.

    ``weight`` (the input's shape) multiplies each element's loss before the reduction, as PyTorch's."""
    check_reduction("huber_loss", reduction)
    if not delta > 0:
        raise ValueError(f"huber_loss: delta must be positive, got {delta}")
    if weight is None:
        return HuberLoss(reduction, float(delta))(input, target)
    if tuple(weight.shape) != tuple(input.shape):
        raise ValueError(f"huber_loss: Weights and input must have the same size, got weight "
                         f"{describe(weight)} for input {describe(input)}")
    weighted = HuberLoss("none", float(delta))(input, target) * weight
    if reduction == "none":
        return weighted
    return weighted.sum() if reduction == "sum" else weighted.mean()


def smooth_l1_loss(input: Tensor, target: Tensor, size_average: None = None, reduce: None = None,  # noqa: A002
                   reduction: str = "mean", beta: float = 1.0) -> Tensor:
    """Huber loss divided by beta: 0.5 d^2 / beta for |d| < beta, |d| - 0.5 beta beyond (beta = 0: l1_loss)."""
    if size_average is not None or reduce is not None:
        raise TypeError("smooth_l1_loss: size_average and reduce are deprecated in PyTorch and not supported; "
                        "use reduction='none', 'mean' or 'sum'")
    check_reduction("smooth_l1_loss", reduction)
    if beta < 0:
        raise ValueError(f"smooth_l1_loss: beta must be non-negative, got {beta}")
    return SmoothL1Loss(reduction, float(beta))(input, target)


METHODS: dict = {}  # losses are functions only (torch.nn.functional), not Tensor methods
