"""2-D convolution and pooling on NCHW tensors, built on im2col and ``gemm``.

``im2col`` lays every receptive field of the (padded) input out as a column:
a strided *view* of the input (``as_strided``: no loop, no copy until the
reshape), so a convolution is one batched GEMM of the (groups, out/groups,
in/groups*kh*kw) weight with those columns, in float32 accumulation for
float16/bfloat16 (``tinyamp.kernels.gemm``). ``col2im`` is its adjoint: it adds
every column back onto the pixels it came from (overlapping windows sum).

The two are a differentiable pair (``Im2Col``'s backward is ``Col2Im`` and the
other way round), so ``Conv2d.backward`` is written in ops - the input
gradient is ``col2im(W^T @ gy)``, the weight gradient ``gy @ im2col(x)^T`` -
and double backward works. Max pooling routes its gradient to each window's
argmax with ``GetItemGrad`` (a scatter-add: overlapping windows that share a
maximum both send it gradient); average pooling's gradient is ``col2im`` of
the spread-out ``gy / divisor``.

Precision: ``conv2d`` is LOWER. ``max_pool2d`` and ``avg_pool2d`` are NEUTRAL:
they keep the incoming dtype as PyTorch's CUDA autocast does (neither is on its
lists); ``avg_pool2d`` sums float16/bfloat16 windows in float32 and rounds once.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .. import dtypes as dt
from ..autograd.function import Function
from ..kernels.gemm import gemm
from ..precision import LOWER, NEUTRAL
from ..tensor import Tensor
from .broadcast import broadcast_to
from .indexing import GetItemGrad
from .linalg import MatMul
from .reduce import sum as _sum


def _pair(op: str, name: str, value: "int | Sequence[int]", minimum: int) -> tuple[int, int]:
    pair = (value, value) if isinstance(value, (int, np.integer)) else tuple(value)
    if len(pair) != 2 or any(not isinstance(v, (int, np.integer)) or v < minimum for v in pair):
        raise ValueError(f"{op}: {name} must be an int >= {minimum} or a pair of them, got {value!r}")
    return int(pair[0]), int(pair[1])


class Window:
    """Where the sliding windows of a 2-D op fall: kernel, stride, (before, after) padding, dilation."""

    def __init__(self, kernel: tuple[int, int], stride: tuple[int, int],
                 padding: tuple[tuple[int, int], tuple[int, int]], dilation: tuple[int, int] = (1, 1)) -> None:
        self.kernel, self.stride, self.padding, self.dilation = kernel, stride, padding, dilation

    def out_size(self, h: int, w: int) -> tuple[int, int]:
        (kh, kw), (sh, sw), (dh, dw) = self.kernel, self.stride, self.dilation
        (pt, pb), (pl, pr) = self.padding
        return (h + pt + pb - dh * (kh - 1) - 1) // sh + 1, (w + pl + pr - dw * (kw - 1) - 1) // sw + 1


def _pad(xp: Any, x: Any, padding: tuple, value: float) -> Any:
    (pt, pb), (pl, pr) = padding
    if not (pt or pb or pl or pr):
        return x
    n, c, h, w = x.shape
    out = xp.full((n, c, h + pt + pb, w + pl + pr), value, dtype=x.dtype)
    out[:, :, pt:pt + h, pl:pl + w] = x
    return out


def _windows(xp: Any, x: Any, win: Window, value: float = 0) -> Any:
    """A (N, C, kh, kw, Ho, Wo) strided view of the padded input: every window, no copy."""
    padded = _pad(xp, x, win.padding, value)
    n, c, _, _ = x.shape
    ho, wo = win.out_size(*x.shape[2:])
    (kh, kw), (sh, sw), (dh, dw) = win.kernel, win.stride, win.dilation
    s_n, s_c, s_h, s_w = padded.strides
    return xp.lib.stride_tricks.as_strided(
        padded, shape=(n, c, kh, kw, ho, wo),
        strides=(s_n, s_c, s_h * dh, s_w * dw, s_h * sh, s_w * sw))


def im2col(xp: Any, x: Any, win: Window, batch_last: bool = False) -> Any:
    """Columns of x: (N, C*kh*kw, Ho*Wo), or (C*kh*kw, N*Ho*Wo) with ``batch_last``."""
    v = _windows(xp, x, win)
    n, c, kh, kw, ho, wo = v.shape
    if batch_last:  # the layout of the weight gradient: one GEMM over every position of every sample
        return v.transpose(1, 2, 3, 0, 4, 5).reshape(c * kh * kw, n * ho * wo)
    return v.reshape(n, c * kh * kw, ho * wo)


def col2im(xp: Any, cols: Any, win: Window, x_shape: tuple, batch_last: bool = False) -> Any:
    """The adjoint of :func:`im2col`: add each column entry back onto its pixel."""
    n, c, h, w = x_shape
    (kh, kw), (sh, sw), (dh, dw) = win.kernel, win.stride, win.dilation
    (pt, pb), (pl, pr) = win.padding
    ho, wo = win.out_size(h, w)
    if batch_last:
        c6 = cols.reshape(c, kh, kw, n, ho, wo).transpose(3, 0, 1, 2, 4, 5)
    else:
        c6 = cols.reshape(n, c, kh, kw, ho, wo)
    # Overlapping windows add up: float16/bfloat16 sums accumulate in float32.
    acc = dt.opmath_dtype(cols.dtype)
    c6 = c6.astype(acc, copy=False)
    out = xp.zeros((n, c, h + pt + pb, w + pl + pr), dtype=acc)
    for i in range(kh):  # kh*kw strided adds, each over the whole batch
        for j in range(kw):
            out[:, :, i * dh:i * dh + sh * (ho - 1) + 1:sh, j * dw:j * dw + sw * (wo - 1) + 1:sw] += c6[:, :, i, j]
    out = out[:, :, pt:pt + h, pl:pl + w]
    return out if out.dtype == cols.dtype else out.astype(cols.dtype)


class Im2Col(Function):
    """cols = every kh x kw window of x as a column; dx = col2im(gcols)"""

    precision = NEUTRAL

    def __init__(self, win: Window, batch_last: bool = False) -> None:
        self.win, self.batch_last = win, batch_last

    def forward(self, xp: Any, x: Any) -> Any:
        return im2col(xp, x, self.win, self.batch_last)

    def backward(self, gcols: Tensor) -> Tensor:
        return Col2Im(self.win, self.input_shapes[0], self.batch_last)(gcols)


class Col2Im(Function):
    """x = sum of each column entry onto its pixel (adjoint of im2col); dcols = im2col(gx)"""

    precision = NEUTRAL

    def __init__(self, win: Window, x_shape: tuple, batch_last: bool = False) -> None:
        self.win, self.x_shape, self.batch_last = win, tuple(x_shape), batch_last

    def forward(self, xp: Any, cols: Any) -> Any:
        return col2im(xp, cols, self.win, self.x_shape, self.batch_last)

    def backward(self, gx: Tensor) -> Tensor:
        return Im2Col(self.win, self.batch_last)(gx)


def _conv_padding(padding: Any, kernel: tuple, stride: tuple, dilation: tuple) -> tuple:
    if padding == "valid":
        return (0, 0), (0, 0)
    if padding == "same":
        if stride != (1, 1):
            raise ValueError(f"conv2d: padding='same' is not supported for strided convolutions "
                             f"(stride {list(stride)})")
        # PyTorch's rule: the odd extra pixel of an even kernel goes after (bottom/right).
        totals = [d * (k - 1) for d, k in zip(dilation, kernel)]
        return tuple((t // 2, t - t // 2) for t in totals)  # type: ignore[return-value]
    if isinstance(padding, str):
        raise ValueError(f"conv2d: padding must be 'valid', 'same', an int or a pair, got {padding!r}")
    ph, pw = _pair("conv2d", "padding", padding, 0)
    return (ph, ph), (pw, pw)


class Conv2d(Function):
    """y = W * x + b (cross-correlation); dx = col2im(W^T @ gy), dW = gy @ im2col(x)^T, db = sum(gy)"""

    precision = LOWER
    save_inputs = (0, 1)  # x and W; the columns are rebuilt in backward, not kept

    def __init__(self, stride: Any, padding: Any, dilation: Any, groups: int) -> None:
        self.stride = _pair("conv2d", "stride", stride, 1)
        self.dilation = _pair("conv2d", "dilation", dilation, 1)
        self.padding, self.groups = padding, groups
        if not isinstance(groups, (int, np.integer)) or groups < 1:
            raise ValueError(f"conv2d: groups must be a positive int, got {groups!r}")

    def forward(self, xp: Any, x: Any, w: Any, b: Any = None) -> Any:
        what = f"input {list(x.shape)}, weight {list(w.shape)}" + ("" if b is None else f", bias {list(b.shape)}")
        what += f" ({', '.join(dt.dtype_name(a.dtype) for a in (x, w) + (() if b is None else (b,)))})"
        if any(a.dtype != x.dtype for a in (w, b) if a is not None) or x.dtype not in dt.FLOATING:
            raise TypeError(f"conv2d: expected operands of one floating dtype, got {what}")
        if x.ndim != 4 or w.ndim != 4:
            raise ValueError(f"conv2d: expected a 4-D input (N, C, H, W) and a 4-D weight (O, C/groups, kH, kW), "
                             f"got {what}")
        g = self.groups
        n, c, h, wid = x.shape
        o, cg, kh, kw = w.shape
        if c != cg * g:
            raise ValueError(f"conv2d: given groups={g}, weight {list(w.shape)} expects input to have "
                             f"{cg * g} channels, but got {c}: {what}")
        if o % g:
            raise ValueError(f"conv2d: out channels {o} are not divisible by groups={g}: {what}")
        if b is not None and b.shape != (o,):
            raise ValueError(f"conv2d: bias must have shape [{o}]: {what}")
        self.win = Window((kh, kw), self.stride, _conv_padding(self.padding, (kh, kw), self.stride, self.dilation),
                          self.dilation)
        ho, wo = self.win.out_size(h, wid)
        if ho <= 0 or wo <= 0:
            raise ValueError(f"conv2d: kernel {[kh, kw]} (dilation {list(self.dilation)}) is larger than the "
                             f"padded input: {what}")
        cols = im2col(xp, x, self.win).reshape(n, g, cg * kh * kw, ho * wo)
        low = dt.is_low_precision(x.dtype)
        # One batched GEMM over (sample, group): (G, O/G, Cg*k*k) @ (N, G, Cg*k*k, L).
        y = gemm(w.reshape(g, o // g, cg * kh * kw), cols, xp.float32 if low and b is not None else None)
        y = y.reshape(n, o, ho * wo)
        if b is not None:
            # Added to the float32 accumulator and rounded once (a GEMM epilogue).
            y += b.astype(y.dtype, copy=False)[:, None]
            y = y.astype(x.dtype, copy=False)
        return y.reshape(n, o, ho, wo)

    def backward(self, gy: Tensor) -> tuple:
        x, w = self.saved_tensors
        n, o, ho, wo = gy.shape
        g, (kh, kw), cg = self.groups, self.win.kernel, w.shape[1]
        gy_g = gy.reshape(n, g, o // g, ho * wo)
        dx = dw = db = None
        if self.needs_input_grad[0]:
            w_g = w.reshape(g, o // g, cg * kh * kw)
            gcols = MatMul(trans_a=True)(w_g, gy_g)  # (N, G, Cg*k*k, L)
            dx = Col2Im(self.win, x.shape)(gcols.reshape(n, g * cg * kh * kw, ho * wo))
        if self.needs_input_grad[1]:
            # Sum over samples and positions inside one GEMM (float32 accumulation,
            # one rounding) instead of per-sample products summed afterwards.
            cols = Im2Col(self.win, batch_last=True)(x).reshape(g, cg * kh * kw, n * ho * wo)
            gy_t = gy_g.permute(1, 2, 0, 3).reshape(g, o // g, n * ho * wo)
            dw = MatMul(trans_b=True)(gy_t, cols).reshape(w.shape)
        if len(self.needs_input_grad) == 3 and self.needs_input_grad[2]:
            db = _sum(gy, (0, 2, 3))
        return (dx, dw) if len(self.needs_input_grad) == 2 else (dx, dw, db)


def _pool_window(op: str, shape: tuple, kernel_size: Any, stride: Any, padding: Any, dilation: Any,
                 ceil_mode: bool) -> Window:
    """The pooling window, with any extra bottom/right padding that ceil_mode needs."""
    kernel = _pair(op, "kernel_size", kernel_size, 1)
    stride = kernel if stride is None or (not isinstance(stride, int) and len(stride) == 0) else \
        _pair(op, "stride", stride, 1)
    pad = _pair(op, "padding", padding, 0)
    dilation = _pair(op, "dilation", dilation, 1)
    if len(shape) != 4:
        raise ValueError(f"{op}: expected a 3-D or 4-D input, got shape {list(shape)}")
    if any(p > k // 2 for p, k in zip(pad, kernel)):
        raise ValueError(f"{op}: padding {list(pad)} should be at most half of kernel size {list(kernel)}")
    sizes, extra = [], []
    for n, k, s, p, d in zip(shape[2:], kernel, stride, pad, dilation):
        span = n + 2 * p - d * (k - 1) - 1
        if span < 0:
            raise ValueError(f"{op}: kernel {list(kernel)} (dilation {list(dilation)}) is larger than the "
                             f"padded input of shape {list(shape)}")
        out = (-(-span // s) if ceil_mode else span // s) + 1
        if ceil_mode and (out - 1) * s >= n + p:
            out -= 1  # PyTorch: the last window must start inside the input or its left padding
        sizes.append(out)
        extra.append((out - 1) * s + d * (k - 1) + 1 - n - 2 * p)  # > 0 only under ceil_mode
    return Window(kernel, stride, tuple((p, p + max(e, 0)) for p, e in zip(pad, extra)), dilation)


class MaxPool2d(Function):
    """y = max over each window; dx = gy scatter-added at each window's argmax"""

    precision = NEUTRAL
    name = "max_pool2d"

    def __init__(self, win: Window) -> None:
        self.win = win

    def forward(self, xp: Any, x: Any) -> Any:
        n, c, h, w = x.shape
        low = -np.inf if x.dtype in dt.FLOATING else np.iinfo(x.dtype).min
        v = _windows(xp, x, self.win, low)
        _, _, kh, kw, ho, wo = v.shape
        # A running maximum over the kh*kw window offsets: no window-sized copy,
        # and PyTorch's rule (a later cell wins only if larger, or if it is NaN).
        y = v[:, :, 0, 0].copy()
        k = xp.zeros(y.shape, dtype=xp.int64)
        for offset in range(1, kh * kw):
            cell = v[:, :, offset // kw, offset % kw]
            wins = (cell > y) | (cell != cell)
            xp.copyto(y, cell, where=wins)
            xp.copyto(k, offset, where=wins)
        # Window offset -> input pixel, as PyTorch's flat index into H*W.
        (sh, sw), (dh, dw), ((pt, _), (pl, _)) = self.win.stride, self.win.dilation, self.win.padding
        rows = xp.arange(ho)[:, None] * sh - pt + (k // kw) * dh
        cols = xp.arange(wo)[None, :] * sw - pl + (k % kw) * dw
        # Only an all -inf window can pick a padded cell; keep its index inside the input.
        self.indices = xp.clip(rows, 0, h - 1) * w + xp.clip(cols, 0, w - 1)
        return y

    def backward(self, gy: Tensor) -> Tensor:
        n, c, h, w = self.input_shapes[0]
        xp = gy.device.xp
        plane = xp.arange(n * c)[:, None]
        cells = gy.shape[2] * gy.shape[3]  # not -1: NumPy cannot infer it for an empty batch
        key = (plane, self.indices.reshape(n * c, cells))
        dx = GetItemGrad(key, (n * c, h * w))(gy.reshape(n * c, cells))
        return dx.reshape(n, c, h, w)


class AvgPool2d(Function):
    """y = sum over each window / divisor; dx = col2im(gy / divisor spread over each window)"""

    precision = NEUTRAL
    name = "avg_pool2d"

    def __init__(self, win: Window, padding: tuple, count_include_pad: bool, divisor_override: "int | None") -> None:
        self.win, self.pad = win, padding
        self.count_include_pad, self.divisor_override = count_include_pad, divisor_override

    def _divisor(self, xp: Any, h: int, w: int, ho: int, wo: int) -> Any:
        """PyTorch's divisor per output cell (window clipped to input+padding, or to the input)."""
        if self.divisor_override:
            return xp.full((ho, wo), float(self.divisor_override))
        sizes = []
        for n, out, k, s, p in zip((h, w), (ho, wo), self.win.kernel, self.win.stride, self.pad):
            start = np.arange(out) * s - p
            end = np.minimum(start + k, n + p)
            if not self.count_include_pad:
                start, end = np.maximum(start, 0), np.minimum(end, n)
            sizes.append(end - start)
        return xp.asarray(np.outer(sizes[0], sizes[1]).astype(np.float64))

    def forward(self, xp: Any, x: Any) -> Any:
        v = _windows(xp, x, self.win)
        acc = dt.opmath_dtype(x.dtype)
        total = v.sum(axis=(2, 3), dtype=acc)
        self.divisor = self._divisor(xp, x.shape[2], x.shape[3], *total.shape[2:])
        return (total / self.divisor.astype(acc)).astype(x.dtype, copy=False)

    def backward(self, gy: Tensor) -> Tensor:
        shape = self.input_shapes[0]
        n, c, ho, wo = gy.shape
        kh, kw = self.win.kernel
        g = gy / Tensor._wrap(self.divisor.astype(gy.dtype))
        spread = broadcast_to(g.reshape(n, c, 1, ho * wo), (n, c, kh * kw, ho * wo))
        return Col2Im(self.win, shape)(spread.reshape(n, c * kh * kw, ho * wo))


# ---------------------------------------------------------------------------
# Public functions (an unbatched (C, H, W) input gains and loses a batch dim)
# ---------------------------------------------------------------------------

def _batched(x: Tensor, op: str) -> tuple[Tensor, bool]:
    if x.ndim == 3:
        return x.reshape((1,) + x.shape), True
    if x.ndim != 4:
        raise ValueError(f"{op}: expected a 3-D (C, H, W) or 4-D (N, C, H, W) input, got shape {list(x.shape)}")
    return x, False


def conv2d(input: Tensor, weight: Tensor, bias: "Tensor | None" = None, stride: Any = 1,  # noqa: A002
           padding: Any = 0, dilation: Any = 1, groups: int = 1) -> Tensor:
    """2-D cross-correlation of NCHW ``input`` with OIHW ``weight`` (PyTorch's ``F.conv2d``)."""
    x, unbatched = _batched(input, "conv2d")
    op = Conv2d(stride, padding, dilation, groups)
    y = op(x, weight) if bias is None else op(x, weight, bias)
    return y.reshape(y.shape[1:]) if unbatched else y


def max_pool2d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0,  # noqa: A002
               dilation: Any = 1, ceil_mode: bool = False, return_indices: bool = False) -> Any:
    """Max over windows; ``return_indices`` also gives each maximum's flat index into H*W."""
    x, unbatched = _batched(input, "max_pool2d")
    op = MaxPool2d(_pool_window("max_pool2d", x.shape, kernel_size, stride, padding, dilation, ceil_mode))
    y = op(x)
    indices = Tensor._wrap(op.indices.astype(np.int64, copy=False))
    if unbatched:
        y, indices = y.reshape(y.shape[1:]), indices.reshape(indices.shape[1:])
    return (y, indices) if return_indices else y


def avg_pool2d(input: Tensor, kernel_size: Any, stride: Any = None, padding: Any = 0,  # noqa: A002
               ceil_mode: bool = False, count_include_pad: bool = True,
               divisor_override: "int | None" = None) -> Tensor:
    """Mean over windows, with PyTorch's divisor rules for padding and ceil_mode."""
    x, unbatched = _batched(input, "avg_pool2d")
    win = _pool_window("avg_pool2d", x.shape, kernel_size, stride, padding, 1, ceil_mode)
    pad = _pair("avg_pool2d", "padding", padding, 0)
    y = AvgPool2d(win, pad, count_include_pad, divisor_override)(x)
    return y.reshape(y.shape[1:]) if unbatched else y


def adaptive_avg_pool2d(input: Tensor, output_size: Any) -> Tensor:  # noqa: A002
    """Mean over a grid of ``output_size`` cells (None keeps a size): ``avg_pool2d`` with
    kernel = stride = input / output. Sizes that do not divide the input are not supported."""
    sizes = (output_size, output_size) if isinstance(output_size, int) or output_size is None else tuple(output_size)
    h, w = input.shape[-2:]
    out = tuple(n if o is None else o for n, o in zip((h, w), sizes))
    if len(out) != 2 or any(o < 1 or n % o for n, o in zip((h, w), out)):
        raise ValueError(f"adaptive_avg_pool2d: output size {list(sizes)} must divide the input's "
                         f"{[h, w]} in tinyamp (input shape {list(input.shape)}); use avg_pool2d or pad")
    kernel = (h // out[0], w // out[1])
    return avg_pool2d(input, kernel, kernel)


METHODS: dict = {}
