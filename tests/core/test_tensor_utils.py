"""Small PyTorch names real training code uses: ``Tensor.normal_``/``uniform_``/``type_as``,
``ta.is_tensor``, ``ta._assert`` and the generators' state (``ta.get_rng_state``, ``ta.cuda``'s).

Messages and result dtypes are PyTorch 2.13.0's (read once with it); the random
streams themselves differ from PyTorch's (README, "Differences from PyTorch"), so
samples are checked for their distribution and for replaying after a state restore.
"""

from __future__ import annotations

import numpy as np
import pytest

import tinyamp as ta
from tinyamp import nn


@pytest.mark.parametrize("dtype", [ta.float32, ta.float16, ta.bfloat16, ta.float64])
def test_normal_fills_in_place_with_the_asked_mean_and_std(device: str, dtype) -> None:
    x = ta.zeros(20000, dtype=dtype, device=device)
    version = x._version[0]
    assert x.normal_(2.0, 0.5) is x
    assert x.dtype == dtype and x._version[0] == version + 1
    values = x.float().numpy()
    assert abs(values.mean() - 2.0) < 0.02 and abs(values.std() - 0.5) < 0.02


def test_uniform_fills_from_to() -> None:
    x = ta.empty(10000).uniform_(-3, 5)
    v = x.numpy()
    assert v.min() >= -3 and v.max() < 5 and abs(v.mean() - 1.0) < 0.1
    assert ta.empty(3).uniform_(**{"from": 2, "to": 3}).numpy().min() >= 2


def test_normal_follows_the_generator_and_the_seed() -> None:
    ta.manual_seed(7)
    a = ta.empty(5).normal_().numpy()
    ta.manual_seed(7)
    np.testing.assert_array_equal(ta.empty(5).normal_().numpy(), a)
    g = ta.Generator().manual_seed(7)
    np.testing.assert_array_equal(ta.empty(5).normal_(generator=g).numpy(), a)


def test_normal_refuses_what_pytorch_refuses() -> None:
    # torch 2.13.0: "a leaf Variable that requires grad is being used in an in-place operation."
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        ta.zeros(3, requires_grad=True).normal_()
    with ta.no_grad():  # the usual way init code writes a parameter
        ta.zeros(3, requires_grad=True).normal_()
    # torch 2.13.0: NotImplementedError "normal_kernel_cpu" not implemented for 'Long'
    with pytest.raises(NotImplementedError, match="normal_.*int64"):
        ta.zeros(3, dtype=ta.int64).normal_()
    # torch 2.13.0: RuntimeError normal expects std >= 0.0, but found std -1
    with pytest.raises(RuntimeError, match="normal expects std >= 0.0, but found std -1"):
        ta.zeros(2).normal_(0, -1)


def test_type_as_takes_the_other_tensors_dtype() -> None:
    h = ta.zeros(1, dtype=ta.float16)
    x = ta.ones(2, requires_grad=True)
    y = x.type_as(h)
    assert y.dtype == ta.float16  # torch 2.13.0: torch.float16
    y.float().sum().backward()  # recorded, as .to(dtype) is
    np.testing.assert_array_equal(x.grad.numpy(), [1, 1])
    assert x.type_as(x) is x
    # torch 2.13.0: type_as(): argument 'other' (position 1) must be Tensor, not int
    with pytest.raises(TypeError, match=r"type_as\(\): argument 'other' \(position 1\) must be Tensor, not int"):
        x.type_as(3)


def test_is_tensor_and_assert() -> None:
    assert ta.is_tensor(ta.zeros(1)) and ta.is_tensor(nn.Parameter(ta.zeros(1)))  # torch 2.13.0: True True
    assert not ta.is_tensor(3) and not ta.is_tensor(np.zeros(1))
    ta._assert(True, "never")
    ta._assert(ta.tensor(True), "never")
    with pytest.raises(AssertionError, match="msg here"):
        ta._assert(False, "msg here")
    with pytest.raises(AssertionError, match="x2"):
        ta._assert(ta.tensor(False), "x2")


def test_cpu_rng_state_round_trips() -> None:
    state = ta.get_rng_state()
    assert state.dtype == ta.uint8 and state.device == ta.device("cpu") and state.ndim == 1
    first = ta.rand(4).numpy(), ta.randn(3).numpy(), ta.empty(2).normal_().numpy()
    ta.set_rng_state(state)
    again = ta.rand(4).numpy(), ta.randn(3).numpy(), ta.empty(2).normal_().numpy()
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(ta.get_rng_state().numpy(), state.numpy())  # drawing moved it on


