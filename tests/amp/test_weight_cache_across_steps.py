"""The weight-cast cache across CPU optimizer steps (tinyamp/amp/casting.py).

A step changes each float32 weight; the next forward's Cast nodes must give
linear the new weight's rounding. Each test compares linear's output with the
same product of fresh conversions of the weight and bias (bit for bit), so a
copy left stale fails here: SGD's variants, an update past the 16-bit range
(inf), bfloat16, a step the scaler skips, a weight changed in place by the
user, a replaced weight array, a step off the numba path.
"""

from __future__ import annotations

import numpy as np
import pytest

import tinyamp as ta

f16, bf16, f32 = ta.float16, ta.bfloat16, ta.float32

@pytest.fixture(autouse=True)
def _empty_cache() -> None:
    ta.amp.clear_autocast_cache()
    yield
    ta.amp.clear_autocast_cache()


_INPUTS: dict = {}  # id(output) -> the input _forward gave the layer


def _forward(layer: ta.nn.Linear, x: ta.Tensor, dtype: object) -> ta.Tensor:
    with ta.amp.autocast(dtype=dtype):
        out = layer(x)
    _INPUTS[id(out)] = x
    return out


def _assert_copies_are_the_weights(out: ta.Tensor, layer: ta.nn.Linear, dtype: object) -> None:
    """What linear multiplied: the weight and bias as ``dtype`` now (its output is that product, bit for bit)."""
    with np.errstate(over="ignore"):  # a weight beyond the format: inf, as the cast rounds it
        w, b = (ta.tensor(p.array.astype(dtype)) for p in (layer.weight, layer.bias))
    x = _INPUTS[id(out)]
    with ta.no_grad():
        expected = ta.linear(x.to(dtype), w, b)
    assert out.array.tobytes() == expected.array.tobytes()


def _layer(weight: np.ndarray) -> ta.nn.Linear:
    layer = ta.nn.Linear(weight.shape[1], weight.shape[0])
    with ta.no_grad():
        layer.weight.array[...] = weight
    return layer


def _set_grads(layer: ta.nn.Linear, grad: np.ndarray) -> None:
    layer.weight.grad = ta.tensor(grad.astype(f32))
    layer.bias.grad = ta.tensor(np.full(layer.bias.shape, 0.25, f32))


