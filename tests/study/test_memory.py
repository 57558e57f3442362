"""Memory accounting (tinyamp/study/memory.py): saved-for-backward bytes on hand-built graphs
(leaf parameters excluded, shared arrays and views counted once, per dtype, user
Functions, freed graphs) and the model / gradient / optimizer-state split.
"""

from __future__ import annotations

import numpy as np
import pytest

import tinyamp as ta
from tinyamp import memory

F32, F16 = 4, 2  # bytes per element


def _param(*shape: int, seed: int = 0) -> ta.Tensor:
    return ta.tensor(np.random.default_rng(seed).standard_normal(shape), dtype=ta.float32, requires_grad=True)


def _input(*shape: int, seed: int = 7) -> ta.Tensor:
    return ta.tensor(np.random.default_rng(seed).standard_normal(shape), dtype=ta.float32)


def test_relu_of_a_computed_tensor_saves_only_its_output() -> None:
    w = _param(4, 5)
    h = w * 2.0            # mul saves its inputs: w (a leaf parameter, excluded) and the 0-d scalar
    y = ta.relu(h)         # relu saves its output only
    saved = memory.saved_tensor_bytes(y)
    assert saved["by_op"]["relu"] == 4 * 5 * F32
    assert saved["by_op"].get("mul", 0) == 1 * F32  # the float32 scalar 2.0, not w
    assert saved["total"] == 4 * 5 * F32 + F32
    assert saved["by_dtype"] == {"float32": 4 * 5 * F32 + F32}


def test_leaf_parameters_are_excluded_but_inputs_are_counted() -> None:
    x, w = _input(8, 6), _param(5, 6)
    y = ta.linear(x, w)    # saves x (the batch: counted) and w (the model: not counted)
    saved = memory.saved_tensor_bytes(y)
    assert saved["total"] == 8 * 6 * F32
    assert saved["arrays"] == 1


def test_autocast_copies_of_parameters_are_counted_in_float16() -> None:
    x, w = _input(8, 6), _param(5, 6)
    with ta.amp.autocast():
        y = ta.linear(x, w)
    saved = memory.saved_tensor_bytes(y)
    # Whatever linear keeps, it keeps in float16: the cast of x, and the cast of w
    # if it keeps one (that copy exists only for the step, so it is an activation).
    kept = {tuple(t.shape): t.dtype for _array, t in y.grad_fn.saved_items()}
    assert set(kept.values()) == {ta.float16}
    expected = sum(int(np.prod(shape)) * F16 for shape in kept)
    assert saved["by_dtype"] == {"float16": expected}
    assert (8, 6) in kept  # the batch, needed for dW


def test_an_array_saved_twice_is_counted_once() -> None:
    w = _param(3, 4)
    a = ta.relu(w * 1.0)   # relu saves a
    b = a * a              # mul saves (a, a): the same array again
    c = ta.exp(b)          # exp saves its output
    saved = memory.saved_tensor_bytes(c)
    assert saved["total"] == 3 * 4 * F32 * 2 + F32   # a and c; the scalar 1.0
    assert saved["arrays"] == 3


def test_a_view_is_charged_to_its_base_once() -> None:
    w, v = _param(2, 6), _param(3, 5)
    a = ta.relu(w * 1.0)                  # relu saves a (2 x 6)
    view = a.reshape(3, 4)                # a view of a's array
    assert view.array.base is not None
    y = ta.matmul(view.reshape(3, 4).T, v)  # matmul saves a transposed view of a, and v (a leaf)
    saved = memory.saved_tensor_bytes(y)
    assert saved["total"] == 2 * 6 * F32 + F32  # a once, plus the scalar 1.0


def test_two_outputs_share_one_walk() -> None:
    w = _param(4, 4)
    shared = ta.relu(w * 1.0)
    y1, y2 = ta.exp(shared), ta.tanh(shared)
    both = memory.saved_tensor_bytes(y1, [y2])
    assert both["total"] == 3 * 16 * F32 + F32  # shared, exp's output, tanh's output, the scalar
    assert both["nodes"] == 4                   # mul, relu, exp, tanh


def test_float16_and_float32_are_reported_separately() -> None:
    w = _param(4, 8)
    h = ta.relu(w.half())         # the cast of a parameter saves nothing; relu saves float16
    y = ta.exp(h.float())         # exp saves its float32 output
    saved = memory.saved_tensor_bytes(y)
    assert saved["by_dtype"] == {"float16": 32 * F16, "float32": 32 * F32}


def test_custom_function_saved_tensors_are_counted() -> None:
    class Square(ta.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, gy):
            (x,) = ctx.saved_tensors
            return 2 * x * gy

    w = _param(5)
    h = w * 3.0
    y = Square.apply(h)
    saved = memory.saved_tensor_bytes(y)
    assert saved["total"] == 5 * F32 + F32  # h, plus mul's scalar 3.0


