"""Op-spec rows for the shape family (tinyamp/ops/shape.py) and indexing (tinyamp/ops/indexing.py)."""

from __future__ import annotations

import numpy as np

import tinyamp as ta
from tests.support.op_specs import Arg, OpSpec

# Fixed integer keys (closed over by the rows): repeats make the scatter-add matter.
REPEATS = np.array([2, 0, 2, 2, 1])
ROWS, COLS = np.array([[0, 2], [1, 1]]), np.array([[3, 3], [0, 1]])


def _split_ref(x: np.ndarray, sizes: list, axis: int) -> tuple:
    edges = np.cumsum([0] + sizes)
    return tuple(np.take(x, np.arange(a, b), axis=axis) for a, b in zip(edges[:-1], edges[1:]))


def _pad_ref(x: np.ndarray, widths: list, mode: str, value: float = 0.0) -> np.ndarray:
    """np.pad with PyTorch's names; negative constant widths crop first."""
    crop = tuple(slice(max(-b, 0), n - max(-a, 0)) for n, (b, a) in zip(x.shape, widths))
    positive = [(max(b, 0), max(a, 0)) for b, a in widths]
    if mode == "constant":
        return np.pad(x[crop], positive, mode="constant", constant_values=value)
    return np.pad(x, widths, mode={"reflect": "reflect", "replicate": "edge", "circular": "wrap"}[mode])


