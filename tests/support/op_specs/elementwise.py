"""Op-spec rows for the elementwise family (tinyamp/ops/elementwise.py and clamp_where.py)."""

from __future__ import annotations

import numpy as np

import tinyamp as ta
from tests.support.op_specs import Arg, OpSpec

_NAN, _INF = float("nan"), float("inf")

SPECS = [
    OpSpec("add", lambda a, b: ta.add(a, b), np.add, [Arg((3, 4)), Arg((4,))]),
    OpSpec("sub", lambda a, b: a - b, np.subtract, [Arg((2, 1, 3)), Arg((4, 1))]),
    OpSpec("mul", lambda a, b: a * b, np.multiply, [Arg((3, 4)), Arg((3, 1))]),
    OpSpec("div", lambda a, b: a / b, np.divide, [Arg((3, 4)), Arg((4,), 0.5, 2.0)]),
    OpSpec("neg", lambda x: -x, np.negative, [Arg((3, 4))]),
    OpSpec("exp", ta.exp, np.exp, [Arg((3, 4))]),
    OpSpec("log", ta.log, np.log, [Arg((3, 4), 0.5, 2.0)]),
    OpSpec("scalar_mul", lambda x: x * 2.5, lambda x: x * 2.5, [Arg((5,))], id="mul_scalar"),
    # pow: number exponent (PowScalar), tensor exponent, number base (rpow)
    OpSpec("pow", lambda x: x ** 2, lambda x: x ** 2, [Arg((3, 4))], id="pow_square_int"),
    OpSpec("pow", lambda x: x.pow(0.5), np.sqrt, [Arg((3, 4), 0.5, 2.0)], id="pow_half"),
    OpSpec("pow", lambda x: ta.pow(x, -1.5), lambda x: x ** -1.5, [Arg((3, 4), 0.5, 2.0)], id="pow_negative"),
    OpSpec("pow", lambda x: x ** 0, np.ones_like, [Arg((3,))], id="pow_zero"),
    OpSpec("pow", lambda a, b: a ** b, np.power, [Arg((3, 4), 0.5, 2.0), Arg((4,), -1.5, 1.5)],
           id="pow_tensor_broadcast"),
    OpSpec("pow", lambda x: 2.0 ** x, lambda x: 2.0 ** x, [Arg((3, 4))], id="rpow"),
    OpSpec("square", ta.square, np.square, [Arg((2, 3))]),
    OpSpec("log1p", ta.log1p, np.log1p, [Arg((3, 4), -0.5, 2.0)]),
    OpSpec("sqrt", lambda x: x.sqrt(), np.sqrt, [Arg((3, 4), 0.5, 2.0)]),
    OpSpec("rsqrt", ta.rsqrt, lambda x: 1 / np.sqrt(x), [Arg((3, 4), 0.5, 2.0)]),
    OpSpec("reciprocal", ta.reciprocal, np.reciprocal, [Arg((3, 4), 0.5, 2.0)]),
    OpSpec("abs", lambda x: x.abs(), np.abs, [Arg((3, 4), away_from=(0.0,))]),
    OpSpec("sign", ta.sign, np.sign, [Arg((3, 4), away_from=(0.0,))]),
    # clamp_where.py: random draws never tie, so these rows see no ties (tests/test_ops_errors_elementwise
    # checks the tie split by hand)
    OpSpec("maximum", ta.maximum, np.maximum, [Arg((3, 4)), Arg((3, 4))]),
    OpSpec("maximum", lambda a, b: a.maximum(b), np.maximum, [Arg((2, 3, 4)), Arg((4,))],
           id="maximum_broadcast"),
    OpSpec("maximum", lambda x: ta.maximum(x, 0.25), lambda x: np.maximum(x, 0.25),
           [Arg((3, 4), away_from=(0.25,))], id="maximum_scalar"),
    OpSpec("minimum", ta.minimum, np.minimum, [Arg((3, 1)), Arg((1, 4))]),
    OpSpec("max", lambda a, b: ta.max(a, b), np.maximum, [Arg((3, 4)), Arg((3, 4))], id="max_binary"),
    OpSpec("clamp", lambda x: ta.clamp(x, -0.5, 0.5), lambda x: np.clip(x, -0.5, 0.5),
           [Arg((4, 5), away_from=(-0.5, 0.5))]),
    OpSpec("clamp", lambda x: x.clamp(min=0.25), lambda x: np.maximum(x, 0.25),
           [Arg((4, 5), away_from=(0.25,))], id="clamp_min_only"),
    OpSpec("clamp", lambda x: x.clip(max=-0.25), lambda x: np.minimum(x, -0.25),
           [Arg((4, 5), away_from=(-0.25,))], id="clip_max_only"),
    OpSpec("where", lambda c, a, b: ta.where(c, a, b), np.where,
           [Arg((3, 4), kind="bool"), Arg((3, 4)), Arg((4,))]),
    OpSpec("where", lambda c, x: ta.where(c, 0.5, x), lambda c, x: np.where(c, 0.5, x),
           [Arg((2, 1, 4), kind="bool"), Arg((3, 4))], id="where_scalar_broadcast"),
    OpSpec("where", lambda c, x, y: x.where(c, y), np.where,
           [Arg((3, 4), kind="bool"), Arg((3, 4)), Arg((3, 4))], id="where_method"),
    # floor_division.py: a / b in (2.01, 2.9), so floor(a / b) = 2 away from its jumps
    OpSpec("remainder", lambda a, b: a % b, np.remainder, [Arg((3, 4), 2.1, 2.9), Arg((4,), 1.0, 1.04)]),
    OpSpec("remainder", lambda x: ta.remainder(x, -0.75), lambda x: np.remainder(x, -0.75),
           [Arg((3, 4), 0.1, 0.7)], id="remainder_negative_divisor"),
    OpSpec("floor_divide", lambda a, b: a // b, np.floor_divide, [Arg((3, 4), 2.1, 2.9), Arg((4,), 1.0, 1.04)],
           differentiable=False),
    # logical.py: bool results, no gradient
    OpSpec("isnan", lambda x: ta.isnan(ta.where(x > 0, x, _NAN)), lambda x: x <= 0, [Arg((3, 4))],
           out_dtype=lambda d: ta.bool, differentiable=False),
    OpSpec("isinf", lambda x: ta.where(x > 0, _INF, -x).isinf(), lambda x: x > 0, [Arg((3, 4))],
           out_dtype=lambda d: ta.bool, differentiable=False),
    OpSpec("isfinite", lambda x: ta.isfinite(ta.where(x > 0.5, _NAN, ta.where(x < -0.5, -_INF, x))),
           lambda x: np.abs(x) <= 0.5, [Arg((3, 4), away_from=(-0.5, 0.5))], out_dtype=lambda d: ta.bool,
           differentiable=False),
    OpSpec("isclose", lambda a, b: ta.isclose(a, a + b * 1e-3, atol=5e-4, rtol=0.0),
           lambda a, b: np.abs(b * 1e-3) <= 5e-4, [Arg((3, 4)), Arg((3, 4))], out_dtype=lambda d: ta.bool,
           differentiable=False, float16=False),
]
