"""``torch._foreach_*``: one arithmetic op over a list of tensors (``ta._foreach_mul_(ema, d)``).

Optimizers and EMAs (timm's ModelEmaV3, ``torch.optim``'s foreach paths) call
these on lists of parameters. Each takes a tensor list and, as PyTorch's do,
a Python number, a list of numbers, a 0-d tensor or a second tensor list
(``alpha=`` scales it, ``value=`` an addcmul product). The in-place forms
(``_``) return None; the others return a list. float16/bfloat16 tensors are
computed in float32 and rounded once into the tensor, as PyTorch's foreach
kernels do. A write that autograd must record (a non-leaf that requires
grad) goes through the tape as the tensor's own in-place method would; a
leaf that requires grad is refused outside ``no_grad`` (PyTorch's rule).
Here the list is a loop: there is no fused multi-tensor kernel.
"""

from __future__ import annotations

import numbers
from typing import Any, Callable, Sequence

import numpy as np

from .. import backend
from .. import dtypes as dt
from ..kernels.convert import convert
from ..tensor import Tensor
from ..ops.elementwise import add, div, mul, sqrt, sub
from ..ops.lerp import lerp
from ..ops.vector_norms import vector_norm

TensorList = Sequence[Tensor]


def _check_list(name: str, tensors: Any) -> list:
    if isinstance(tensors, Tensor) or not isinstance(tensors, (list, tuple)):
        raise TypeError(f"{name}: expected a list or tuple of Tensors, got {type(tensors).__name__}")
    if not tensors:
        raise RuntimeError("Tensor list must have at least one tensor.")
    for i, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name}: element {i} of the tensor list is a {type(t).__name__}, not a Tensor")
    return list(tensors)


def _per_tensor(name: str, tensors: list, other: Any) -> list:
    """``other`` as one operand per tensor: a number, a 0-d tensor, a list of numbers or of tensors."""
    n = len(tensors)
    if isinstance(other, Tensor):
        if other.ndim != 0:
            raise RuntimeError(f"scalar tensor expected to be 0 dim but it has {other.ndim} dimensions and "
                               f"{other.numel()} elements.")
        return [other] * n
    if isinstance(other, (numbers.Number, np.number)) and not isinstance(other, bool):
        return [other] * n
    if isinstance(other, (list, tuple)):
        if other and all(isinstance(o, Tensor) for o in other):
            if len(other) != n:
                raise RuntimeError(f"Tensor lists must have the same number of tensors, got {n} and {len(other)}")
            return list(other)
        if len(other) != n:
            raise RuntimeError("Tensor list must have same number of elements as scalar list.")
        for o in other:
            if not isinstance(o, (numbers.Number, np.number)) or isinstance(o, bool):
                raise TypeError(f"{name}: expected a list of Tensors or of numbers, got an element of type "
                                f"{type(o).__name__}")
        return list(other)
    raise TypeError(f"{name}: expected a number, a 0-d Tensor or a list, got {type(other).__name__}")


def _operand_array(name: str, t: Tensor, operand: Any) -> Any:
    """A tensor operand's array in the compute dtype on ``t``'s device; a number as it is."""
    if not isinstance(operand, Tensor):
        return operand
    if operand.device != t.device:
        raise RuntimeError(f"{name}: expected all tensors to be on the same device, but found {t.device} "
                           f"and {operand.device} (shapes {list(t.shape)} and {list(operand.shape)})")
    return dt.opmath(operand.array)


def _inplace(name: str, tensors: Any, compute: Callable[..., Any], *others: Any) -> None:
    """``t <- compute(t, *operands)`` for each tensor, in its compute dtype, rounded once into ``t``."""
    tensors = _check_list(name, tensors)
    columns = [_per_tensor(name, tensors, other) for other in others]
    for i, t in enumerate(tensors):
        operands = [column[i] for column in columns]
        grad_operand = next((o for o in operands if isinstance(o, Tensor) and o._requires_grad), None)
        if t._check_inplace(name, grad_operand):  # recorded: the same formula on Tensors, through the tape
            t._rebind(name, compute(t._old_value(), *operands))
            continue
        arrays = [_operand_array(name, t, o) for o in operands]
        result = backend.array_module(t.array).asarray(compute(dt.opmath(t.array), *arrays))
        if result.shape != t.shape:
            raise RuntimeError(f"{name}: the result of shape {list(result.shape)} cannot be written in place "
                               f"into tensor {i} of the list (shape {list(t.shape)})")
        if result.dtype != t.dtype and not dt.can_cast_in_place(result.dtype, t.dtype):
            floats = [o.dtype for o in operands if isinstance(o, Tensor) and o.dtype in dt.FLOATING]
            result_type = dt.widest_float(floats) if floats else dt.get_default_dtype()  # tinyamp's promotion
            raise RuntimeError(f"{name}: result type {dt.dtype_name(result_type)} can't be cast to the desired "
                               f"output type {dt.dtype_name(t.dtype)} (tensor {i} of the list, shape "
                               f"{list(t.shape)})")
        t._store(name, ..., convert(result, t.dtype) if result.dtype != t.dtype else result)


def _outplace(name: str, tensors: Any, compute: Callable[..., Tensor], *others: Any) -> list:
    """``[compute(t, *operands) for t in tensors]`` with tinyamp's ops (recorded, promoted as they are)."""
    tensors = _check_list(name, tensors)
    columns = [_per_tensor(name, tensors, other) for other in others]
    return [compute(t, *[column[i] for column in columns]) for i, t in enumerate(tensors)]


