"""Every way a user changes a weight is seen by the next autocast forward (issue 19, class 2).

The weight-cast cache serves the forward of a weight's Cast node. It is keyed on
the weight's identity, version and array, and the outermost autocast region's
exit empties it (PyTorch's rule), so a write that bumps no version (a raw array
write) is seen by the next region too. Each test runs a forward under autocast
(filling the cache), changes the weight by one route, and checks that the next
forward multiplies a fresh conversion of the weight as it is now: linear's
output equals, bit for bit, the 16-bit product of fresh conversions. On
5836c50 the routes that bump no version (``p.data[:] = ...``, ``p.data *= ...``,
``p.data = ...``, a write into ``p.detach().numpy()``) failed.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pytest

import tinyamp as ta

f16, bf16 = ta.float16, ta.bfloat16


def _setup(device: str) -> tuple:
    ta.manual_seed(0)
    layer = ta.nn.Linear(6, 4).to(device)
    x = ta.tensor(np.random.default_rng(0).standard_normal((3, 6)).astype(np.float32), device=device)
    return layer, x


def _forward(layer: ta.nn.Linear, x: ta.Tensor, dtype: object) -> ta.Tensor:
    with ta.amp.autocast(dtype=dtype):
        return layer(x)


def _fresh(layer: ta.nn.Linear, x: ta.Tensor, dtype: object) -> np.ndarray:
    """linear of fresh ``dtype`` conversions of the input, weight and bias as they are now, on the host."""
    with ta.no_grad():
        w, b = layer.weight.detach().to(dtype), layer.bias.detach().to(dtype)
        return ta.linear(x.to(dtype), w, b).cpu().numpy()


def _step(layer: ta.nn.Linear) -> None:
    opt = ta.optim.SGD(layer.parameters(), lr=0.5)
    for p in layer.parameters():
        p.grad = ta.ones_like(p)
    opt.step()


def _load(layer: ta.nn.Linear) -> None:
    state = {k: v.detach().cpu() * 0.5 for k, v in layer.state_dict().items()}
    layer.load_state_dict(state)


def _data_setitem(layer: ta.nn.Linear) -> None:
    layer.weight.data[:] = 0.25


def _data_imul(layer: ta.nn.Linear) -> None:
    layer.weight.data *= 0.5


def _data_assign(layer: ta.nn.Linear) -> None:
    layer.weight.data = layer.weight.data * 0.5


def _numpy_write(layer: ta.nn.Linear) -> None:
    layer.weight.detach().numpy()[:] = 0.25


def _inplace_no_grad(layer: ta.nn.Linear) -> None:
    with ta.no_grad():
        layer.weight.mul_(0.5)


ROUTES: dict[str, Callable] = {"data[:]=": _data_setitem, "data*=": _data_imul, "data=": _data_assign,
                               "numpy-write": _numpy_write, "inplace-no-grad": _inplace_no_grad,
                               "optimizer-step": _step, "load_state_dict": _load}
# Tensor.numpy() of a CUDA tensor is refused, as in PyTorch: that route is the CPU's.
CUDA_ROUTES = [name for name in ROUTES if name != "numpy-write"]


def _check_route(device: str, route: Callable, dtype: object) -> None:
    layer, x = _setup(device)
    first = _forward(layer, x, dtype).detach().cpu().numpy()
    route(layer)
    second = _forward(layer, x, dtype).detach().cpu().numpy()
    expected = _fresh(layer, x, dtype)
    assert second.tobytes() == expected.tobytes()
    assert second.tobytes() != first.tobytes()  # the route did change the weight


@pytest.mark.parametrize("dtype", [f16, bf16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("route", list(ROUTES))
def test_a_changed_weight_is_seen_by_the_next_region_on_the_cpu(route: str, dtype: object) -> None:
    _check_route("cpu", ROUTES[route], dtype)


@pytest.mark.parametrize("route", CUDA_ROUTES)
def test_a_changed_weight_is_seen_by_the_next_region_on_cuda(cuda_backend: str, route: str) -> None:
    _check_route(cuda_backend, ROUTES[route], f16)


@pytest.mark.parametrize("route", list(ROUTES))
def test_a_write_after_an_optimizer_step_is_seen_on_the_cpu(route: str) -> None:
    layer, x = _setup("cpu")
    _forward(layer, x, f16)
    _step(layer)
    _forward(layer, x, f16)
    ROUTES[route](layer)
    assert _forward(layer, x, f16).detach().numpy().tobytes() == _fresh(layer, x, f16).tobytes()


@pytest.mark.parametrize("route", ["inplace-no-grad", "optimizer-step", "load_state_dict"])
def test_a_versioned_write_inside_one_region_is_seen(device: str, route: str) -> None:
    layer, x = _setup(device)
    with ta.amp.autocast():
        first = layer(x).detach().cpu().numpy()
        ROUTES[route](layer)
        second = layer(x).detach().cpu().numpy()
    assert second.tobytes() == _fresh(layer, x, f16).tobytes() and second.tobytes() != first.tobytes()
