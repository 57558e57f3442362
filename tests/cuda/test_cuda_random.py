"""The CUDA generator: Philox4x32-10 kernels (``kernels/cuda/cuda_random.py``) at a host (seed, offset).

Known answer: the first value at seed 0, offset 0 comes from Random123's published Philox4x32-10 block for
counter 0 and key 0. Statistics, determinism, state round trips; the draws inside a CUDA graph capture are
in tests/cuda/test_cuda_graphs.py and tests/cuda/test_graphed_step.py.
"""

from __future__ import annotations

import numpy as np
import pytest

import tinyamp as ta
from tinyamp import backend
from tinyamp.kernels.cuda import cuda_random

ZERO_BLOCK = (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)  # Philox4x32-10(counter 0, key 0), Random123's KAT


def _draw(kind: str, n: int, dtype, seed: int, offset: int) -> np.ndarray:
    out = backend.cupy().empty((n,), dtype)
    cuda_random.draw(kind, out, seed, offset)
    return out.get()


def test_the_first_values_are_philox4x32_10s_known_answer(cuda_backend: str) -> None:
    x0, x1, x2, x3 = ZERO_BLOCK
    u32 = np.float32((x0 >> 8) * 2.0**-24)
    u64 = ((x0 << 21) | (x1 >> 11)) * 2.0**-53
    assert _draw("uniform", 1, np.float32, 0, 0)[0] == u32
    assert _draw("uniform", 1, np.float64, 0, 0)[0] == u64
    z64 = np.sqrt(-2.0 * np.log(u64 + 2.0**-53)) * np.cos(2 * np.pi * ((((x2 << 21) | (x3 >> 11))) * 2.0**-53))
    np.testing.assert_allclose(_draw("normal", 1, np.float64, 0, 0)[0], z64, rtol=1e-14)
    # value i of a draw at offset o is the block of counter o + i, whatever the draw's length
    np.testing.assert_array_equal(_draw("uniform", 5, np.float32, 9, 3)[2:], _draw("uniform", 3, np.float32, 9, 5))


@pytest.mark.parametrize("dtype", [ta.float32, ta.float64])
def test_uniforms_and_normals_have_the_right_moments(cuda_backend: str, dtype) -> None:
    n = 100_000
    u = ta.rand(n, device="cuda", dtype=dtype).cpu().numpy()
    z = ta.randn(n, device="cuda", dtype=dtype).cpu().numpy()
    assert u.dtype == z.dtype == dtype
    assert u.min() >= 0.0 and u.max() < 1.0
    # 5 standard errors: mean of U(0,1) sd 0.289/sqrt(n), its variance's sd 0.0745/sqrt(n); N(0,1): 1/sqrt(n), sqrt(2/n)
    assert abs(u.mean() - 0.5) < 5 * 0.289 / n**0.5 and abs(u.var() - 1 / 12) < 5 * 0.0745 / n**0.5
    assert np.isfinite(z).all() and abs(z.mean()) < 5 / n**0.5 and abs(z.var() - 1) < 5 * (2 / n) ** 0.5
    ints = ta.randint(0, 10, (n,), device="cuda").cpu().numpy()
    assert ints.min() == 0 and ints.max() == 9 and abs(ints.mean() - 4.5) < 5 * 2.87 / n**0.5


def test_draws_are_deterministic_and_consecutive_draws_differ(cuda_backend: str) -> None:
    ta.manual_seed(7)
    a, b = ta.rand(64, device="cuda").cpu().numpy(), ta.randn(64, device="cuda").cpu().numpy()
    assert not np.array_equal(a, ta.rand(64, device="cuda").cpu().numpy())  # the offset moved on
    ta.manual_seed(7)
    np.testing.assert_array_equal(ta.rand(64, device="cuda").cpu().numpy(), a)
    np.testing.assert_array_equal(ta.randn(64, device="cuda").cpu().numpy(), b)
    ta.manual_seed(8)
    assert not np.array_equal(ta.rand(64, device="cuda").cpu().numpy(), a)


def test_the_state_is_a_seed_and_an_offset_counting_philox_blocks(cuda_backend: str) -> None:
    ta.manual_seed(3)
    ta.rand(10, device="cuda")
    ta.randn(2, 3, device="cuda", dtype=ta.float64)
    state = ta.cuda.get_rng_state()
    assert state.numpy().view(np.uint64).tolist() == [3, 16]
    after = ta.rand(4, device="cuda").cpu().numpy()
    ta.cuda.set_rng_state(state)
    np.testing.assert_array_equal(ta.rand(4, device="cuda").cpu().numpy(), after)
    np.testing.assert_array_equal(after, _draw("uniform", 4, np.float32, 3, 16))


def test_a_bad_draw_is_refused(cuda_backend: str) -> None:
    with pytest.raises(TypeError, match=r"out must be a C-contiguous float32 or float64 array, got float16"):
        cuda_random.draw("uniform", backend.cupy().empty((3,), np.float16), 0, 0)
    with pytest.raises(ValueError, match=r"kind must be one of \('uniform', 'normal'\), got 'gamma'"):
        cuda_random.draw("gamma", backend.cupy().empty((3,), np.float32), 0, 0)
