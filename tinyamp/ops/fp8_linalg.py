"""fp8 GEMMs on the tape: ``Fp8Linear`` (an ``nn.Linear`` inside ``fp8_autocast``) and ``Fp8MatMul``.

Both take operands an ``Fp8Cast`` made (``ops/cast.py``): fp8 codes with their
scales, standing for values of a nominal dtype. The three GEMMs of a linear
layer are fp8 GEMMs (``kernels/fp8_gemm.py``: exact products, float32
accumulation, one rounding):

- forward: ``y = x_q @ w_q^T + b`` (E4M3 input and weight);
- backward: the output gradient is quantised by the layer's gradient
  quantiser, an ``Fp8Cast`` in the backward format (E5M2 under HYBRID), then
  ``dx = g_q @ w_q`` and ``dW = g_q^T @ x_q`` (the saved fp8 input: a linear
  layer under fp8 keeps 1-byte activations for its backward, as Transformer
  Engine's do); ``db`` is the gradient's float32-accumulated sum.

An fp8 GEMM has no second derivative here: a backward recorded with
``create_graph=True`` through one is refused when it is differentiated again.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import dtypes as dt
from ..autograd.function import Function
from ..kernels.fp8_gemm import fp8_gemm
from ..precision import LOWER, NEUTRAL
from ..tensor import Tensor
from .cast import fp8_cast
from .reduce import sum as _sum


def _folded(gy: Tensor) -> Tensor:
    return gy if gy.ndim == 2 else gy.reshape(math.prod(gy.shape[:-1]), gy.shape[-1])


class Fp8Linear(Function):
    """y = x_q @ w_q^T + b; g_q = fp8(gy), dx = g_q @ w_q, dW = g_q^T @ x_q, db = sum of gy over leading dims

    Inside a 16-bit autocast region the operands stand for values of the
    region's dtype, and LOWER's rule casts the bias to it, as for ``Linear``.
    """

    precision = LOWER
    save_inputs = (0, 1)
    saved_input_needed_by = {0: (1,), 1: (0,)}
    same_as = "linear"  # what the shadow run's float32 twin runs in its place

    def __init__(self, grad_quantizer: Any) -> None:
        self.grad_quantizer = grad_quantizer

    def forward(self, xp: Any, xq: Any, wq: Any, b: Any = None) -> Any:
        if wq.ndim != 2 or xq.ndim == 0 or xq.shape[-1] != wq.shape[1]:
            raise ValueError(f"fp8 linear: input {list(xq.shape)} and weight {list(wq.shape)} do not fit: expected "
                             f"weight (out_features, {xq.shape[-1] if xq.ndim else '?'})")
        if xq.dtype != wq.dtype or (b is not None and b.dtype != xq.dtype):
            raise TypeError(f"fp8 linear: operands stand for {dt.dtype_name(xq.dtype)} and "
                            f"{dt.dtype_name(wq.dtype)}{'' if b is None else ', bias ' + dt.dtype_name(b.dtype)}; "
                            f"expected one dtype")
        y = fp8_gemm(xq.rows(), wq, xq.dtype, trans_b=True, bias=b)
        return y.reshape(xq.shape[:-1] + (wq.shape[0],))

    def backward(self, gy: Tensor) -> tuple:
        xq, wq = self.saved_tensors
        g = fp8_cast(_folded(gy), self.grad_quantizer, gy.dtype)
        dx = dw = None
        if self.needs_input_grad[0]:
            dx = Fp8MatMul(self.input_dtypes[0])(g, wq).reshape(self.input_shapes[0])
        if self.needs_input_grad[1]:
            x_rows = xq if xq.ndim == 2 else Fp8Rows()(xq)
            dw = Fp8MatMul(self.input_dtypes[1], trans_a=True)(g, x_rows)
        if len(self.needs_input_grad) == 2:
            return dx, dw
        db = _sum(_folded(gy), 0) if self.needs_input_grad[2] else None
        return dx, dw, db


class Fp8MatMul(Function):
    """y = op(a_q) @ b_q (fp8 GEMM, float32 accumulation, one rounding to out_dtype); no second derivative"""

    precision = NEUTRAL
    name = "fp8_matmul"

    def __init__(self, out_dtype: np.dtype, trans_a: bool = False) -> None:
        self.out_dtype, self.trans_a = np.dtype(out_dtype), trans_a

    def forward(self, xp: Any, a: Any, b: Any) -> Any:
        return fp8_gemm(a, b, self.out_dtype, trans_a=self.trans_a)

    def backward(self, gy: Tensor) -> tuple:
        raise RuntimeError("fp8_matmul: an fp8 GEMM has no second derivative in tinyamp (differentiate a "
                           "backward that ran inside ta.amp.fp8_autocast without create_graph, or outside it)")


class Fp8Rows(Function):
    """y = the (rows, K) view of an N-D fp8 operand; dy = gy reshaped back"""

    precision = NEUTRAL
    name = "fp8_rows"

    def forward(self, xp: Any, q: Any) -> Any:
        return q.rows()

    def backward(self, gy: Tensor) -> Tensor:
        return gy.reshape(self.input_shapes[0])


def fp8_linear(xq: Tensor, wq: Tensor, bias: "Tensor | None", grad_quantizer: Any) -> Tensor:
    """The fp8 linear layer on operands quantised by ``Fp8Cast`` (``amp/fp8_autocast.py`` calls it)."""
    op = Fp8Linear(grad_quantizer)
    return op(xq, wq) if bias is None else op(xq, wq, bias)
