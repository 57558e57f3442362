"""Op-spec rows for the ops of the porting round (issue 31): flip, median, einsum, gather, scatter, scatter_add,
prod, kl_div, instance_norm, interpolate, each against a NumPy reference (the PyTorch comparison of the same
ops, forward and backward, is tests/support/module_cases.py)."""

from __future__ import annotations

import numpy as np

import tinyamp as ta
from tests.support.op_specs import Arg, OpSpec

IDX = np.array([[0, 2, 1, 0], [3, 3, 0, 1], [1, 0, 2, 3]])
UNIQUE = np.array([[2, 0], [1, 3], [3, 2]])  # distinct per row: a scatter's result does not depend on the order


def _index(x: ta.Tensor, index: np.ndarray) -> ta.Tensor:
    return ta.tensor(index, device=x.device)


def _scatter_ref(x: np.ndarray, src: np.ndarray) -> np.ndarray:
    out = x.copy()
    np.put_along_axis(out, UNIQUE, src, axis=1)
    return out


def _scatter_add_ref(x: np.ndarray, src: np.ndarray) -> np.ndarray:
    out = x.copy()
    for i in range(IDX.shape[0]):
        for j in range(IDX.shape[1]):
            out[i, IDX[i, j]] += src[i, j]
    return out


def _instance_norm_ref(x: np.ndarray) -> np.ndarray:
    axes = tuple(range(2, x.ndim))
    return (x - x.mean(axes, keepdims=True)) / np.sqrt(x.var(axes, keepdims=True) + 1e-5)


SPECS = [
    OpSpec("flip", lambda x: ta.flip(x, (0, 2)), lambda x: np.flip(x, (0, 2)), [Arg((2, 3, 4))]),
    OpSpec("median", lambda x: x.median(), lambda x: np.sort(x.ravel())[(x.size - 1) // 2], [Arg((3, 4))],
           id="median_all"),
    OpSpec("median", lambda x: ta.median(x, 1).values, lambda x: np.sort(x, 1)[:, 2], [Arg((3, 5))],
           id="median_dim"),
    OpSpec("einsum", lambda a, b: ta.einsum("bij,bjk->bik", a, b), lambda a, b: np.einsum("bij,bjk->bik", a, b),
           [Arg((2, 3, 4)), Arg((2, 4, 2))]),
    OpSpec("gather", lambda x: ta.gather(x, 1, _index(x, IDX)), lambda x: np.take_along_axis(x, IDX, 1),
           [Arg((3, 4))]),
    OpSpec("scatter", lambda x, s: ta.scatter(x, 1, _index(x, UNIQUE), s), _scatter_ref, [Arg((3, 4)), Arg((3, 2))]),
    OpSpec("scatter_add", lambda x, s: ta.scatter_add(x, 1, _index(x, IDX), s), _scatter_add_ref,
           [Arg((3, 4)), Arg((3, 4))]),
    OpSpec("prod", lambda x: x.prod(1), lambda x: np.prod(x, 1), [Arg((3, 4), 0.5, 1.5)]),
    OpSpec("kl_div", lambda x, t: ta.nn.functional.kl_div(x, t, reduction="sum"),
           lambda x, t: np.sum(t * (np.log(t) - x)), [Arg((3, 4), -3.0, -0.1), Arg((3, 4), 0.1, 1.0)],
           float16_tol=(2e-2, 5e-2)),
    OpSpec("instance_norm", lambda x: ta.nn.functional.instance_norm(x), _instance_norm_ref, [Arg((2, 3, 6))],
           float16_tol=(3e-2, 3e-2)),
    OpSpec("interpolate", lambda x: ta.nn.functional.interpolate(x, scale_factor=2),
           lambda x: np.repeat(np.repeat(x, 2, 2), 2, 3), [Arg((1, 2, 3, 2))]),
]
