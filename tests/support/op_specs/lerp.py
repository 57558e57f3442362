"""Op-spec rows for lerp (tinyamp/ops/lerp.py): number and tensor weights, both sides of |w| = 0.5."""

from __future__ import annotations

import numpy as np

import tinyamp as ta
from tests.support.op_specs import Arg, OpSpec


def _lerp(a: np.ndarray, b: np.ndarray, w) -> np.ndarray:
    return a + w * (b - a)


SPECS = [
    OpSpec("lerp", lambda a, b: ta.lerp(a, b, 0.25), lambda a, b: _lerp(a, b, 0.25), [Arg((3, 4)), Arg((3, 4))]),
    OpSpec("lerp", lambda a, b: a.lerp(b, 0.8), lambda a, b: _lerp(a, b, 0.8), [Arg((3, 4)), Arg((4,))],
           id="lerp_large_weight_broadcast"),
    OpSpec("lerp", lambda a, b: ta.lerp(a, b, -1.5), lambda a, b: _lerp(a, b, -1.5), [Arg((2, 3)), Arg((2, 3))],
           id="lerp_extrapolate"),
    # tensor weights straddle 0.5, so both formulas of the kernel are used
    OpSpec("lerp", ta.lerp, _lerp, [Arg((3, 4)), Arg((3, 4)), Arg((3, 4), 0.0, 1.0)], id="lerp_tensor_weight"),
    OpSpec("lerp", lambda a, b, w: a.lerp(b, w), _lerp, [Arg((2, 1, 4)), Arg((3, 1)), Arg((4,), -1.0, 2.0)],
           id="lerp_tensor_weight_broadcast"),
]