SPECS = [
    OpSpec("reshape", lambda x: x.reshape(2, 6), lambda x: x.reshape(2, 6), [Arg((3, 4))]),
    OpSpec("view", lambda x: x.view(-1), lambda x: x.reshape(-1), [Arg((3, 4))]),
    OpSpec("flatten", lambda x: ta.flatten(x, 1), lambda x: x.reshape(2, 12), [Arg((2, 3, 4))]),
    OpSpec("flatten", lambda x: x.flatten(0, 1), lambda x: x.reshape(6, 4), [Arg((2, 3, 4))], id="flatten_0_1"),
    OpSpec("squeeze", ta.squeeze, lambda x: x.reshape(3, 4), [Arg((3, 1, 4, 1))]),
    OpSpec("squeeze", lambda x: x.squeeze(-1), lambda x: x.reshape(3, 1, 4), [Arg((3, 1, 4, 1))], id="squeeze_dim"),
    OpSpec("squeeze", lambda x: ta.squeeze(x, (0, 1)), lambda x: x.reshape(3, 4), [Arg((3, 1, 4))],
           id="squeeze_keeps_non_unit"),
    OpSpec("unsqueeze", lambda x: x.unsqueeze(1), lambda x: x[:, None], [Arg((3, 4))]),
    OpSpec("unsqueeze", lambda x: ta.unsqueeze(x, -1), lambda x: x[..., None], [Arg((3, 4))], id="unsqueeze_last"),
    OpSpec("permute", lambda x: x.permute(2, 0, 1), lambda x: x.transpose(2, 0, 1), [Arg((2, 3, 4))]),
    OpSpec("transpose", lambda x: x.transpose(0, 2), lambda x: x.swapaxes(0, 2), [Arg((2, 3, 4))]),
    OpSpec("cat", lambda a, b: ta.cat([a, b]), lambda a, b: np.concatenate([a, b]), [Arg((2, 3)), Arg((4, 3))]),
    OpSpec("cat", lambda a, b, c: ta.cat((a, b, c), dim=-1), lambda a, b, c: np.concatenate([a, b, c], -1),
           [Arg((2, 3)), Arg((2, 1)), Arg((2, 2))], id="cat_last_three"),
    OpSpec("stack", lambda a, b: ta.stack([a, b], 1), lambda a, b: np.stack([a, b], 1), [Arg((2, 3)), Arg((2, 3))]),
    OpSpec("split", lambda x: ta.split(x, [1, 3], dim=1), lambda x: _split_ref(x, [1, 3], 1), [Arg((2, 4, 3))]),
    OpSpec("split", lambda x: x.split(2), lambda x: _split_ref(x, [2, 2, 1], 0), [Arg((5, 2))], id="split_int"),
    # Only the middle piece is used: the engine zero-fills the others' gradients.
    OpSpec("split", lambda x: ta.split(x, 2)[1] * 3.0, lambda x: x[2:4] * 3.0, [Arg((5, 2))], id="split_unused"),
    OpSpec("chunk", lambda x: x.chunk(3, -1), lambda x: _split_ref(x, [3, 3, 1], 1), [Arg((2, 7))]),
    OpSpec("unbind", lambda x: ta.unbind(x, 1), lambda x: tuple(x[:, i] for i in range(3)), [Arg((2, 3))]),
    OpSpec("narrow", lambda x: x.narrow(1, 1, 2), lambda x: x[:, 1:3], [Arg((2, 4))]),
    OpSpec("pad", lambda x: ta.pad(x, (1, 2)), lambda x: _pad_ref(x, [(0, 0), (1, 2)], "constant"), [Arg((2, 3))]),
    OpSpec("pad", lambda x: ta.pad(x, (2, -1, -1, 1), value=0.5),
           lambda x: _pad_ref(x, [(0, 0), (-1, 1), (2, -1)], "constant", 0.5), [Arg((2, 3, 4))], id="pad_crop"),
    OpSpec("pad", lambda x: ta.pad(x, (2, 1, 1, 2), mode="reflect"),
           lambda x: _pad_ref(x, [(0, 0), (1, 2), (2, 1)], "reflect"), [Arg((2, 3, 4))], id="pad_reflect"),
    OpSpec("pad", lambda x: ta.pad(x, (3, 1), mode="replicate"),
           lambda x: _pad_ref(x, [(0, 0), (3, 1)], "replicate"), [Arg((2, 3))], id="pad_replicate"),
    OpSpec("pad", lambda x: ta.pad(x, (1, 2, 2, 0), mode="circular"),
           lambda x: _pad_ref(x, [(2, 0), (1, 2)], "circular"), [Arg((3, 4))], id="pad_circular"),
    # negative circular widths crop first and wrap what is left (as PyTorch)
    OpSpec("pad", lambda x: ta.pad(x, (-1, 2, 2, -1), mode="circular"),
           lambda x: np.pad(x[:-1, 1:], [(2, 0), (0, 2)], mode="wrap"), [Arg((3, 4))], id="pad_circular_crop"),
    # getitem (tinyamp/ops/indexing.py)
    OpSpec("getitem", lambda x: x[1], lambda x: x[1], [Arg((3, 4))]),
    OpSpec("getitem", lambda x: x[::-2, 1:-1, ::2], lambda x: x[::-2, 1:-1, ::2], [Arg((5, 4, 3))], id="getitem_slices"),
    OpSpec("getitem", lambda x: x[None, ..., -1], lambda x: x[None, ..., -1], [Arg((2, 3, 4))],
           id="getitem_none_ellipsis"),
    OpSpec("getitem", lambda x: x[REPEATS], lambda x: x[REPEATS], [Arg((3, 4))], id="getitem_repeats"),
    OpSpec("getitem", lambda x: x[:, [3, 0, 3]], lambda x: x[:, [3, 0, 3]], [Arg((2, 4))], id="getitem_list"),
    OpSpec("getitem", lambda x: x[ROWS, 1:, COLS], lambda x: x[ROWS, 1:, COLS], [Arg((3, 3, 4))],
           id="getitem_mixed_advanced"),
    OpSpec("getitem", lambda x, i: x[:, i], lambda x, i: x[:, i], [Arg((2, 3)), Arg((2, 4), 0, 3, kind="int")],
           id="getitem_tensor_index"),
    OpSpec("getitem", lambda x, m: x[m], lambda x, m: x[m], [Arg((3, 4)), Arg((3, 4), kind="bool")],
           id="getitem_mask"),
    OpSpec("index_select", lambda x: ta.index_select(x, 1, np.array([2, 2, 0])),
           lambda x: x[:, [2, 2, 0]], [Arg((2, 3))]),
    # compositions of reshape/broadcast/permute/where
    OpSpec("repeat", lambda x: x.repeat(2, 1, 3), lambda x: np.tile(x, (2, 1, 3)), [Arg((2, 3))]),
    OpSpec("t", lambda x: x.t(), lambda x: x.T, [Arg((2, 3))]),
    OpSpec("masked_fill", lambda x, m: x.masked_fill(m, -0.5), lambda x, m: np.where(m, -0.5, x),
           [Arg((3, 4)), Arg((4,), kind="bool")]),
    # sorting.py: draws have no ties; values gathered with getitem
    OpSpec("argsort", lambda x: ta.argsort(x, dim=0, descending=True), lambda x: np.argsort(-x, axis=0),
           [Arg((4, 3))], out_dtype=lambda d: ta.int64, differentiable=False),
    OpSpec("sort", lambda x: ta.sort(x).values, lambda x: np.sort(x, -1), [Arg((3, 5))]),
    OpSpec("topk", lambda x: x.topk(2, dim=1).values, lambda x: -np.sort(-x, 1)[:, :2], [Arg((3, 5))]),
    OpSpec("topk", lambda x: ta.topk(x, 3, dim=0, largest=False).indices, lambda x: np.argsort(x, 0)[:3],
           [Arg((4, 2))], out_dtype=lambda d: ta.int64, differentiable=False, id="topk_smallest_indices"),
]
