"""Normalisation: layer_norm, group_norm, batch_norm and instance_norm (statistics in float32, backward differentiable).

layer_norm, group_norm and batch_norm are FP32-tagged (their statistics run in float32 under
autocast; the tags: tinyamp/precision.py); instance_norm is NEUTRAL, as PyTorch's CUDA autocast
leaves it off its lists (it returns the input's dtype). Outside autocast, a float16/bfloat16 input is
normalised with float32 statistics and the output rounded once to the input's
dtype; its affine ``weight``/``bias`` (and batch_norm's running statistics) may
then be float32, as O2 training keeps them.

``group_norm`` is layer_norm over (channels of a group, spatial dims): the
function views (N, C, *) as (N, G, C/G, L) so that the op normalises over its
last two axes while its per-channel weight is viewed as (1, G, C/G, 1).

The gradient is one formula for all three::

    xhat = (x - mean) * rstd,  g = gy * weight
    dx = rstd * (g - mean(g) - xhat * mean(g * xhat))      (means over the normalised axes)

layer_norm runs it as one kernel each way (``kernels/layer_norm.py``): its backward is the paired
``LayerNormGrad`` op, whose own backward (double backward) is written in tinyamp ops. group_norm
and batch_norm write it in tinyamp ops: for a first-order backward the forward's mean and rstd are
reused as constants; under ``create_graph=True`` they are recomputed from ``x`` in tinyamp ops, so
the gradient is itself differentiable.
"""

from __future__ import annotations

import numbers
from typing import Any, Sequence

from .. import dtypes as dt
from ..precision import FP32, NEUTRAL
from ..autograd.function import Function
from ..grad_mode import is_grad_enabled
from ..tensor import Tensor
from .broadcast import sum_to
from .cast import cast
from .elementwise import exp, log
from .reduce import mean as _mean
from ..kernels import layer_norm as layer_norm_kernels
from ..kernels.layer_norm import normalize


def _describe(a: Any) -> str:
    return f"{list(a.shape)} ({dt.dtype_name(a.dtype)})"


def _check_param(op: str, name: str, p: Any, shape: tuple, x: Any) -> None:
    """A parameter of ``shape`` in the input's dtype (or float32 beside a float16/bfloat16 input)."""
    if p.shape != shape or not (p.dtype == x.dtype or p.dtype == dt.opmath_dtype(x.dtype)):
        raise ValueError(f"{op}: {name} must have shape {list(shape)} and dtype {dt.dtype_name(x.dtype)}"
                         f" (or float32 for a float16/bfloat16 input), got {_describe(p)} for input "
                         f"{_describe(x)}")


class _Normalization(Function):
    """The shared backward of group_norm and batch_norm."""

    precision = FP32
    axes: tuple = ()
    pshape: tuple = ()
    stats_from_input = True  # False: eval batch_norm, whose statistics are constants

    def _setup(self, has_weight: bool, has_bias: bool, eps: float) -> None:
        self.has_weight, self.has_bias, self.eps = has_weight, has_bias, eps
        self.save_inputs = (0, 1) if has_weight else (0,)

    def _params(self, params: tuple) -> tuple:
        params = list(params)
        weight = params.pop(0) if self.has_weight else None
        bias = params.pop(0) if self.has_bias else None
        return weight, bias

    def backward(self, gy: Tensor) -> tuple:
        saved = self.saved_tensors
        x, weight = saved[0], (saved[1] if self.has_weight else None)
        cdt = dt.opmath_dtype(x.dtype)
        xc, gyc = cast(x, cdt), cast(gy, cdt)
        axes = self.axes
        if self.stats_from_input and is_grad_enabled() and x.array.size:
            # create_graph: rebuild mean and rstd from x so they carry their own gradients.
            centered = xc - _mean(xc, axes, keepdim=True)
            rstd = exp(log(_mean(centered * centered, axes, keepdim=True) + self.eps) * -0.5)
        else:
            centered = xc - Tensor._wrap(self.mean)
            rstd = Tensor._wrap(self.rstd)
        xhat = centered * rstd
        g = gyc if weight is None else gyc * cast(weight, cdt).reshape(self.pshape)
        grads: list = [None]
        if self.needs_input_grad[0]:
            if self.stats_from_input and x.array.size:
                gx = rstd * (g - _mean(g, axes, keepdim=True) - xhat * _mean(g * xhat, axes, keepdim=True))
            else:  # eval batch_norm (running statistics are constants), or an empty batch
                gx = g * rstd
            grads[0] = cast(gx, x.dtype)
        if self.has_weight:
            shape, dtype = self.input_shapes[1], self.input_dtypes[1]
            grads.append(cast(sum_to(gyc * xhat, self.pshape).reshape(shape), dtype)
                         if self.needs_input_grad[1] else None)
        if self.has_bias:
            shape, dtype = self.input_shapes[-1], self.input_dtypes[-1]
            grads.append(cast(sum_to(gyc, self.pshape).reshape(shape), dtype)
                         if self.needs_input_grad[-1] else None)
        return tuple(grads)