@pytest.mark.parametrize("dtype", [f16, bf16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("hyper", [dict(momentum=0.9), dict(momentum=0.9, nesterov=True, weight_decay=0.01),
                                   dict(maximize=True), dict(momentum=0.5, dampening=0.1)],
                         ids=["momentum", "nesterov-decay", "maximize", "dampening"])
def test_the_forward_after_each_step_multiplies_the_new_weights_rounding(dtype: object, hyper: dict) -> None:
    rng = np.random.default_rng(0)
    layer = _layer(rng.standard_normal((5, 7)).astype(f32))
    x = ta.tensor(rng.standard_normal((3, 7)).astype(f32))
    opt = ta.optim.SGD(layer.parameters(), lr=0.1, **hyper)
    _forward(layer, x, dtype)  # converts both weights: two misses
    for step in range(3):
        _set_grads(layer, rng.standard_normal((5, 7)))
        opt.step()
        out = _forward(layer, x, dtype)
        _assert_copies_are_the_weights(out, layer, dtype)
        info = ta.amp.autocast_cache_info()
        assert (info["misses"], info["hits"]) == (2 * (step + 2), 0)  # both copies stale after each step


@pytest.mark.parametrize("dtype, big, push", [(f16, 65000.0, -1000.0), (bf16, 3.3e38, -1e37)],
                         ids=["float16", "bfloat16"])
def test_a_weight_the_update_takes_past_the_format_rounds_to_inf_in_its_copy(dtype: object, big: float,
                                                                              push: float) -> None:
    weight = np.full((2, 3), 0.5, f32)
    weight[0, 1], weight[1, 2] = big, -big
    layer = _layer(weight)
    x = ta.tensor(np.ones((1, 3), f32))
    opt = ta.optim.SGD(layer.parameters(), lr=1.0)
    _forward(layer, x, dtype)
    grad = np.zeros((2, 3), f32)
    grad[0, 1], grad[1, 2] = push, -push
    _set_grads(layer, grad)
    opt.step()
    assert np.isfinite(layer.weight.array).all()  # finite in float32, beyond the 16-bit format
    out = _forward(layer, x, dtype)
    _assert_copies_are_the_weights(out, layer, dtype)  # the product of a copy holding +-inf


@pytest.mark.parametrize("dtype", [f16, bf16], ids=["float16", "bfloat16"])
def test_a_step_the_scaler_skips_leaves_the_copies_equal_to_the_weights(dtype: object) -> None:
    rng = np.random.default_rng(1)
    layer = _layer(rng.standard_normal((4, 6)).astype(f32))
    x = ta.tensor(rng.standard_normal((2, 6)).astype(f32))
    opt = ta.optim.SGD(layer.parameters(), lr=0.1, momentum=0.9)
    scaler = ta.amp.GradScaler("cpu", auto_disable_bf16=False)  # keep it: the skip is what is tested
    scaler.scale(_forward(layer, x, dtype).float().sum()).backward()
    before = layer.weight.array.copy()
    layer.weight.grad.array[2, 3] = np.inf
    scaler.step(opt)  # an inf: the step is skipped
    scaler.update()
    assert layer.weight.array.tobytes() == before.tobytes()
    out = _forward(layer, x, dtype)
    _assert_copies_are_the_weights(out, layer, dtype)


@pytest.mark.parametrize("dtype", [f16, bf16], ids=["float16", "bfloat16"])
def test_a_weight_the_user_changed_before_the_step_gets_the_stepped_copy(dtype: object) -> None:
    rng = np.random.default_rng(2)
    layer = _layer(rng.standard_normal((4, 6)).astype(f32))
    x = ta.tensor(rng.standard_normal((2, 6)).astype(f32))
    opt = ta.optim.SGD(layer.parameters(), lr=0.1)
    _forward(layer, x, dtype)
    with ta.no_grad():
        layer.weight.mul_(3.0)  # in place: a new version, so the cached copy is stale before the step
    _set_grads(layer, rng.standard_normal((4, 6)))
    opt.step()
    out = _forward(layer, x, dtype)
    _assert_copies_are_the_weights(out, layer, dtype)


def test_a_replaced_weight_array_is_not_written_through_the_old_copy() -> None:
    rng = np.random.default_rng(3)
    layer = _layer(rng.standard_normal((4, 6)).astype(f32))
    x = ta.tensor(rng.standard_normal((2, 6)).astype(f32))
    opt = ta.optim.SGD(layer.parameters(), lr=0.1)
    _forward(layer, x, f16)
    layer.weight.array = rng.standard_normal((4, 6)).astype(f32)  # a new array (a load)
    _set_grads(layer, rng.standard_normal((4, 6)))
    opt.step()
    _assert_copies_are_the_weights(_forward(layer, x, f16), layer, f16)


def test_an_update_off_the_numba_path_is_seen_by_the_next_forward() -> None:
    rng = np.random.default_rng(4)
    layer = _layer(rng.standard_normal((4, 6)).astype(f32))
    x = ta.tensor(rng.standard_normal((2, 6)).astype(f32))
    opt = ta.optim.SGD(layer.parameters(), lr=0.1, momentum=0.9)
    _forward(layer, x, f16)
    _set_grads(layer, rng.standard_normal((4, 6)))
    layer.weight.grad = ta.Tensor._wrap(np.asfortranarray(layer.weight.grad.array))  # not C-contiguous: NumPy's path
    opt.step()
    _assert_copies_are_the_weights(_forward(layer, x, f16), layer, f16)
