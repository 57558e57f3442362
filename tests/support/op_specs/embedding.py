"""Op-spec rows for embedding (tinyamp/ops/embedding.py).

Twelve indices into five rows always repeat some rows, so gradcheck covers the
accumulating scatter-add. padding_idx zeroes a gradient that is mathematically
non-zero (PyTorch's convention), so finite differences cannot check it: its row
is forward-only here and its gradient is tested in test_ops_errors_nn.py.
"""

from __future__ import annotations

import numpy as np

import tinyamp as ta
from tests.support.op_specs import Arg, OpSpec

SPECS = [
    OpSpec("embedding", lambda i, w: ta.embedding(i, w), lambda i, w: w[i],
           [Arg((4, 3), 0, 5, kind="int"), Arg((5, 6))]),
    OpSpec("embedding", lambda i, w: ta.embedding(i, w), lambda i, w: w[i],
           [Arg((7,), 0, 3, kind="int"), Arg((3, 2))], id="embedding_1d"),
    OpSpec("embedding", lambda i, w: ta.embedding(i, w, padding_idx=1), lambda i, w: w[i],
           [Arg((2, 5), 0, 4, kind="int"), Arg((4, 3))], differentiable=False,
           note="padding_idx gradient is zero by convention, not by calculus", id="embedding_padding"),
    # one_hot (tinyamp/ops/indexing.py): labels to int64 indicator rows, no gradient
    OpSpec("one_hot", lambda i: ta.nn.functional.one_hot(i, 6), lambda i: (i[..., None] == np.arange(6)) * 1,
           [Arg((3, 4), 0, 6, kind="int")], out_dtype=lambda d: ta.int64, differentiable=False),
    OpSpec("one_hot", lambda i: ta.nn.functional.one_hot(i), lambda i: (i[:, None] == np.arange(i.max() + 1)) * 1,
           [Arg((9,), 0, 4, kind="int")], out_dtype=lambda d: ta.int64, differentiable=False,
           id="one_hot_inferred_classes"),
]