class LayerNorm(Function):
    """y = (x - mean) rstd w + b over the last dims; dx, dw, db = layer_norm_backward(gy, x, w)

    One kernel each way (``kernels/layer_norm.py``): float32 statistics (float64 for float64 input),
    saved for the backward, 16-bit inputs and outputs read and rounded once.
    """

    precision = FP32
    name = "layer_norm"

    def __init__(self, normalized_shape: tuple, has_weight: bool, has_bias: bool, eps: float) -> None:
        self.normalized_shape = normalized_shape
        self.has_weight, self.has_bias, self.eps = has_weight, has_bias, eps
        self.save_inputs = (0, 1) if has_weight else (0,)

    def forward(self, xp: Any, x: Any, *params: Any) -> Any:
        shape = self.normalized_shape
        k = len(shape)
        if x.ndim < k or tuple(x.shape[x.ndim - k:]) != shape or x.dtype not in dt.FLOATING:
            raise ValueError(f"layer_norm: input {_describe(x)} must be floating and end with "
                             f"normalized_shape {list(shape)}")
        params = list(params)
        weight = params.pop(0) if self.has_weight else None
        bias = params.pop(0) if self.has_bias else None
        for name, p in (("weight", weight), ("bias", bias)):
            if p is not None:
                _check_param("layer_norm", name, p, shape, x)
        self.axes = tuple(range(x.ndim - k, x.ndim))
        self.pshape = (1,) * (x.ndim - k) + shape
        self.bias_dtype = None if bias is None else bias.dtype
        y, self.mean, self.rstd = layer_norm_kernels.forward(x, k, weight, bias, self.eps)
        return y

    def backward(self, gy: Tensor) -> tuple:
        return LayerNormGrad(self)(gy, *self.saved_tensors)  # (dx, dw, db): one per input


