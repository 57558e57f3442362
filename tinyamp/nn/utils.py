"""Gradient clipping and parameter/vector conversion (``ta.nn.utils``).

``clip_grad_norm_`` never reads a value back to the host: the total norm, the
clip coefficient ``min(max_norm / (norm + 1e-6), 1)`` and the scaling are all
device arrays, so a clipped training step on a GPU adds no synchronisation.
Norms are computed in float32 from each gradient whatever its dtype (a float16
sum of squares overflows at 65504, i.e. at a norm of only about 256).
"""

from __future__ import annotations

import math
from typing import Any, Iterable

import numpy as np

from .. import backend
from .. import dtypes as dt
from ..kernels.convert import convert
from ..tensor import Tensor
from ..factories import tensor
from ..ops.shape import cat


def _grads(parameters: "Tensor | Iterable[Tensor]") -> list[Tensor]:
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    return [p.grad for p in parameters if p.grad is not None]


def _float32(array: Any) -> Any:
    return array if array.dtype == dt.float32 else convert(array, dt.float32)


def _norm(xp: Any, array: Any, norm_type: float) -> Any:
    """The ``norm_type``-norm of all of ``array``'s values, as a float32 0-d array."""
    flat = _float32(array).ravel()
    if flat.size == 0:
        return xp.zeros((), dtype=dt.float32)
    norm = xp.abs(flat).max() if math.isinf(norm_type) else xp.linalg.norm(flat, ord=norm_type)
    return xp.asarray(norm, dtype=dt.float32)  # NumPy reductions give scalars; keep a 0-d array


# An overflowed AMP step has an inf norm: coef is 0 and inf * 0 gives nan gradients, as
# in PyTorch (GradScaler then skips the step); NumPy's warnings about it are noise.
@np.errstate(all="ignore")
def clip_grad_norm_(parameters: "Tensor | Iterable[Tensor]", max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False, foreach: bool | None = None) -> Tensor:
    """Scale all gradients together so their joint norm is at most ``max_norm``; returns the norm before.

    ``foreach`` is accepted for PyTorch compatibility and has no effect.
    """
    grads = _grads(parameters)
    norm_type = float(norm_type)
    if not grads:
        return tensor(0.0)
    device = grads[0].device
    xp = device.xp
    per_grad = [backend.to_device(_norm(g.device.xp, g.array, norm_type), device) for g in grads]
    total = _norm(xp, xp.stack(per_grad), norm_type)
    if error_if_nonfinite and not bool(backend.to_host(xp.isfinite(total))):
        raise RuntimeError(f"The total norm of order {norm_type} for gradients from `parameters` is non-finite, "
                           f"so it cannot be clipped. To disable this error and scale the gradients by the "
                           f"non-finite norm anyway, set `error_if_nonfinite=False`")
    # min(coef, 1) on the device instead of `if total > max_norm` on the host: no sync.
    coef = xp.minimum(float(max_norm) / (total + 1e-6), 1.0)  # Python floats are weak: stays float32
    for g in grads:
        scale = backend.to_device(coef, g.device)
        if g.dtype == dt.float32:
            g.array *= scale
        else:  # scale in float32, round once to the gradient's dtype
            g.array[...] = convert(_float32(g.array) * scale, g.dtype)
        g._version[0] += 1
    return Tensor._wrap(total)


def clip_grad_value_(parameters: "Tensor | Iterable[Tensor]", clip_value: float,
                     foreach: bool | None = None) -> None:
    """Clamp every gradient element into [-clip_value, clip_value], in place."""
    clip_value = float(clip_value)
    for g in _grads(parameters):
        xp = g.device.xp
        xp.clip(g.array, -clip_value, clip_value, out=g.array)
        g._version[0] += 1


def parameters_to_vector(parameters: Iterable[Tensor]) -> Tensor:
    """All parameters flattened and concatenated (recorded: the result is differentiable)."""
    return cat([p.reshape(-1) for p in parameters])


def vector_to_parameters(vec: Tensor, parameters: Iterable[Tensor]) -> None:
    """Copy consecutive slices of ``vec`` into the parameters, in place."""
    if not isinstance(vec, Tensor) or vec.ndim != 1:
        raise TypeError(f"vector_to_parameters: expected a 1-D Tensor, got "
                        f"{type(vec).__name__}{list(vec.shape) if isinstance(vec, Tensor) else ''}")
    parameters = list(parameters)
    total = sum(p.numel() for p in parameters)
    if total != vec.shape[0]:
        raise ValueError(f"vector_to_parameters: vector has {vec.shape[0]} elements, parameters hold {total}")
    offset = 0
    for p in parameters:
        n = p.numel()
        chunk = backend.to_device(vec.array[offset:offset + n], p.device).reshape(p.shape)
        p.array[...] = chunk if chunk.dtype == p.dtype else convert(chunk, p.dtype)
        p._version[0] += 1
        offset += n
