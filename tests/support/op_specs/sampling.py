"""Op-spec rows for multinomial (tinyamp/ops/sampling.py), on draws whose outcome is certain.

Weights with a single positive entry per row always give that index; drawing
every category without replacement gives a permutation (checked sorted). The
distribution itself is tested in test_porting_ops.py.
"""

from __future__ import annotations

import numpy as np

import tinyamp as ta
from tests.support.op_specs import Arg, OpSpec


def _only_the_largest(x: ta.Tensor) -> ta.Tensor:
    return ta.where(x >= x.amax(-1, keepdim=True), x, 0.0)


SPECS = [
    OpSpec("multinomial", lambda x: ta.multinomial(_only_the_largest(x), 5, replacement=True),
           lambda x: np.repeat(np.argmax(x, -1)[..., None], 5, -1), [Arg((3, 6), 0.5, 1.0)],
           out_dtype=lambda d: ta.int64, differentiable=False),
    OpSpec("multinomial", lambda x: _only_the_largest(x).multinomial(1), lambda x: np.argmax(x, -1)[None],
           [Arg((1, 7), 0.5, 1.0)], out_dtype=lambda d: ta.int64, differentiable=False, id="multinomial_method"),
    OpSpec("multinomial", lambda x: ta.sort(ta.multinomial(x, 4)).values,
           lambda x: np.broadcast_to(np.arange(4), x.shape), [Arg((2, 4), 0.1, 1.0)],
           out_dtype=lambda d: ta.int64, differentiable=False, id="multinomial_all_without_replacement"),
]
