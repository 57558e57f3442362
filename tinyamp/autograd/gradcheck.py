"""Numerical gradient checks in float64: gradcheck and gradgradcheck.

The analytic vector-Jacobian product ``v^T J`` for a random cotangent ``v`` is
compared with central differences of ``v . f(x)``, one input element at a time.
gradgradcheck applies the same test to the function ``x, v -> grad(f(x), x, v)``
built with ``create_graph=True``, so it checks the backward of the backward.

Both work on any device: device values reach the host only through
``backend.to_host`` (one read per objective evaluation), never through
``numpy.asarray``, which CuPy refuses. An input is perturbed in place through
a flat view, and its original values are read once on the host: on CuPy an
indexed element is a 0-d *view*, so remembering ``flat[k]`` itself would
remember the perturbed value.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from .. import backend
from .. import dtypes as dt
from ..tensor import Tensor
from .engine import grad


def _outputs(func: Callable, inputs: Sequence[Tensor]) -> list[Tensor]:
    out = func(*inputs)
    return [out] if isinstance(out, Tensor) else [o for o in out if isinstance(o, Tensor)]


def _check_inputs(inputs: Sequence[Tensor], caller: str) -> None:
    for i, t in enumerate(inputs):
        if t.requires_grad and t.dtype != dt.float64:
            raise ValueError(f"{caller}: input {i} is {dt.dtype_name(t.dtype)}; use float64 inputs, "
                             f"finite differences in lower precision are meaningless")


def gradcheck(func: Callable, inputs: Sequence[Tensor], eps: float = 1e-6, atol: float = 1e-5,
              rtol: float = 1e-3, raise_exception: bool = True, seed: int = 0) -> bool:
    """Check the gradients of ``func`` at ``inputs`` against central differences."""
    inputs = list(inputs)
    _check_inputs(inputs, "gradcheck")
    rng = np.random.default_rng(seed)
    outs = _outputs(func, inputs)
    cotangents = [Tensor._wrap(o.device.xp.asarray(rng.standard_normal(o.shape)).astype(o.dtype))
                  for o in outs]
    diff_inputs = [t for t in inputs if t.requires_grad]
    diff_outs = [(o, v) for o, v in zip(outs, cotangents) if o.requires_grad]
    if diff_outs:
        analytic = grad([o for o, _ in diff_outs], diff_inputs, [v for _, v in diff_outs],
                        allow_unused=True)
    else:
        analytic = [None] * len(diff_inputs)

    def objective() -> float:
        total = 0.0
        for o, v in zip(_outputs(func, inputs), cotangents):
            if o.dtype in dt.FLOATING:
                xp = backend.array_module(o.array)
                total += float(backend.to_host(xp.sum(o.array.astype(np.float64) * v.array.astype(np.float64))))
        return total

    for position, (t, g) in enumerate(zip(diff_inputs, analytic)):
        if not t.array.flags.c_contiguous:
            raise ValueError(f"gradcheck: input {position} (shape {list(t.shape)}) is not contiguous; "
                             f"perturbing it in place needs a contiguous tensor (pass x.contiguous())")
        expected = np.zeros(t.shape)
        flat = t.array.reshape(-1)  # a view: perturb in place, restore after
        originals = backend.to_host(flat).copy()  # host floats: flat[k] would be a view on CuPy
        for k in range(flat.size):
            original = originals[k]
            flat[k] = original + eps
            plus = objective()
            flat[k] = original - eps
            minus = objective()
            flat[k] = original
            expected.reshape(-1)[k] = (plus - minus) / (2 * eps)
        got = np.zeros(t.shape) if g is None else backend.to_host(g.array).astype(np.float64)
        if not np.allclose(got, expected, atol=atol, rtol=rtol):
            if not raise_exception:
                return False
            worst = np.max(np.abs(got - expected))
            raise AssertionError(f"gradcheck: Jacobian mismatch for input {position} (shape {list(t.shape)}), "
                                 f"max abs error {worst:.3g}\nnumerical:\n{expected}\nanalytical:\n{got}")
    return True


def gradgradcheck(func: Callable, inputs: Sequence[Tensor], eps: float = 1e-6, atol: float = 1e-5,
                  rtol: float = 1e-3, raise_exception: bool = True, seed: int = 1) -> bool:
    """Check second derivatives: gradcheck of ``(x, v) -> grad(func(x), x, v, create_graph=True)``."""
    inputs = list(inputs)
    _check_inputs(inputs, "gradgradcheck")
    rng = np.random.default_rng(seed)
    outs = _outputs(func, inputs)
    cotangents = [Tensor(o.device.xp.asarray(rng.standard_normal(o.shape)).astype(o.dtype), requires_grad=True)
                  for o in outs if o.requires_grad]
    n = len(inputs)

    def first_derivative(*args: Tensor) -> tuple:
        xs, vs = list(args[:n]), list(args[n:])
        values = [o for o in _outputs(func, xs) if o.requires_grad]
        diff = [x for x in xs if x.requires_grad]
        grads = grad(values, diff, vs, create_graph=True, allow_unused=True)
        # An input the gradient does not depend on contributes a constant zero.
        return tuple(g if g is not None else Tensor._wrap(x.array * 0) for g, x in zip(grads, diff))

    return gradcheck(first_derivative, inputs + cotangents, eps=eps, atol=atol, rtol=rtol,
                     raise_exception=raise_exception, seed=seed)