def _scaled(other: Any, alpha: Any) -> Any:
    return other if alpha == 1 else other * alpha


# ------------------------------------------------------------------ add, mul, div
def _foreach_add(self: TensorList, other: Any, *, alpha: float = 1) -> list:
    """[x + alpha * y for each x]"""
    return _outplace("_foreach_add", self, lambda x, y: add(x, y, alpha=alpha), other)


def _foreach_add_(self: TensorList, other: Any, *, alpha: float = 1) -> None:
    """x <- x + alpha * y for each x"""
    _inplace("_foreach_add_", self, lambda x, y: x + _scaled(y, alpha), other)


def _foreach_sub(self: TensorList, other: Any, *, alpha: float = 1) -> list:
    """[x - alpha * y for each x]"""
    return _outplace("_foreach_sub", self, lambda x, y: sub(x, y, alpha=alpha), other)


def _foreach_sub_(self: TensorList, other: Any, *, alpha: float = 1) -> None:
    """x <- x - alpha * y for each x"""
    _inplace("_foreach_sub_", self, lambda x, y: x - _scaled(y, alpha), other)


def _foreach_mul(self: TensorList, other: Any) -> list:
    """[x * y for each x]"""
    return _outplace("_foreach_mul", self, mul, other)


def _foreach_mul_(self: TensorList, other: Any) -> None:
    """x <- x * y for each x"""
    _inplace("_foreach_mul_", self, lambda x, y: x * y, other)


def _foreach_div(self: TensorList, other: Any) -> list:
    """[x / y for each x]"""
    return _outplace("_foreach_div", self, div, other)


def _foreach_div_(self: TensorList, other: Any) -> None:
    """x <- x / y for each x"""
    _inplace("_foreach_div_", self, lambda x, y: x / y, other)


# ------------------------------------------------------------- lerp, addcmul, sqrt
def _foreach_lerp(self: TensorList, tensors1: TensorList, weight: Any) -> list:
    """[x + w (e - x) for each x, e]"""
    ends = _per_tensor("_foreach_lerp", _check_list("_foreach_lerp", self), tensors1)
    return _outplace("_foreach_lerp", self, lambda x, e, w: lerp(x, e, w), ends, weight)


def _foreach_lerp_(self: TensorList, tensors1: TensorList, weight: Any) -> None:
    """x <- x + w (e - x) for each x, e (``Tensor.lerp_``: exact at w = 0 and w = 1)"""
    tensors = _check_list("_foreach_lerp_", self)
    ends = _per_tensor("_foreach_lerp_", tensors, _check_list("_foreach_lerp_", tensors1))
    weights = _per_tensor("_foreach_lerp_", tensors, weight)
    for x, e, w in zip(tensors, ends, weights):
        x.lerp_(e, w)


def _foreach_addcmul_(self: TensorList, tensor1: TensorList, tensor2: TensorList, value: Any = 1) -> None:
    """x <- x + value * t1 * t2 for each x"""
    tensors = _check_list("_foreach_addcmul_", self)
    _per_tensor("_foreach_addcmul_", tensors, _check_list("_foreach_addcmul_", tensor1))
    _inplace("_foreach_addcmul_", tensors, lambda x, a, b, v: x + v * a * b, tensor1, tensor2, value)


def _foreach_addcdiv_(self: TensorList, tensor1: TensorList, tensor2: TensorList, value: Any = 1) -> None:
    """x <- x + value * t1 / t2 for each x"""
    tensors = _check_list("_foreach_addcdiv_", self)
    _per_tensor("_foreach_addcdiv_", tensors, _check_list("_foreach_addcdiv_", tensor1))
    _inplace("_foreach_addcdiv_", tensors, lambda x, a, b, v: x + v * a / b, tensor1, tensor2, value)


def _sqrt(x: Any) -> Any:
    return sqrt(x) if isinstance(x, Tensor) else backend.array_module(x).sqrt(x)


def _foreach_sqrt(self: TensorList) -> list:
    """[sqrt(x) for each x]"""
    return _outplace("_foreach_sqrt", self, sqrt)


def _foreach_sqrt_(self: TensorList) -> None:
    """x <- sqrt(x) for each x"""
    _inplace("_foreach_sqrt_", self, _sqrt)


# ------------------------------------------------------------- norm, zero, copy
def _foreach_norm(self: TensorList, ord: float = 2, dtype: Any = None) -> list:  # noqa: A002 - torch name
    """[||x||_ord for each x], 0-d tensors (``torch.linalg.vector_norm`` of each)"""
    return [vector_norm(t, ord, dtype=dtype) for t in _check_list("_foreach_norm", self)]


def _foreach_zero_(self: TensorList) -> None:
    """x <- 0 for each x"""
    for t in _check_list("_foreach_zero_", self):
        t.zero_()


def _foreach_copy_(self: TensorList, src: TensorList, non_blocking: bool = False) -> None:
    """x <- s for each x, s (``Tensor.copy_``: dtype and device may differ)"""
    tensors = _check_list("_foreach_copy_", self)
    for t, s in zip(tensors, _per_tensor("_foreach_copy_", tensors, _check_list("_foreach_copy_", src))):
        t.copy_(s)


__all__ = ("_foreach_add", "_foreach_add_", "_foreach_sub", "_foreach_sub_", "_foreach_mul", "_foreach_mul_",
         "_foreach_div", "_foreach_div_", "_foreach_lerp", "_foreach_lerp_", "_foreach_addcmul_",
         "_foreach_addcdiv_", "_foreach_sqrt", "_foreach_sqrt_", "_foreach_norm", "_foreach_zero_",
         "_foreach_copy_")