def test_arrays_an_op_keeps_as_attributes_are_counted() -> None:
    w = _param(2, 3, 4, 4)
    y = ta.nn.functional.max_pool2d(w * 1.0, 2)   # keeps int64 argmax indices, one per output
    saved = memory.saved_tensor_bytes(y)
    assert saved["by_dtype"]["int64"] == 2 * 3 * 2 * 2 * 8
    assert saved["by_op"]["max_pool2d"] == 2 * 3 * 2 * 2 * 8
    ta.manual_seed(0)
    z = ta.nn.functional.dropout(w * 1.0, 0.5)     # keeps a boolean mask of the input's shape
    assert memory.saved_tensor_bytes(z)["by_dtype"]["bool"] == 2 * 3 * 4 * 4


def test_a_leaf_or_a_constant_saves_nothing() -> None:
    assert memory.saved_tensor_bytes(_input(3, 3))["total"] == 0
    assert memory.saved_tensor_bytes(_param(3, 3))["total"] == 0
    with ta.no_grad():
        y = ta.relu(_param(3, 3) * 2.0)
    assert memory.saved_tensor_bytes(y) == {"total": 0, "by_dtype": {}, "by_op": {}, "arrays": 0, "nodes": 0}


def test_a_freed_graph_is_an_error_not_zero() -> None:
    y = ta.relu(_param(3, 3) * 2.0).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="already freed by backward"):
        memory.saved_tensor_bytes(y)


def test_non_tensor_outputs_are_refused() -> None:
    with pytest.raises(TypeError, match="expected Tensors"):
        memory.saved_tensor_bytes(np.zeros(3))


def _step(model: "ta.nn.Module", opt: "ta.optim.Optimizer", x: ta.Tensor, y: ta.Tensor, half: bool) -> dict:
    opt.zero_grad()
    out = model(x.half() if half else x).float()
    loss = ta.nn.functional.cross_entropy(out, y)
    activations = memory.saved_tensor_bytes(loss)
    loss.backward()
    opt.step()
    return memory.memory_split(model, opt, activations=activations)


def test_memory_split_float32_sgd_with_momentum() -> None:
    model = ta.nn.Linear(6, 3)
    opt = ta.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = _input(4, 6), ta.tensor(np.array([0, 1, 2, 0]))
    split = _step(model, opt, x, y, half=False)
    n = 6 * 3 + 3
    assert split["model"] == n * F32
    assert split["gradients"] == n * F32
    # Momentum buffers (float32, like the weights) and two 0-d float32 step counters.
    assert split["optimizer_state"] == n * F32 + 2 * F32
    assert split["activations"] > 0
    assert split["total"] == split["model"] + split["gradients"] + split["optimizer_state"] + split["activations"]
    assert split["mb"]["model"] == pytest.approx(n * F32 / 1e6, abs=1e-3)
    assert "gpu_pool" not in split


def test_memory_split_o2_counts_float32_masters_as_optimizer_state() -> None:
    model = ta.nn.Linear(6, 3).half()
    opt = ta.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, master_weights=True)
    x, y = _input(4, 6), ta.tensor(np.array([0, 1, 2, 0]))
    split = _step(model, opt, x, y, half=True)
    n = 6 * 3 + 3
    assert split["model"] == n * F16
    assert split["gradients"] == n * F16          # the float16 gradients (master grads are consumed by step)
    # float32 masters, float32 momentum buffers (they follow the master) and two step counters.
    assert split["optimizer_state"] == 2 * n * F32 + 2 * F32


def test_memory_split_measures_the_loss_graph_when_given() -> None:
    model = ta.nn.Sequential(ta.nn.Linear(6, 5), ta.nn.ReLU(), ta.nn.Linear(5, 2))
    x = _input(4, 6)
    loss = model(x).sum()
    split = memory.memory_split(model, None, loss)
    assert split["activations"] == memory.saved_tensor_bytes(loss)["total"]
    assert split["gradients"] == 0 and split["optimizer_state"] == 0
    assert split["model"] == (6 * 5 + 5 + 5 * 2 + 2) * F32


def test_format_helpers() -> None:
    assert memory.format_bytes(563e6) == "563.00 MB"
    assert memory.format_bytes(2048) == "2.0 kB"
    assert memory.format_bytes(12) == "12 B"
    model = ta.nn.Linear(2, 2)
    text = memory.format_split(memory.memory_split(model))
    assert "activations saved for backward" in text and "total" in text


def test_the_optimizer_state_line_names_master_weights_only_when_there_are_some() -> None:
    x, y = _input(4, 6), ta.tensor(np.array([0, 1, 2, 0]))
    model = ta.nn.Linear(6, 3)
    plain = _step(model, ta.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), x, y, half=False)
    assert plain["master_weights"] == 0
    assert "master" not in memory.format_split(plain)          # O1 / float32: no master weights to name
    model16 = ta.nn.Linear(6, 3).half()
    opt = ta.optim.SGD(model16.parameters(), lr=0.1, momentum=0.9, master_weights=True)
    o2 = _step(model16, opt, x, y, half=True)
    assert o2["master_weights"] == (6 * 3 + 3) * F32
    assert "optimizer state (float32 master weights 84 B)" in memory.format_split(o2)
