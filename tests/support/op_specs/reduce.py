"""Op-spec rows for the reduction family (tinyamp/ops/reduce.py).

Uniform random inputs have no ties, so max/min/argmax pick one element and
finite differences see a smooth function; ties are tested by hand in
tests/ops/test_ops_errors_elementwise.py.
"""

from __future__ import annotations

import numpy as np

import tinyamp as ta
from tests.support.op_specs import Arg, OpSpec


def _int64(dtype: object) -> object:
    return ta.int64


SPECS = [
    OpSpec("sum", lambda x: x.sum((0, 2), keepdim=True), lambda x: x.sum((0, 2), keepdims=True),
           [Arg((2, 3, 4))], id="sum_dims_keepdim"),
    OpSpec("sum", lambda x: ta.sum(x, 0), lambda x: x, [Arg(())], id="sum_0d_dim0"),
    OpSpec("mean", lambda x: x.mean(-1), lambda x: x.mean(-1), [Arg((3, 4))]),
    # max / min without dim: the largest element (gradient split among ties, none here)
    OpSpec("max", lambda x: ta.max(x), np.max, [Arg((3, 4))], id="max_all"),
    OpSpec("max", lambda x: x.max(dim=1).values, lambda x: x.max(1), [Arg((3, 4))], id="max_dim_values"),
    OpSpec("max", lambda x: x.max(-1, keepdim=True).values, lambda x: x.max(-1, keepdims=True),
           [Arg((2, 3, 4))], id="max_negative_dim_keepdim"),
    OpSpec("max", lambda x: ta.max(x, 0).indices, lambda x: x.argmax(0), [Arg((3, 4))],
           out_dtype=_int64, differentiable=False, id="max_dim_indices"),
    OpSpec("min", lambda x: x.min(), np.min, [Arg((3, 4))], id="min_all"),
    OpSpec("min", lambda x: ta.min(x, 0, keepdim=True)[0], lambda x: x.min(0, keepdims=True),
           [Arg((3, 4))], id="min_dim_values"),
    OpSpec("min", lambda x: x.min(1)[1], lambda x: x.argmin(1), [Arg((3, 4))],
           out_dtype=_int64, differentiable=False, id="min_dim_indices"),
    OpSpec("amax", lambda x: ta.amax(x, (0, 2)), lambda x: x.max((0, 2)), [Arg((2, 3, 4))]),
    OpSpec("amax", lambda x: x.amax(-1, keepdim=True), lambda x: x.max(-1, keepdims=True),
           [Arg((3, 4))], id="amax_negative_keepdim"),
    OpSpec("amax", ta.amax, np.max, [Arg((3, 4))], id="amax_all"),
    OpSpec("amin", lambda x: ta.amin(x, (-1, 0), keepdim=True), lambda x: x.min((0, 2), keepdims=True),
           [Arg((2, 3, 4))]),
    OpSpec("argmax", ta.argmax, np.argmax, [Arg((3, 4))], out_dtype=_int64, differentiable=False),
    OpSpec("argmax", lambda x: x.argmax(1, keepdim=True), lambda x: x.argmax(1, keepdims=True),
           [Arg((3, 4))], out_dtype=_int64, differentiable=False, id="argmax_dim_keepdim"),
    OpSpec("argmin", lambda x: ta.argmin(x, -1), lambda x: x.argmin(-1), [Arg((2, 3, 4))],
           out_dtype=_int64, differentiable=False),
    OpSpec("var", ta.var, lambda x: x.var(ddof=1), [Arg((3, 4))], id="var_all"),
    OpSpec("var", lambda x: x.var(1), lambda x: x.var(1, ddof=1), [Arg((3, 4))], id="var_dim"),
    OpSpec("var", lambda x: ta.var(x, (0, 2), keepdim=True), lambda x: x.var((0, 2), ddof=1, keepdims=True),
           [Arg((2, 3, 4))], id="var_dims_keepdim"),
    OpSpec("var", lambda x: x.var(-1, correction=0), lambda x: x.var(-1), [Arg((3, 4))], id="var_correction0"),
    OpSpec("var", lambda x: x.var(unbiased=False), lambda x: x.var(), [Arg((3, 4))], id="var_unbiased_false"),
    OpSpec("std", lambda x: x.std(), lambda x: x.std(ddof=1), [Arg((3, 4))], id="std_all"),
    OpSpec("std", lambda x: ta.std(x, 0, keepdim=True), lambda x: x.std(0, ddof=1, keepdims=True),
           [Arg((3, 4))], id="std_dim_keepdim"),
    OpSpec("std", lambda x: x.std((0, 1), correction=2), lambda x: x.std((0, 1), ddof=2),
           [Arg((2, 3, 4))], id="std_dims_correction2"),
    # vector_norms.py: the 2-norm op; other orders are compositions of abs/sum/pow/amax
    OpSpec("norm", lambda x: x.norm(), lambda x: np.sqrt((x * x).sum()), [Arg((3, 4))], id="norm_all"),
    OpSpec("norm", lambda x: ta.norm(x, 2, dim=1, keepdim=True),
           lambda x: np.sqrt((x * x).sum(1, keepdims=True)), [Arg((3, 4))], id="norm_dim_keepdim"),
    OpSpec("norm", lambda x: ta.linalg.vector_norm(x, 3, dim=(0, 2)),
           lambda x: (np.abs(x) ** 3).sum((0, 2)) ** (1 / 3), [Arg((2, 3, 4), away_from=(0.0,))], id="norm_p3"),
    # ord 0 counts non-zeros (relu makes some): piecewise constant, a zero gradient as in PyTorch
    OpSpec("norm", lambda x: ta.linalg.vector_norm(ta.relu(x), 0, dim=1), lambda x: (x > 0).sum(1).astype(float),
           [Arg((3, 4), away_from=(0.0,))], id="norm_p0"),
    OpSpec("normalize", lambda x: ta.nn.functional.normalize(x, dim=1),
           lambda x: x / np.sqrt((x * x).sum(1, keepdims=True)), [Arg((3, 4))], id="normalize"),
    # logical.py: bool results, no gradient
    OpSpec("all", lambda x: (x > -0.5).all(dim=1), lambda x: (x > -0.5).all(1), [Arg((3, 4))],
           out_dtype=lambda d: ta.bool, differentiable=False, id="all_dim"),
    OpSpec("any", lambda x: ta.any(x > 0.5, dim=(0,), keepdim=True), lambda x: (x > 0.5).any(0, keepdims=True),
           [Arg((3, 4))], out_dtype=lambda d: ta.bool, differentiable=False, id="any_dim_keepdim"),
    OpSpec("nonzero", lambda x: (x > 0).nonzero(), lambda x: np.argwhere(x > 0), [Arg((3, 4))],
           out_dtype=_int64, differentiable=False, id="nonzero"),
]