def test_rng_state_errors_are_pytorchs() -> None:
    with pytest.raises(TypeError, match="expected a torch.ByteTensor, but got list"):
        ta.set_rng_state([1, 2])  # torch 2.13.0: TypeError expected a torch.ByteTensor, but got list
    with pytest.raises(TypeError, match="RNG state must be a torch.ByteTensor"):
        ta.set_rng_state(ta.zeros(40))  # torch 2.13.0: TypeError RNG state must be a torch.ByteTensor
    with pytest.raises(RuntimeError, match="input RNG state size to be 3"):
        ta.set_rng_state(ta.zeros(3, dtype=ta.uint8))


def test_cuda_rng_state_round_trips(cuda_backend: str) -> None:
    state = ta.cuda.get_rng_state()
    # a seed and an offset, as PyTorch's (torch 2.13.0: 16 bytes), not a copy of device memory
    assert state.dtype == ta.uint8 and state.device == ta.device("cpu") and state.shape == (16,)
    a = ta.randn(5, device="cuda").cpu().numpy()
    ta.cuda.set_rng_state(state)
    np.testing.assert_array_equal(ta.randn(5, device="cuda").cpu().numpy(), a)
    states = ta.cuda.get_rng_state_all()
    assert len(states) == ta.cuda.device_count()
    b = ta.rand(3, device="cuda").cpu().numpy()
    ta.cuda.set_rng_state_all(states)
    np.testing.assert_array_equal(ta.rand(3, device="cuda").cpu().numpy(), b)
    ta.cuda.manual_seed(5)
    c = ta.rand(3, device="cuda").cpu().numpy()
    ta.cuda.manual_seed_all(5)
    np.testing.assert_array_equal(ta.rand(3, device="cuda").cpu().numpy(), c)
    with pytest.raises(RuntimeError, match="input RNG state size"):
        ta.cuda.set_rng_state(ta.zeros(3, dtype=ta.uint8))


def test_a_state_get_rng_state_cannot_make_is_refused_and_the_generator_kept() -> None:
    # zeros(40): a PCG64 increment of 0 (always odd in a real state) made rand() return only zeros. PyTorch
    # 2.13 refuses a state its generator cannot have: RuntimeError "Invalid mt19937 state".
    ta.manual_seed(3)
    expected = ta.rand(4).numpy()
    ta.manual_seed(3)
    with pytest.raises(RuntimeError, match="Invalid PCG64 state: its increment must be odd"):
        ta.set_rng_state(ta.zeros(40, dtype=ta.uint8))
    np.testing.assert_array_equal(ta.rand(4).numpy(), expected)  # the generator is as it was
    state = ta.get_rng_state().numpy().copy()
    state[32] = 2  # has_uint32 is a flag
    with pytest.raises(RuntimeError, match="has_uint32 0 or 1"):
        ta.set_rng_state(ta.tensor(state))


@pytest.mark.parametrize("seed, initial", [(-1, 2**64 - 1), (-(2**63), 2**63), (2**64 - 1, 2**64 - 1), (7, 7),
                                           (1.5, 1)])
def test_manual_seed_takes_pytorchs_range(seed, initial: int) -> None:
    # PyTorch 2.13: manual_seed accepts -2**63 .. 2**64 - 1 (negative seeds modulo 2**64, as its initial_seed
    # shows) and truncates a float; outside the range it raises "Overflow when unpacking long long".
    ta.manual_seed(seed)
    assert ta.initial_seed() == initial
    first = ta.rand(3).numpy()
    ta.manual_seed(initial)
    np.testing.assert_array_equal(ta.rand(3).numpy(), first)  # the same generator as its modulo-2**64 seed
    ta.manual_seed(0)


def test_a_seed_outside_pytorchs_range_is_refused_and_changes_nothing() -> None:
    ta.manual_seed(11)
    for seed in (2**64, -(2**63) - 1):
        with pytest.raises(ValueError, match=r"manual_seed: seed .* is outside \[-2\*\*63, 2\*\*64 - 1\]"):
            ta.manual_seed(seed)
    assert ta.initial_seed() == 11
    ta.rand(2, device="cpu")  # the default generators still work
    ta.manual_seed(0)
