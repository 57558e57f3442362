"""In-place writes on tensors: ``add_``, ``mul_``, ``lerp_``, ``clamp_``, ``copy_``, ``zero_``, ``x[i] = v``.

Every in-place write bumps the tensor's version counter, so a node that saved
the tensor for backward notices the change and fails loudly (PyTorch's rule).
Outside autograd the write goes into the tensor's buffer (views see it); when
the tape must record it, the op runs out of place and the tensor is rebound to
the result (see ``_rebind``).
"""

from __future__ import annotations

from typing import Any, Callable

import tinyamp

from . import backend
from . import dtypes as dt


class InplaceMixin:
    """The in-place half of :class:`tinyamp.Tensor`."""

    __slots__ = ()

    def _check_inplace(self, name: str, other: Any) -> bool:
        """True when the write must be recorded on the tape (PyTorch's rules)."""
        other_grad = isinstance(other, InplaceMixin) and other._requires_grad
        if not tinyamp.is_grad_enabled() or not (self._requires_grad or other_grad):
            return False
        if self.grad_fn is None and self._requires_grad:
            raise RuntimeError(f"{name}: a leaf Variable that requires grad is being used in an "
                               f"in-place operation (shape {list(self.shape)}, {dt.dtype_name(self.dtype)}); "
                               f"wrap it in ta.no_grad() or use the out-of-place op")
        return True

    def _check_result(self, name: str, result: "Tensor") -> None:
        if result.shape != self.shape or result.dtype != self.dtype:
            raise RuntimeError(f"{name}: result of shape {list(result.shape)} and dtype "
                               f"{dt.dtype_name(result.dtype)} cannot be written in place into a tensor of "
                               f"shape {list(self.shape)} and dtype {dt.dtype_name(self.dtype)}")

    def _old_value(self) -> "Tensor":
        """The tensor as it is now, as a separate node input for a recorded in-place op."""
        old = tinyamp.Tensor._wrap(self.data)
        old.grad_fn, old._out_index, old._requires_grad = self.grad_fn, self._out_index, self._requires_grad
        return old

    def _rebind(self, name: str, result: "Tensor") -> "Tensor":
        """A recorded in-place op: self becomes the op's output.

        The old array is left untouched (the node may have saved it) and self is
        rebound to the result; the version bump makes any other node that saved
        self fail loudly at backward instead of reading the new values.
        """
        self._check_result(name, result)
        self.data = result.data
        self.grad_fn, self._out_index, self._requires_grad = result.grad_fn, result._out_index, True
        self._version[0] += 1
        return self

    def _write(self, name: str, result: "Tensor") -> "Tensor":
        """An unrecorded in-place op: write into self's buffer (views see it)."""
        self._check_result(name, result)
        self.data[...] = result.data
        self._version[0] += 1
        return self

    def _inplace_binary(self, name: str, op: Callable, other: Any) -> "Tensor":
        if self._check_inplace(name, other):
            return self._rebind(name, op(self._old_value(), other))
        with tinyamp.no_grad():
            result = op(self, other)
        return self._write(name, result)

    def add_(self, other: Any, alpha: float = 1) -> "Tensor":
        if alpha != 1:
            other = other * alpha
        return self._inplace_binary("add_", tinyamp.ops.add, other)

    def sub_(self, other: Any, alpha: float = 1) -> "Tensor":
        if alpha != 1:
            other = other * alpha
        return self._inplace_binary("sub_", tinyamp.ops.sub, other)

    def mul_(self, other: Any) -> "Tensor":
        return self._inplace_binary("mul_", tinyamp.ops.mul, other)

    def div_(self, other: Any) -> "Tensor":
        return self._inplace_binary("div_", tinyamp.ops.div, other)

    def lerp_(self, end: Any, weight: Any) -> "Tensor":
        """self += weight * (end - self) (``ta.lerp``), in place; recorded when end or weight needs grad."""
        weight_grad = isinstance(weight, InplaceMixin) and weight._requires_grad
        return self._inplace_binary("lerp_", lambda x, _: tinyamp.ops.lerp(x, end, weight),
                                    weight if weight_grad else end)

    def clamp_(self, min: Any = None, max: Any = None) -> "Tensor":  # noqa: A002 - torch names
        return self._inplace_binary("clamp_", lambda x, _: tinyamp.ops.clamp(x, min, max), None)

    clip_ = clamp_

    def masked_fill_(self, mask: Any, value: Any) -> "Tensor":
        return self._inplace_binary("masked_fill_", lambda x, _: tinyamp.ops.masked_fill(x, mask, value), None)

    def zero_(self) -> "Tensor":
        return self.fill_(0)

    def fill_(self, value: Any) -> "Tensor":
        if self._check_inplace("fill_", None):
            raise RuntimeError("fill_: cannot fill a non-leaf tensor that requires grad in place")
        self.data[...] = value
        self._version[0] += 1
        return self

    def copy_(self, src: "Tensor") -> "Tensor":
        """Copy ``src`` (same shape; dtype and device may differ: this *is* the explicit cast)."""
        if not isinstance(src, InplaceMixin):
            src = tinyamp.tensor(src)
        if src.shape != self.shape:
            raise RuntimeError(f"copy_: source shape {list(src.shape)} does not match "
                               f"destination shape {list(self.shape)}")
        if self._check_inplace("copy_", src):
            converted = src.to(self.device).to(self.dtype)
            return self._rebind("copy_", tinyamp.ops.clone(converted))
        self.data[...] = backend.to_device(src.data, self.device).astype(self.dtype, copy=False)
        self._version[0] += 1
        return self

    def __setitem__(self, key: Any, value: Any) -> None:
        if tinyamp.is_grad_enabled() and (self._requires_grad or (isinstance(value, InplaceMixin) and value._requires_grad)):
            raise RuntimeError(f"index assignment into a tensor that requires grad (shape {list(self.shape)}) "
                               f"is not recorded by autograd; build the result with ta.where or ta.cat, "
                               f"or assign under ta.no_grad()")
        if isinstance(value, InplaceMixin):
            if value.dtype != self.dtype:
                raise TypeError(f"index assignment: value dtype {dt.dtype_name(value.dtype)} differs from "
                                f"tensor dtype {dt.dtype_name(self.dtype)}; cast it explicitly")
            value = value.data
        self.data[_index_key(key)] = value
        self._version[0] += 1


def _index_key(key: Any) -> Any:
    """Replace Tensors inside an index by their arrays."""
    if isinstance(key, InplaceMixin):
        return key.data
    if isinstance(key, tuple):
        return tuple(k.data if isinstance(k, InplaceMixin) else k for k in key)
    return key
