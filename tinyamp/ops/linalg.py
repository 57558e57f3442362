"""Contractions: ``matmul``, ``bmm`` and ``linear``, forward and backward through ``gemm``.

Every product here, in the forward pass and in the backward ops, is a call to
:func:`tinyamp.kernels.gemm.gemm`, so float16/bfloat16 operands are always summed in
float32 and rounded once: AMP's backward pass keeps the same numerics as its
forward. Transposes in the gradients (``gy @ W``, ``gy^T @ x``) are gemm's
``trans_a``/``trans_b`` flags, never materialised copies.

All three are LOWER: under autocast they run in float16 (or bfloat16).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import dtypes as dt
from ..autograd.function import Function
from ..kernels.gemm import gemm, gemm_bias
from ..precision import LOWER
from ..tensor import Tensor
from .broadcast import sum_to
from .reduce import Sum
from .vector_norms import linalg_norm as norm, vector_norm  # noqa: F401 - ta.linalg.norm / ta.linalg.vector_norm


def _operands(a: Any, b: Any, op: str = "@") -> str:
    return f"{list(a.shape)} {op} {list(b.shape)} ({dt.dtype_name(a.dtype)}, {dt.dtype_name(b.dtype)})"


def _check_dtypes(name: str, *arrays: Any) -> None:
    """One floating dtype for all operands (autocast has already unified them when active)."""
    first = arrays[0].dtype
    for a in arrays:
        if a.dtype != first or first not in dt.FLOATING:
            what = ", ".join(f"{list(a.shape)} {dt.dtype_name(a.dtype)}" for a in arrays)
            raise TypeError(f"{name}: expected operands of one floating dtype (float16, bfloat16, float32 "
                            f"or float64), got {what}; cast explicitly or use autocast")


class MatMul(Function):
    """y = op(a) @ op(b) (op: optional transpose of the last two dims); da = gy @ op(b)^T, db = op(a)^T @ gy"""

    precision = LOWER
    save_inputs = (0, 1)
    saved_input_needed_by = {0: (1,), 1: (0,)}  # a is needed by db only, b by da only

    def __init__(self, trans_a: bool = False, trans_b: bool = False) -> None:
        # The flags are for the backward pass (gy @ W^T without a copy); the
        # public matmul always uses plain operands, which may be 1-D.
        self.trans_a, self.trans_b = trans_a, trans_b

    def forward(self, xp: Any, a: Any, b: Any) -> Any:
        _check_dtypes(self.name, a, b)
        if a.ndim == 0 or b.ndim == 0:
            raise ValueError(f"{self.name}: both arguments need to be at least 1-D, got {_operands(a, b)}")
        # PyTorch's vector rules: a 1-D left operand is a row, a 1-D right one a
        # column, and the added dim is removed from the result.
        a2 = a.reshape(1, -1) if a.ndim == 1 else a
        b2 = b.reshape(-1, 1) if b.ndim == 1 else b
        k_a = a2.shape[-2] if self.trans_a else a2.shape[-1]
        k_b = b2.shape[-1] if self.trans_b else b2.shape[-2]
        if k_a != k_b:
            raise ValueError(f"{self.name}: inner dimensions differ: {_operands(a, b)}")
        try:
            if a2.ndim > 2 or b2.ndim > 2:
                np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
        except ValueError:
            raise ValueError(f"{self.name}: batch dimensions {list(a2.shape[:-2])} and {list(b2.shape[:-2])} "
                             f"cannot be broadcast: {_operands(a, b)}") from None
        if a2.ndim > 2 and b2.ndim == 2 and not self.trans_a:
            # A shared right matrix: fold the batch into M, one large GEMM
            # instead of a loop of small ones (a view when a is contiguous).
            y = gemm(_rows(a2), b2, trans_b=self.trans_b)
            y = y.reshape(a2.shape[:-1] + y.shape[-1:])
        else:
            y = gemm(a2, b2, trans_a=self.trans_a, trans_b=self.trans_b)
        self.shape2 = y.shape
        if a.ndim == 1:
            y = y.reshape(y.shape[:-2] + y.shape[-1:])
        if b.ndim == 1:
            y = y.reshape(y.shape[:-1])
        return y

    def backward(self, gy: Tensor) -> tuple:
        a, b = self.saved_tensors  # None when the other operand needs no gradient
        a_shape, b_shape = self.input_shapes
        a2_shape = (1,) + a_shape if len(a_shape) == 1 else a_shape
        b2_shape = b_shape + (1,) if len(b_shape) == 1 else b_shape
        gy = gy.reshape(self.shape2)
        ta, tb = self.trans_a, self.trans_b
        da = db = None
        if self.needs_input_grad[0]:
            b2 = b.reshape(b2_shape)
            # d op(a) = gy @ op(b)^T; when a is transposed, da = (that)^T = op(b) @ gy^T.
            da = MatMul(False, not tb)(gy, b2) if not ta else MatMul(tb, True)(b2, gy)
            da = sum_to(da, a2_shape).reshape(a_shape)
        if self.needs_input_grad[1]:
            a2 = a.reshape(a2_shape)
            if len(b2_shape) == 2 and len(a2_shape) > 2 and not ta:
                # The batch-broadcast weight of x @ W: one GEMM over all rows
                # (sum_k x_k^T gy_k) rather than per-batch products summed after.
                a_rows, g_rows = _rows(a2), _rows(gy)
                db = MatMul(True, False)(a_rows, g_rows) if not tb else MatMul(True, False)(g_rows, a_rows)
            else:
                # d op(b) = op(a)^T @ gy; when b is transposed, db = gy^T @ op(a).
                db = MatMul(not ta, False)(a2, gy) if not tb else MatMul(True, ta)(gy, a2)
            db = sum_to(db, b2_shape).reshape(b_shape)
        return da, db


def _rows(a: Any) -> Any:
    """``a`` (array or Tensor) as a matrix over its last dim, leading dims folded into rows.

    The row count is spelled out: ``reshape(-1, 0)`` is ambiguous for NumPy, and an
    empty last dim is legal (``nn.Linear(0, n)`` maps it to the bias alone).
    """
    return a.reshape(math.prod(a.shape[:-1]), a.shape[-1])


class Bmm(MatMul):
    """y = a @ b for 3-D a, b with equal batch; da = gy @ b^T, db = a^T @ gy"""

    precision = LOWER
    name = "bmm"

    def forward(self, xp: Any, a: Any, b: Any) -> Any:
        if a.ndim != 3 or b.ndim != 3:
            raise ValueError(f"bmm: both operands must be 3-D (batch, n, m), got {_operands(a, b)}")
        if a.shape[0] != b.shape[0]:
            raise ValueError(f"bmm: batch sizes differ ({a.shape[0]} vs {b.shape[0]}): {_operands(a, b)}")
        return super().forward(xp, a, b)


class Linear(Function):
    """y = x @ W^T + b; dx = gy @ W, dW = gy^T @ x, db = sum of gy over leading dims

    Under autocast a float32 weight and bias arrive through Cast nodes (the
    weight-cast cache serves their forward), like any LOWER op's inputs.
    """

    precision = LOWER
    save_inputs = (0, 1)  # x and W only: the output is not needed
    saved_input_needed_by = {0: (1,), 1: (0,)}  # x is needed by dW only, W by dx only

    def forward(self, xp: Any, x: Any, w: Any, b: Any = None) -> Any:
        _check_dtypes("linear", x, w, *(() if b is None else (b,)))
        if w.ndim != 2 or x.ndim == 0 or x.shape[-1] != w.shape[1]:
            raise ValueError(f"linear: input {list(x.shape)} and weight {list(w.shape)} ({dt.dtype_name(x.dtype)}) "
                             f"do not fit: expected weight (out_features, {x.shape[-1] if x.ndim else '?'})")
        out_features = w.shape[0]
        if b is not None and b.shape != (out_features,):
            raise ValueError(f"linear: bias of shape {list(b.shape)} does not match weight "
                             f"{list(w.shape)} (expected [{out_features}])")
        rows = x if x.ndim == 2 else _rows(x)  # batch dims folded into M: one GEMM
        y = gemm(rows, w, trans_b=True) if b is None else gemm_bias(rows, w, b, trans_b=True)
        return y if x.ndim == 2 else y.reshape(x.shape[:-1] + (out_features,))

    def backward(self, gy: Tensor) -> tuple:
        x, w = self.saved_tensors
        x_shape = self.input_shapes[0]
        folded = len(x_shape) != 2  # batch dims folded into rows, as the forward's GEMM had them
        g_rows = _rows(gy) if folded else gy
        dx = dw = None
        if self.needs_input_grad[0]:
            dx = MatMul()(g_rows, w).reshape(x_shape)
        if self.needs_input_grad[1]:
            dw = MatMul(trans_a=True)(g_rows, _rows(x) if folded else x)
        if len(self.needs_input_grad) == 2:
            return dx, dw
        # Sum accumulates float16/bfloat16 in float32 and rounds once.
        db = Sum(0)(g_rows) if self.needs_input_grad[2] else None
        return dx, dw, db


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """PyTorch's matmul: dot, vector-matrix, matrix-matrix and broadcast batched products."""
    return MatMul()(a, b)


def bmm(a: Tensor, b: Tensor) -> Tensor:
    """Batched matrix product of (B, n, m) and (B, m, p) tensors."""
    return Bmm()(a, b)


def mm(a: Tensor, b: Tensor) -> Tensor:
    """Matrix product of two 2-D tensors."""
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError(f"mm: both operands must be 2-D, got {_operands(a, b)}")
    return MatMul()(a, b)


def linear(input: Tensor, weight: Tensor, bias: "Tensor | None" = None) -> Tensor:  # noqa: A002 - torch name
    """``input @ weight.T + bias`` as one op (one GEMM, bias added in its epilogue)."""
    return Linear()(input, weight) if bias is None else Linear()(input, weight, bias)


METHODS = {"matmul": matmul, "bmm": bmm, "mm": mm}
