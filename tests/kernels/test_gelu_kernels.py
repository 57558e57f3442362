"""erf and GELU kernels (tinyamp/kernels/gelu.py) against float64 references.

The CPU path is numba, in float64 with tinyamp's one erf (cpu/nn_numba.py); other arrays take the
xp expressions. References: ``math.erf`` (the C library's, within an ulp of the true value) and the
GELU formulas evaluated with it in float64. A float32 result must be the float64 reference rounded
to float32 (0.5 ulp: the kernel's float64 error is below 2e-15); a 16-bit result the float32 result
rounded once more (what a float32 kernel storing 16 bits gives).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import tinyamp as ta
from tinyamp import dtypes as dt
from tinyamp.kernels import gelu as kg
from tinyamp.kernels.cpu import cpu_path

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _gelu_ref(x: np.ndarray, approximate: str) -> np.ndarray:
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + _erf(x / math.sqrt(2)))


def _gelu_slope_ref(x: np.ndarray, approximate: str) -> np.ndarray:
    if approximate == "tanh":
        k, c = math.sqrt(2 / math.pi), 0.044715
        u = k * (x + c * x ** 3)
        with np.errstate(over="ignore"):
            sech2 = 1 / np.cosh(u) ** 2  # not 1 - tanh(u)^2, which cancels for large |u|
        return 0.5 * (1 + np.tanh(u)) + 0.5 * x * sech2 * k * (1 + 3 * c * x * x)
    return 0.5 * (1 + _erf(x / math.sqrt(2))) + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


def _points() -> np.ndarray:
    """A dense grid over both pieces and the split, tiny and huge magnitudes, both signs."""
    grid = np.linspace(0, 7, 70001)
    tiny = np.geomspace(1e-300, 1e-3, 400)
    near = 1.0 + np.arange(-50, 51) * 2.0 ** -52  # around the split between the two pieces
    big = np.array([5.9, 5.93, 6.0, 6.5, 10.0, 1e10, 1e300])
    x = np.concatenate([grid, tiny, near, big])
    return np.concatenate([x, -x])


def test_numba_is_the_cpu_path() -> None:
    assert cpu_path.numba_available()
    assert cpu_path.numba_takes(np.zeros(3, np.float32))


def test_erf_float64_within_2e_15_of_the_c_library() -> None:
    x = _points()
    got = kg.erf(x)
    want = _erf(x)
    assert got.dtype == np.float64
    assert np.max(np.abs(got - want)) < 2e-15
    small = np.abs(x) < 1
    assert np.max(np.abs(got[small] - want[small]) / np.maximum(np.abs(want[small]), 1e-300)) < 2e-15


def test_erf_special_values() -> None:
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-310, -1e-310])
    got = kg.erf(x)
    np.testing.assert_array_equal(got[:4], [0.0, -0.0, 1.0, -1.0])
    assert np.signbit(got[1]) and not np.signbit(got[0])
    assert np.isnan(got[4])
    np.testing.assert_allclose(got[5:], 2 / math.sqrt(math.pi) * x[5:], rtol=1e-15)


def test_erf_float32_is_correctly_rounded() -> None:
    x = _points()
    x = x[np.abs(x) < 1e30].astype(np.float32)
    got = kg.erf(x)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, _erf(x.astype(np.float64)).astype(np.float32))


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_float32_is_correctly_rounded(approximate: str) -> None:
    x = np.linspace(-12, 12, 240001).astype(np.float32)
    got = kg.gelu(x, approximate).astype(np.float64)
    want = _gelu_ref(x.astype(np.float64), approximate)
    # Rounded once from a float64 value whose error is below 1e-15 |x| (erf's 2e-15, halved). That is
    # within a tie of the float32 rounding where |y| is large against it; in the left tail, where
    # 1 + erf(x / sqrt 2) cancels (Phi(x) < 1e-6 for x < -4.7), the absolute bound is what holds.
    ulp = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    err = np.abs(got - want)
    assert np.all(err <= 0.5 * ulp + 1e-15 * np.abs(x)), np.max((err - 0.5 * ulp) / np.abs(x))
    body = x > -4
    assert np.max(err[body] / ulp[body]) <= 0.5 + 1e-6


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_backward_float32_against_float64(approximate: str) -> None:
    rng = np.random.default_rng(0)
    x = np.concatenate([np.linspace(-12, 12, 20001), rng.standard_normal(20000) * 3]).astype(np.float32)
    gy = rng.standard_normal(x.size).astype(np.float32)
    got = kg.gelu_backward(gy, x, approximate)
    want = gy.astype(np.float64) * _gelu_slope_ref(x.astype(np.float64), approximate)
    # The slope Phi(x) + x phi(x) (or its tanh form) is computed in float64 to an absolute error below
    # 2e-15; it cancels where it crosses 0 (x ~ -0.75) and in the left tail, so the bound is absolute there.
    ulp = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    err = np.abs(got.astype(np.float64) - want)
    assert np.all(err <= 0.5 * ulp + 2e-15 * np.abs(gy)), np.max((err - 0.5 * ulp) / np.abs(gy))
    body = np.abs(_gelu_slope_ref(x.astype(np.float64), approximate)) > 1e-3
    assert np.max(err[body] / ulp[body]) <= 0.5 + 1e-6


def _check_16_bit(got: np.ndarray, want64: np.ndarray, dtype: np.dtype, exact: np.ndarray, scale: np.ndarray) -> None:
    """Bits equal to the float64 value rounded to float32, then to ``dtype``, where ``exact``; elsewhere
    (where the float64 formula cancels: see the float32 tests) within a 16-bit ulp plus 2e-15 * scale."""
    want = want64.astype(np.float32).astype(dtype)
    np.testing.assert_array_equal(got.view(np.uint16)[exact], want.view(np.uint16)[exact])
    magnitude = want.view(np.uint16) & np.uint16(0x7FFF)
    ulp = (magnitude + np.uint16(1)).view(dtype).astype(np.float64) - magnitude.view(dtype).astype(np.float64)
    err = np.abs(got.astype(np.float64) - want64)
    assert np.all(err[~exact] <= ulp[~exact] + 2e-15 * scale[~exact])


@pytest.mark.parametrize("dtype", [dt.float16, dt.bfloat16], ids=["f16", "bf16"])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_16_bit_is_the_float32_result_rounded(dtype: np.dtype, approximate: str) -> None:
    x = np.arange(65536, dtype=np.uint16).view(dtype)
    x = x[np.isfinite(x.astype(np.float32))]
    wide = x.astype(np.float64)
    with np.errstate(all="ignore"):
        got = kg.gelu(x, approximate)
        assert got.dtype == dtype
        _check_16_bit(got, _gelu_ref(wide, approximate), dtype, wide > -4, np.abs(wide))
        slope = _gelu_slope_ref(wide, approximate)
        back = kg.gelu_backward(np.ones_like(x), x, approximate)
        assert back.dtype == dtype
        _check_16_bit(back, slope, dtype, (np.abs(slope) > 1e-3) | (wide > 0), np.ones_like(wide))


def test_gelu_non_finite_follow_the_formula() -> None:
    x = np.array([np.inf, -np.inf, np.nan], np.float32)
    got = kg.gelu(x)
    assert got[0] == np.inf and np.isnan(got[1]) and np.isnan(got[2])  # -inf * 0 is nan, as x * Phi(x)


def test_integer_input_gives_float32() -> None:
    got = kg.erf(np.arange(-3, 4))
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, _erf(np.arange(-3, 4.0)).astype(np.float32))


def test_non_contiguous_input() -> None:
    x = np.linspace(-3, 3, 200, dtype=np.float32).reshape(10, 20)[:, ::3]
    np.testing.assert_array_equal(kg.gelu(x), kg.gelu(np.ascontiguousarray(x)))
    assert kg.gelu(x).shape == x.shape


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_the_xp_path_computes_the_same_function(standin_backend: str, approximate: str, monkeypatch) -> None:
    """The CuPy xp path (the stand-in here, the fused CUDA kernels turned off: tests/kernels/test_cuda_gelu.py
    holds those to float64) evaluates the same formulas in float32: within 4 ulp of the CPU's."""
    monkeypatch.setattr(kg, "FUSED_ON_GPU", False)
    x = np.linspace(-8, 8, 4001).astype(np.float32)
    gy = np.linspace(1, 2, 4001).astype(np.float32)
    dev = ta.tensor(x, device="cuda")
    gdev = ta.tensor(gy, device="cuda")
    for got, want in ((kg.gelu(dev.array, approximate), kg.gelu(x, approximate)),
                      (kg.gelu_backward(gdev.array, dev.array, approximate), kg.gelu_backward(gy, x, approximate)),
                      (kg.erf(dev.array), kg.erf(x))):
        host = ta.Tensor._wrap(got).cpu().numpy()
        np.testing.assert_allclose(host, want, rtol=5e-7, atol=5e-7)
