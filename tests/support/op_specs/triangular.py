"""Op-spec rows for tril and triu (tinyamp/ops/triangular.py)."""

from __future__ import annotations

import numpy as np

import tinyamp as ta
from tests.support.op_specs import Arg, OpSpec

SPECS = [
    OpSpec("tril", ta.tril, np.tril, [Arg((4, 5))]),
    OpSpec("tril", lambda x: x.tril(-1), lambda x: np.tril(x, -1), [Arg((2, 3, 4))], id="tril_batched_below"),
    OpSpec("tril", lambda x: ta.tril(x, diagonal=2), lambda x: np.tril(x, 2), [Arg((3, 3))], id="tril_above"),
    OpSpec("triu", ta.triu, np.triu, [Arg((4, 3))]),
    OpSpec("triu", lambda x: x.triu(diagonal=1), lambda x: np.triu(x, 1), [Arg((2, 4, 4))], id="triu_strict"),
    OpSpec("triu", lambda x: ta.triu(x, -2), lambda x: np.triu(x, -2), [Arg((5, 3))], id="triu_below"),
]
