"""Op-spec rows for the elementwise family (tinyamp/ops/elementwise.py)."""

from __future__ import annotations

import numpy as np

import tinyamp as ta
from op_specs import Arg, OpSpec

SPECS = [
    OpSpec("add", lambda a, b: ta.add(a, b), np.add, [Arg((3, 4)), Arg((4,))]),
    OpSpec("sub", lambda a, b: a - b, np.subtract, [Arg((2, 1, 3)), Arg((4, 1))]),
    OpSpec("mul", lambda a, b: a * b, np.multiply, [Arg((3, 4)), Arg((3, 1))]),
    OpSpec("div", lambda a, b: a / b, np.divide, [Arg((3, 4)), Arg((4,), 0.5, 2.0)]),
    OpSpec("neg", lambda x: -x, np.negative, [Arg((3, 4))]),
    OpSpec("exp", ta.exp, np.exp, [Arg((3, 4))]),
    OpSpec("log", ta.log, np.log, [Arg((3, 4), 0.5, 2.0)]),
    OpSpec("scalar_mul", lambda x: x * 2.5, lambda x: x * 2.5, [Arg((5,))], id="mul_scalar"),
]