class LayerNormGrad(Function):
    """dx, dw, db of layer_norm (one kernel); their backward, in tinyamp ops:

    with r = rstd, P(v) = v - mean(v) - xhat mean(v xhat) and cotangents a (dx), b (dw), c (db):
    d(gy) = w r P(a) + b xhat + c,  d(w) = sum_rows gy r P(a),
    d(x) = -r^2 (K xhat + mean(a xhat) P(g) + mean(g xhat) P(a)) + r P(b gy),
    K = mean(a g) - mean(g) mean(a) - mean(g xhat) mean(a xhat); r and xhat rebuilt from x in ops.
    """

    precision = FP32
    name = "layer_norm_backward"

    def __init__(self, norm: LayerNorm) -> None:
        self.norm = norm
        self.save_inputs = (0, 1, 2) if norm.has_weight else (0, 1)

    def forward(self, xp: Any, gy: Any, x: Any, weight: Any = None) -> Any:
        norm = self.norm
        dx, dw, db = layer_norm_kernels.backward(gy, x, norm.mean, norm.rstd, weight, len(norm.normalized_shape),
                                                 norm.bias_dtype)
        return tuple(g for g in (dx, dw, db) if g is not None)

    def backward(self, *cotangents: Tensor) -> tuple:
        norm = self.norm
        saved = self.saved_tensors
        gy, x = saved[0], saved[1]
        w = saved[2] if norm.has_weight else None
        rest = list(cotangents[1:])
        b = rest.pop(0) if norm.has_weight else None
        c = rest.pop(0) if norm.has_bias else None
        axes, pshape, cdt = norm.axes, norm.pshape, dt.opmath_dtype(x.dtype)
        gyc, ac = cast(gy, cdt), cast(cotangents[0], cdt)
        if not x.array.size:
            zero = gyc * 0.0
            grads = [cast(zero, gy.dtype), cast(zero, x.dtype)]
            return tuple(grads + ([cast(sum_to(zero, pshape).reshape(w.shape), w.dtype)] if w is not None else []))
        xc = cast(x, cdt)
        centered = xc - _mean(xc, axes, keepdim=True)
        r = exp(log(_mean(centered * centered, axes, keepdim=True) + norm.eps) * -0.5)
        xhat = centered * r

        def proj(v: Tensor) -> Tensor:
            return v - _mean(v, axes, keepdim=True) - xhat * _mean(v * xhat, axes, keepdim=True)

        wc = None if w is None else cast(w, cdt).reshape(pshape)
        g = gyc if wc is None else gyc * wc
        pa = proj(ac)
        m_ax, m_gx = _mean(ac * xhat, axes, keepdim=True), _mean(g * xhat, axes, keepdim=True)
        k = _mean(ac * g, axes, keepdim=True) - _mean(g, axes, keepdim=True) * _mean(ac, axes, keepdim=True) \
            - m_gx * m_ax
        d_gy = r * pa if wc is None else wc * (r * pa)
        d_x = (r * r) * (k * xhat + m_ax * proj(g) + m_gx * pa) * -1.0
        if b is not None:
            bc = cast(b, cdt).reshape(pshape)
            d_gy = d_gy + bc * xhat
            d_x = d_x + r * proj(gyc * bc)
        if c is not None:
            d_gy = d_gy + cast(c, cdt).reshape(pshape)
        grads = [cast(d_gy, gy.dtype), cast(d_x, x.dtype)]
        if w is not None:
            grads.append(cast(sum_to(gyc * (r * pa), pshape).reshape(w.shape), w.dtype))
        return tuple(grads)


class GroupNorm(_Normalization):
    """y = (x - mean_g) rstd_g w_c + b_c over each (sample, group) of x viewed (N, G, C/G, L); dx as layer_norm"""

    precision = FP32
    name = "group_norm"
    stats_from_input = True
    axes = (2, 3)

    def __init__(self, has_weight: bool, has_bias: bool, eps: float) -> None:
        self._setup(has_weight, has_bias, eps)

    def forward(self, xp: Any, x: Any, *params: Any) -> Any:
        n, groups, per_group, _ = x.shape
        channels = groups * per_group
        weight, bias = self._params(params)
        for name, p in (("weight", weight), ("bias", bias)):
            if p is not None:
                _check_param("group_norm", name, p, (channels,), x)
        self.pshape = (1, groups, per_group, 1)
        xf = x.astype(dt.opmath_dtype(x.dtype), copy=False)
        self.mean = xf.mean(axis=self.axes, keepdims=True)
        self.rstd = 1 / xp.sqrt(xf.var(axis=self.axes, keepdims=True) + self.eps)
        return normalize(x, self.mean, self.rstd, weight, bias, self.pshape)


