"""Transposed 2-D convolution (``F.conv_transpose2d``): the adjoint of conv2d with respect to its input.

For input x (N, C_in, H, W) and weight (C_in, C_out / groups, kH, kW), every
input pixel spreads ``W^T x`` over a kH x kW window of the output, and
overlapping windows add up: ``y = col2im(W^T @ x) + b``, which is exactly
conv2d's input gradient. The output size is
``(H - 1) * stride - 2 * padding + dilation * (kH - 1) + output_padding + 1``.

The backward is conv2d's forward and weight gradient, written in
differentiable ops (``Im2Col`` and ``MatMul``), so double backward works::

    dx = W @ im2col(gy),  dW = x @ im2col(gy)^T (over samples and positions),  db = sum(gy)

LOWER, as PyTorch's CUDA autocast lists ``conv_transpose2d``: the product
accumulates in float32 for float16/bfloat16, the windows are summed in float32
with the bias, and the result is rounded once.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes as dt
from ..autograd.function import Function
from ..kernels.gemm import gemm
from ..precision import LOWER
from ..tensor import Tensor
from .conv import Im2Col, Window, _batched, _pair, col2im
from .linalg import MatMul
from .reduce import sum as _sum

OP = "conv_transpose2d"


class ConvTranspose2d(Function):
    """y = col2im(W^T x) + b; dx = W im2col(gy), dW = x im2col(gy)^T, db = sum(gy)"""

    precision = LOWER
    name = OP
    save_inputs = (0, 1)

    def __init__(self, stride: Any, padding: Any, output_padding: Any, groups: int, dilation: Any) -> None:
        self.stride = _pair(OP, "stride", stride, 1)
        self.padding = _pair(OP, "padding", padding, 0)
        self.output_padding = _pair(OP, "output_padding", output_padding, 0)
        self.dilation = _pair(OP, "dilation", dilation, 1)
        if not isinstance(groups, (int, np.integer)) or groups < 1:
            raise ValueError(f"{OP}: groups must be a positive int, got {groups!r}")
        self.groups = int(groups)
        if any(o >= s for o, s in zip(self.output_padding, self.stride)):
            raise ValueError(f"{OP}: output padding {list(self.output_padding)} must be smaller than stride "
                             f"{list(self.stride)}")

    def forward(self, xp: Any, x: Any, w: Any, b: Any = None) -> Any:
        what = f"input {list(x.shape)}, weight {list(w.shape)}" + ("" if b is None else f", bias {list(b.shape)}")
        what += f" ({', '.join(dt.dtype_name(a.dtype) for a in (x, w) + (() if b is None else (b,)))})"
        if any(a.dtype != x.dtype for a in (w, b) if a is not None) or x.dtype not in dt.FLOATING:
            raise TypeError(f"{OP}: expected operands of one floating dtype, got {what}")
        if x.ndim != 4 or w.ndim != 4:
            raise ValueError(f"{OP}: expected a 4-D input (N, C_in, H, W) and a 4-D weight "
                             f"(C_in, C_out/groups, kH, kW), got {what}")
        g = self.groups
        n, c, h, wid = x.shape
        ci, og, kh, kw = w.shape
        if c != ci or ci % g:
            raise ValueError(f"{OP}: weight {list(w.shape)} expects {ci} input channels (divisible by "
                             f"groups={g}), but got {c}: {what}")
        out_channels = og * g
        if b is not None and b.shape != (out_channels,):
            raise ValueError(f"{OP}: bias must have shape [{out_channels}]: {what}")
        (sh, sw), (ph, pw), (oh, ow), (dh, dw) = self.stride, self.padding, self.output_padding, self.dilation
        ho = (h - 1) * sh - 2 * ph + dh * (kh - 1) + oh + 1
        wo = (wid - 1) * sw - 2 * pw + dw * (kw - 1) + ow + 1
        if ho <= 0 or wo <= 0:
            raise ValueError(f"{OP}: the output would be empty ({[ho, wo]}): {what}, stride {[sh, sw]}, "
                             f"padding {[ph, pw]}")
        self.win = Window((kh, kw), self.stride, ((ph, ph), (pw, pw)), self.dilation)
        self.out_shape = (n, out_channels, ho, wo)
        low = dt.is_low_precision(x.dtype)
        # (G, C_in/G, og*k*k)^T @ (N, G, C_in/G, H*W): every input pixel's window contributions.
        cols = gemm(w.reshape(g, ci // g, og * kh * kw), x.reshape(n, g, ci // g, h * wid),
                    xp.float32 if low else None, trans_a=True)
        y = col2im(xp, cols.reshape(n, out_channels * kh * kw, h * wid), self.win, self.out_shape)
        if b is not None:
            y = y + b.astype(y.dtype, copy=False).reshape(1, out_channels, 1, 1)
        return y.astype(x.dtype, copy=False)

    def backward(self, gy: Tensor) -> tuple:
        x, w = self.saved_tensors
        n, c, h, wid = x.shape
        g, (kh, kw) = self.groups, self.win.kernel
        og = w.shape[1]
        dx = dw = db = None
        if self.needs_input_grad[0]:
            gcols = Im2Col(self.win)(gy).reshape(n, g, og * kh * kw, h * wid)
            dx = MatMul()(w.reshape(g, c // g, og * kh * kw), gcols).reshape(x.shape)
        if self.needs_input_grad[1]:
            # Sum over samples and positions inside one product (one rounding).
            gcols = Im2Col(self.win, batch_last=True)(gy).reshape(g, og * kh * kw, n * h * wid)
            x_t = x.reshape(n, g, c // g, h * wid).permute(1, 2, 0, 3).reshape(g, c // g, n * h * wid)
            dw = MatMul(trans_b=True)(x_t, gcols).reshape(w.shape)
        if len(self.needs_input_grad) == 3 and self.needs_input_grad[2]:
            db = _sum(gy, (0, 2, 3))
        return (dx, dw) if len(self.needs_input_grad) == 2 else (dx, dw, db)


def conv_transpose2d(input: Tensor, weight: Tensor, bias: "Tensor | None" = None, stride: Any = 1,  # noqa: A002
                     padding: Any = 0, output_padding: Any = 0, groups: int = 1, dilation: Any = 1) -> Tensor:
    """Transposed 2-D convolution of NCHW ``input`` with (C_in, C_out/groups, kH, kW) ``weight``."""
    x, unbatched = _batched(input, OP)
    op = ConvTranspose2d(stride, padding, output_padding, groups, dilation)
    y = op(x, weight) if bias is None else op(x, weight, bias)
    return y.reshape(y.shape[1:]) if unbatched else y


METHODS: dict = {}  # functions only (torch.nn.functional), not Tensor methods
