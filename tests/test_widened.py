"""A widening kept from the pass that rounded (kernels/cpu/widened.py) gives the bits of a fresh widening.

On the CPU with numba, a Cast node's forward under autocast and a GEMM's 16-bit
result in a backward replay keep their float32 widenings, handed once to the
next widening of the same array (the LOWER op's GEMM, the weight's Cast node
backward). The comparisons run the same step with nothing kept (``narrow`` and
``round_in_place`` patched to keep nothing); there is no memo between the runs
to clear: the region's exit and the backward's end empty the store, which the
last test checks. numba is a dependency: the tests fail without it.
"""

from __future__ import annotations

import numpy as np
import pytest

import tinyamp as ta
from tinyamp.kernels import convert
from tinyamp.kernels.cpu import widened


@pytest.fixture(autouse=True)
def _numba() -> None:
    assert convert.resolve(None) == "numba" and convert.numba_default(), "these tests need numba's kernels"


def _step(dtype: object) -> tuple:
    """One AMP step of Linear(64, 48) -> ReLU -> Linear(48, 32): the loss and every gradient, as bytes.

    Every matrix has at least ``convert.SMALL`` elements (smaller ones are widened by astype, nothing kept)."""
    ta.manual_seed(0)
    model = ta.nn.Sequential(ta.nn.Linear(64, 48), ta.nn.ReLU(), ta.nn.Linear(48, 32))
    rng = np.random.default_rng(0)
    x = ta.tensor(rng.standard_normal((32, 64)).astype(np.float32))
    y = ta.tensor(rng.integers(0, 32, 32))
    with ta.amp.autocast(dtype=dtype):
        loss = ta.nn.functional.cross_entropy(model(x), y)
    (loss * 1024.0).backward()
    return (loss.detach().numpy().tobytes(),) + tuple(p.grad.numpy().tobytes() for p in model.parameters())


@pytest.mark.parametrize("dtype", [ta.float16, ta.bfloat16], ids=["float16", "bfloat16"])
def test_an_amp_step_with_kept_widenings_is_bit_identical(monkeypatch: pytest.MonkeyPatch, dtype: object) -> None:
    taken = []
    take = widened.take

    def counting_take(low: object) -> object:
        wide = take(low)
        taken.append(wide is not None)
        return wide

    monkeypatch.setattr(widened, "take", counting_take)
    kept = _step(dtype)
    # x and both weights in the forward, both weight gradients in the backward.
    assert sum(taken) == 5
    monkeypatch.setattr(widened, "narrow", lambda *args: None)
    monkeypatch.setattr(widened, "round_in_place", lambda *args: None)
    taken.clear()
    fresh = _step(dtype)
    assert not any(taken)
    assert kept == fresh


def _cast_and_write(write: object) -> tuple:
    rng = np.random.default_rng(1)
    a = ta.tensor(rng.standard_normal((4, 48)).astype(np.float16))
    w = ta.tensor(rng.standard_normal((48, 32)).astype(np.float32))  # convert.SMALL elements or more
    with ta.amp.autocast():
        w16 = w.to(ta.float16)  # a Cast under autocast: its widening is kept
        write(w16)
        inside = ta.matmul(a, w16).numpy()
    return inside, ta.matmul(a, w16).numpy()  # outside: a fresh widening of w16 as it is now


def _mul_(w16: ta.Tensor) -> None:
    with ta.no_grad():
        w16.mul_(2.0)


def _numpy_write(w16: ta.Tensor) -> None:
    w16.numpy()[0, 0] = 7.0


@pytest.mark.parametrize("write", [_mul_, _numpy_write], ids=["mul_", "numpy-write"])
def test_a_written_array_is_widened_afresh(write: object) -> None:
    inside, fresh = _cast_and_write(write)
    assert inside.tobytes() == fresh.tobytes()


def test_nothing_is_kept_after_a_region_or_a_backward() -> None:
    w = ta.tensor(np.ones((32, 32), np.float32))
    with ta.amp.autocast():
        w.to(ta.float16)  # kept, never widened
    assert not widened._KEPT
    layer = ta.nn.Linear(32, 32)
    with ta.amp.autocast():
        hidden = layer(w)
    ta.matmul(hidden, hidden).sum().backward()  # the replay keeps both GEMM results; w's gradient takes neither
    assert not widened._KEPT