class BatchNorm(_Normalization):
    """y = (x - mean_c) rstd_c w_c + b_c per channel; dx as layer_norm over (N, H, W) in training, gy w rstd in eval

    FP32 under autocast, so a float16 input gives a float32 output (PyTorch's CUDA
    autocast leaves batch_norm off its lists: cuDNN returns float16 there).
    """

    precision = FP32
    name = "batch_norm"

    def __init__(self, running_mean: "Tensor | None", running_var: "Tensor | None", has_weight: bool,
                 has_bias: bool, training: bool, momentum: float, eps: float) -> None:
        self.running_mean, self.running_var = running_mean, running_var
        self.training, self.momentum = training, momentum
        self.stats_from_input = training
        self._setup(has_weight, has_bias, eps)

    def _checked(self, x: Any, params: tuple, least_dims: int, shape_words: str) -> tuple:
        """(channels, weight, bias) after the checks of the input, the affine parameters and the running stats."""
        if x.ndim < least_dims or x.dtype not in dt.FLOATING:
            raise ValueError(f"{self.name}: input must be floating of shape {shape_words}, got {_describe(x)}")
        channels = x.shape[1]
        weight, bias = self._params(params)
        for name, p in (("weight", weight), ("bias", bias)):
            if p is not None:
                _check_param(self.name, name, p, (channels,), x)
        # Running statistics are buffers, not inputs (autocast never casts them): any
        # floating dtype is read in the statistics' dtype and written back in its own.
        for name, stat in (("running_mean", self.running_mean), ("running_var", self.running_var)):
            if stat is not None and (stat.shape != (channels,) or stat.dtype not in dt.FLOATING):
                raise ValueError(f"{self.name}: {name} must be a floating tensor of shape [{channels}], "
                                 f"got {_describe(stat)} for input {_describe(x)}")
        return channels, weight, bias

    def forward(self, xp: Any, x: Any, *params: Any) -> Any:
        channels, weight, bias = self._checked(x, params, 2, "(N, C) or (N, C, H, W)")
        self.axes = (0,) + tuple(range(2, x.ndim))
        self.pshape = (1, channels) + (1,) * (x.ndim - 2)
        cdt = dt.opmath_dtype(x.dtype)
        if self.training and x.size == 0:
            # An empty batch (PyTorch): an empty output, the running statistics unchanged.
            self.mean = xp.zeros(self.pshape, dtype=cdt)
            var = xp.ones(self.pshape, dtype=cdt)
        elif self.training:
            count = x.size // max(channels, 1)
            if count <= 1:
                raise ValueError(f"batch_norm: expected more than 1 value per channel when training, "
                                 f"got input {_describe(x)}")
            xf = x.astype(cdt, copy=False)
            self.mean = xf.mean(axis=self.axes, keepdims=True)
            var = xf.var(axis=self.axes, keepdims=True)  # biased: what normalises the batch
            self._update_running(self.mean.reshape(-1), var.reshape(channels) * (count / (count - 1)))  # unbiased
        else:
            if self.running_mean is None or self.running_var is None:
                raise ValueError("batch_norm: running_mean and running_var are required when "
                                 "training=False (they are the statistics eval mode normalises with)")
            self.mean = self.running_mean.array.astype(cdt).reshape(self.pshape)
            var = self.running_var.array.astype(cdt).reshape(self.pshape)
        self.rstd = 1 / xp.sqrt(var + self.eps)
        return normalize(x, self.mean, self.rstd, weight, bias, self.pshape)

    def _update_running(self, batch_mean: Any, unbiased_var: Any) -> None:
        """running = (1 - momentum) * running + momentum * batch, in place (a buffer write, no grad)."""
        m = self.momentum
        for stat, batch in ((self.running_mean, batch_mean), (self.running_var, unbiased_var)):
            if stat is not None:
                stat.array[...] = ((1 - m) * stat.array.astype(batch.dtype) + m * batch).astype(stat.dtype)
                stat._version[0] += 1


class InstanceNorm(BatchNorm):
    """y = (x - mean_nc) rstd_nc w_c + b_c, statistics per sample and channel over the spatial dims; dx as layer_norm

    NEUTRAL: PyTorch's CUDA autocast leaves instance_norm off its lists, so the output
    has the input's dtype (statistics in float32 all the same). With running
    statistics, training updates them with the batch's mean over samples of each
    instance's mean and unbiased variance (PyTorch's reshape-to-batch_norm rule).
    """

    precision = NEUTRAL
    name = "instance_norm"

    def forward(self, xp: Any, x: Any, *params: Any) -> Any:
        channels, weight, bias = self._checked(x, params, 3, "(N, C, *) with at least one spatial dimension")
        self.axes = tuple(range(2, x.ndim))
        self.pshape = (1, channels) + (1,) * (x.ndim - 2)
        cdt = dt.opmath_dtype(x.dtype)
        if self.training:  # use_input_stats
            count = x.size // max(x.shape[0] * channels, 1)
            xf = x.astype(cdt, copy=False)
            self.mean = xf.mean(axis=self.axes, keepdims=True)
            var = xf.var(axis=self.axes, keepdims=True)
            if count > 1:
                unbiased = var.reshape(x.shape[0], channels).mean(axis=0) * (count / (count - 1))
                self._update_running(self.mean.reshape(x.shape[0], channels).mean(axis=0), unbiased)
        else:
            if self.running_mean is None or self.running_var is None:
                raise ValueError("instance_norm: Expected running_mean and running_var to be defined when "
                                 "use_input_stats is false")
            self.mean = self.running_mean.array.astype(cdt).reshape(self.pshape)
            var = self.running_var.array.astype(cdt).reshape(self.pshape)
        self.rstd = 1 / xp.sqrt(var + self.eps)
        return normalize(x, self.mean, self.rstd, weight, bias, self.pshape)


