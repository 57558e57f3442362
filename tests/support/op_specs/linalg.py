"""Op-spec rows for the contractions (tinyamp/ops/linalg.py): matmul, mm, bmm, linear."""

from __future__ import annotations

import numpy as np

import tinyamp as ta
from tests.support.op_specs import Arg, OpSpec


def _linear_ref(x: np.ndarray, w: np.ndarray, b: "np.ndarray | None" = None) -> np.ndarray:
    y = np.einsum("...i,oi->...o", x, w)
    return y if b is None else y + b


SPECS = [
    OpSpec("matmul", ta.matmul, np.matmul, [Arg((3, 4)), Arg((4, 2))]),
    OpSpec("matmul", lambda a, b: a @ b, lambda a, b: np.dot(a, b), [Arg((5,)), Arg((5,))], id="matmul_dot"),
    OpSpec("matmul", ta.matmul, np.matmul, [Arg((4,)), Arg((4, 3))], id="matmul_vec_mat"),
    OpSpec("matmul", ta.matmul, np.matmul, [Arg((3, 4)), Arg((4,))], id="matmul_mat_vec"),
    OpSpec("matmul", ta.matmul, np.matmul, [Arg((4,)), Arg((2, 4, 3))], id="matmul_vec_batched"),
    OpSpec("matmul", ta.matmul, np.matmul, [Arg((2, 3, 4)), Arg((4,))], id="matmul_batched_vec"),
    # Broadcast batch dims: the gradients are summed back to each operand's batch shape.
    OpSpec("matmul", ta.matmul, np.matmul, [Arg((2, 1, 3, 4)), Arg((3, 4, 2))], id="matmul_broadcast"),
    # A batch against one matrix: the batch folds into M (forward) and the
    # weight gradient is one GEMM over all rows.
    OpSpec("matmul", ta.matmul, np.matmul, [Arg((2, 3, 4)), Arg((4, 5))], id="matmul_batch_matrix"),
    OpSpec("matmul", ta.matmul, np.matmul, [Arg((3, 4)), Arg((2, 4, 2))], id="matmul_matrix_batch"),
    OpSpec("matmul", lambda a, b: a @ b.mT, lambda a, b: a @ b.swapaxes(-1, -2), [Arg((2, 3, 4)), Arg((5, 4))],
           id="matmul_transposed_view"),
    OpSpec("mm", ta.mm, np.matmul, [Arg((2, 3)), Arg((3, 4))]),
    OpSpec("bmm", ta.bmm, np.matmul, [Arg((2, 3, 4)), Arg((2, 4, 3))]),
    OpSpec("linear", ta.linear, _linear_ref, [Arg((3, 4)), Arg((5, 4)), Arg((5,))]),
    OpSpec("linear", ta.linear, _linear_ref, [Arg((3, 4)), Arg((2, 4))], id="linear_no_bias"),
    OpSpec("linear", ta.linear, _linear_ref, [Arg((2, 3, 4)), Arg((5, 4)), Arg((5,))], id="linear_3d"),
    OpSpec("linear", ta.linear, _linear_ref, [Arg((4,)), Arg((3, 4)), Arg((3,))], id="linear_1d"),
    # Only the weight needs a gradient (the first layer of a network).
    OpSpec("linear", ta.linear, _linear_ref, [Arg((3, 4), grad=False), Arg((2, 4)), Arg((2,))],
           id="linear_weight_only"),
]
