"""Op-spec rows for layer_norm, group_norm and batch_norm (tinyamp/ops/normalization.py).

batch_norm in training mode updates its running statistics in place, so each
row's function makes fresh ones on every call (gradcheck calls it many times);
the update itself is checked against PyTorch's formula in test_ops_errors_nn.py.
"""

from __future__ import annotations

import numpy as np

import tinyamp as ta
from tests.support.op_specs import Arg, OpSpec

EPS = 1e-5
RUNNING_MEAN = np.array([0.1, -0.2, 0.3])
RUNNING_VAR = np.array([0.5, 1.5, 2.0])


def ref_layer_norm(x: np.ndarray, k: int, weight: "np.ndarray | None" = None,
                   bias: "np.ndarray | None" = None) -> np.ndarray:
    """Normalise each sample over its last k dims with the biased variance."""
    lead = x.shape[:x.ndim - k]
    rows = x.reshape(lead + (-1,))
    out = np.empty_like(rows)
    for index in np.ndindex(*lead):
        r = rows[index]
        out[index] = (r - r.mean()) / np.sqrt(((r - r.mean()) ** 2).mean() + EPS)
    out = out.reshape(x.shape)
    if weight is not None:
        out = out * weight
    return out if bias is None else out + bias


def ref_batch_norm(x: np.ndarray, weight: "np.ndarray | None" = None, bias: "np.ndarray | None" = None,
                   mean: "np.ndarray | None" = None, var: "np.ndarray | None" = None) -> np.ndarray:
    """Per channel (axis 1): batch statistics when mean/var are None, else the given ones."""
    out = np.empty_like(x)
    for c in range(x.shape[1]):
        v = x[:, c]
        m = v.mean() if mean is None else mean[c]
        s = ((v - v.mean()) ** 2).mean() if var is None else var[c]
        out[:, c] = (v - m) / np.sqrt(s + EPS)
        if weight is not None:
            out[:, c] = out[:, c] * weight[c]
        if bias is not None:
            out[:, c] = out[:, c] + bias[c]
    return out


def ref_group_norm(x: np.ndarray, groups: int, weight: "np.ndarray | None" = None,
                   bias: "np.ndarray | None" = None) -> np.ndarray:
    """Each sample's channels in ``groups`` blocks, each block normalised over its channels and positions."""
    n, c = x.shape[:2]
    out = ref_layer_norm(x.reshape(n, groups, -1), 1).reshape(x.shape)
    shape = (1, c) + (1,) * (x.ndim - 2)
    if weight is not None:
        out = out * weight.reshape(shape)
    return out if bias is None else out + bias.reshape(shape)


def _fresh_stats(x: ta.Tensor, channels: int) -> tuple:
    return (ta.zeros(channels, dtype=x.dtype, device=x.device),
            ta.ones(channels, dtype=x.dtype, device=x.device))


def _const(values: np.ndarray, like: ta.Tensor) -> ta.Tensor:
    return ta.tensor(values, dtype=like.dtype, device=like.device)


SPECS = [
    OpSpec("layer_norm", lambda x, w, b: ta.layer_norm(x, (6,), w, b),
           lambda x, w, b: ref_layer_norm(x, 1, w, b), [Arg((4, 6), -2, 2), Arg((6,), 0.5, 1.5), Arg((6,))],
           id="layer_norm_affine"),
    OpSpec("layer_norm", lambda x: ta.layer_norm(x, (3, 4)), lambda x: ref_layer_norm(x, 2),
           [Arg((2, 3, 4), -2, 2)], id="layer_norm_plain"),
    OpSpec("layer_norm", lambda x, w: ta.layer_norm(x, 5, weight=w, eps=EPS),
           lambda x, w: ref_layer_norm(x, 1, w), [Arg((3, 5), -2, 2), Arg((5,), 0.5, 1.5)],
           id="layer_norm_weight_only"),
    OpSpec("group_norm", lambda x, w, b: ta.group_norm(x, 2, w, b),
           lambda x, w, b: ref_group_norm(x, 2, w, b),
           [Arg((2, 6, 2, 3), -2, 2), Arg((6,), 0.5, 1.5), Arg((6,))], id="group_norm_affine_4d"),
    OpSpec("group_norm", lambda x: ta.group_norm(x, 3, eps=EPS), lambda x: ref_group_norm(x, 3),
           [Arg((3, 3, 4), -2, 2)], id="group_norm_plain_3d"),
    OpSpec("group_norm", lambda x, w: ta.group_norm(x, 1, w), lambda x, w: ref_group_norm(x, 1, w),
           [Arg((2, 4), -2, 2), Arg((4,), 0.5, 1.5)], id="group_norm_one_group_2d"),
    OpSpec("batch_norm", lambda x, w, b: ta.batch_norm(x, *_fresh_stats(x, 3), w, b, training=True),
           lambda x, w, b: ref_batch_norm(x, w, b), [Arg((5, 3), -2, 2), Arg((3,), 0.5, 1.5), Arg((3,))],
           id="batch_norm_train_2d"),
    OpSpec("batch_norm", lambda x, w, b: ta.batch_norm(x, *_fresh_stats(x, 3), w, b, training=True),
           lambda x, w, b: ref_batch_norm(x, w, b),
           [Arg((2, 3, 2, 3), -2, 2), Arg((3,), 0.5, 1.5), Arg((3,))], id="batch_norm_train_4d"),
    OpSpec("batch_norm", lambda x: ta.batch_norm(x, None, None, training=True),
           lambda x: ref_batch_norm(x), [Arg((4, 3, 2), -2, 2)], id="batch_norm_train_no_stats"),
    OpSpec("batch_norm",
           lambda x, w, b: ta.batch_norm(x, _const(RUNNING_MEAN, x), _const(RUNNING_VAR, x), w, b),
           lambda x, w, b: ref_batch_norm(x, w, b, RUNNING_MEAN, RUNNING_VAR),
           [Arg((2, 3, 2, 2), -2, 2), Arg((3,), 0.5, 1.5), Arg((3,))], id="batch_norm_eval"),
]