def layer_norm(input: Tensor, normalized_shape: "int | Sequence[int]",  # noqa: A002 - torch name
               weight: "Tensor | None" = None, bias: "Tensor | None" = None, eps: float = 1e-5) -> Tensor:
    """Normalise over the trailing ``normalized_shape`` dims, then scale by weight and shift by bias."""
    integral = isinstance(normalized_shape, numbers.Integral)  # an int or a NumPy integer, as PyTorch
    shape = (int(normalized_shape),) if integral else tuple(normalized_shape)
    params = [p for p in (weight, bias) if p is not None]
    return LayerNorm(shape, weight is not None, bias is not None, float(eps))(input, *params)


def group_norm(input: Tensor, num_groups: int, weight: "Tensor | None" = None,  # noqa: A002 - torch name
               bias: "Tensor | None" = None, eps: float = 1e-5) -> Tensor:
    """Normalise (N, C, *) over each sample's groups of C / num_groups channels, then a per-channel affine."""
    if input.ndim < 2 or input.dtype not in dt.FLOATING:
        raise ValueError(f"group_norm: expected a floating input of shape (N, C, *), got {_describe(input)}")
    n, channels = input.shape[:2]
    if not isinstance(num_groups, numbers.Integral) or num_groups < 1 or channels % num_groups:
        raise ValueError(f"group_norm: expected number of channels in input to be divisible by num_groups, "
                         f"but got input of shape {list(input.shape)} and num_groups={num_groups}")
    spatial = 1
    for size in input.shape[2:]:
        spatial *= size
    grouped = input.reshape(n, int(num_groups), channels // int(num_groups), spatial)
    params = [p for p in (weight, bias) if p is not None]
    y = GroupNorm(weight is not None, bias is not None, float(eps))(grouped, *params)
    return y.reshape(input.shape)


def batch_norm(input: Tensor, running_mean: "Tensor | None", running_var: "Tensor | None",  # noqa: A002
               weight: "Tensor | None" = None, bias: "Tensor | None" = None, training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Per-channel normalisation of (N, C) or (N, C, H, W) input.

    training=True normalises with the batch's statistics (biased variance) and
    updates the running statistics in place with the unbiased variance, as
    PyTorch; training=False normalises with the running statistics.
    """
    params = [p for p in (weight, bias) if p is not None]
    op = BatchNorm(running_mean, running_var, weight is not None, bias is not None, bool(training),
                   float(momentum), float(eps))
    return op(input, *params)


def instance_norm(input: Tensor, running_mean: "Tensor | None" = None,  # noqa: A002 - torch name
                  running_var: "Tensor | None" = None, weight: "Tensor | None" = None,
                  bias: "Tensor | None" = None, use_input_stats: bool = True, momentum: float = 0.1,
                  eps: float = 1e-5) -> Tensor:
    """Normalise each sample's channels over their spatial dims (``torch.nn.functional.instance_norm``)."""
    if use_input_stats:
        spatial = 1
        for size in input.shape[2:]:
            spatial *= size
        if input.ndim >= 3 and spatial == 1:
            raise ValueError(f"Expected more than 1 spatial element when training, got input size "
                             f"{list(input.shape)}")
    params = [p for p in (weight, bias) if p is not None]
    op = InstanceNorm(running_mean, running_var, weight is not None, bias is not None, bool(use_input_stats),
                      float(momentum), float(eps))
    return op(input, *params)


METHODS: dict = {}  # functions only (torch.nn.functional), not Tensor methods
