"""custom_fwd / custom_bwd for user-defined Functions, with PyTorch's meaning
(tinyamp/amp/custom_fwd.py and Function.apply).
"""

from __future__ import annotations

import numpy as np
import pytest

import tinyamp as ta

f16, bf16, f32 = ta.float16, ta.bfloat16, ta.float32


def _leaf(*shape: int, dtype: object = f32, seed: int = 0) -> ta.Tensor:
    rng = np.random.default_rng(seed)
    return ta.tensor(rng.standard_normal(shape) * 0.5, dtype=dtype, requires_grad=True)


class ScaledProduct(ta.autograd.Function):
    """y = a * b * 2 with autocast replayed in backward (records what it saw)."""

    seen: dict = {}

    @staticmethod
    @ta.amp.custom_fwd(cast_inputs=ta.float32)
    def forward(ctx, a, b):
        ScaledProduct.seen["forward"] = (a.dtype, b.dtype, ta.amp.is_autocast_enabled())
        ctx.save_for_backward(a, b)
        return a * b * 2.0

    @staticmethod
    @ta.amp.custom_bwd
    def backward(ctx, gy):
        a, b = ctx.saved_tensors
        ScaledProduct.seen["backward"] = ta.amp.is_autocast_enabled()
        return gy * b * 2.0, gy * a * 2.0


def test_custom_fwd_cast_inputs_casts_and_disables_autocast() -> None:
    a, b = _leaf(3, dtype=f16), _leaf(3, seed=1)
    with ta.amp.autocast():
        y = ScaledProduct.apply(a, b)
    assert ScaledProduct.seen["forward"] == (f32, f32, False)
    assert y.dtype == f32
    y.sum().backward()
    assert ScaledProduct.seen["backward"] is False
    assert a.grad.dtype == f16 and b.grad.dtype == f32       # each back in its own dtype
    np.testing.assert_allclose(b.grad.numpy(), 2 * a.detach().numpy().astype(np.float32))


def test_custom_fwd_cast_inputs_is_inert_outside_autocast() -> None:
    a, b = _leaf(3, dtype=f16), _leaf(3, dtype=f16, seed=1)
    y = ScaledProduct.apply(a, b)
    assert ScaledProduct.seen["forward"] == (f16, f16, False)
    assert y.dtype == f16


class RecordingMatmul(ta.autograd.Function):
    seen: dict = {}

    @staticmethod
    @ta.amp.custom_fwd
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        RecordingMatmul.seen["forward"] = (ta.amp.is_autocast_enabled(), ta.amp.get_autocast_dtype())
        return (a @ b).float()

    @staticmethod
    @ta.amp.custom_bwd()
    def backward(ctx, gy):
        a, b = ctx.saved_tensors
        RecordingMatmul.seen["backward"] = (ta.amp.is_autocast_enabled(), ta.amp.get_autocast_dtype())
        # Backward runs under autocast: matmul gives the region's dtype, and a
        # gradient must come back in its input's dtype (the engine checks).
        return (gy @ b.T).float(), (a.T @ gy).float()


@pytest.mark.parametrize("dtype", [f16, bf16])
def test_custom_bwd_replays_the_forward_region(dtype: object) -> None:
    a, b = _leaf(3, 4), _leaf(4, 2, seed=1)
    with ta.amp.autocast(dtype=dtype):
        y = RecordingMatmul.apply(a, b)
    assert RecordingMatmul.seen["forward"] == (True, dtype)
    y.sum().backward()
    # bfloat16 stays bfloat16 in backward (PyTorch's old custom_bwd forced float16).
    assert RecordingMatmul.seen["backward"] == (True, dtype)
    assert a.grad.dtype == f32 and b.grad.dtype == f32


def test_custom_bwd_outside_autocast_stays_off() -> None:
    a, b = _leaf(3, 4), _leaf(4, 2, seed=1)
    RecordingMatmul.apply(a, b).sum().backward()
    assert RecordingMatmul.seen["backward"][0] is False


def test_custom_fwd_rejects_non_float_cast_inputs() -> None:
    with pytest.raises(ValueError, match="floating dtype"):
        ta.amp.custom_fwd(cast_inputs=ta.int64)(lambda ctx, x: x)
