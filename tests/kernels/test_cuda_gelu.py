"""GELU's CUDA kernels (tinyamp/kernels/cuda/cuda_gelu.py) on the CUDA stand-in, against float64 references.

The stand-in compiles the kernel source with g++ and runs it thread by thread,
over the four-element vector loop and the scalar tail, on aligned and
misaligned arrays, with the C library's ``erff``/``expf``/``tanhf`` in place of
the device's (both within 2 float32 ulp). The reference is the same formula in
float64 with ``math.erf``. Tolerance, from the float32 arithmetic: the kernels
compute ``1 + erf(.)`` and ``1 + tanh(.)`` in float32, which near ``x -> -inf``
cancels to a value whose error is an ulp *of one*, so the error bound is
absolute in ``x`` (``16 eps32 (|x| + |ref|)``, with ``|dy|`` as a factor in the
backward) rather than relative to the result; a 16-bit result may also be off
by its own half ulp (one rounding of the float32 value).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.support import fused_drivers as fd
from tinyamp import backend
from tinyamp.kernels.cuda import cuda_gelu
from cupy_standin import kernels as standin_kernels

pytestmark = pytest.mark.skipif(standin_kernels.CXX is None, reason="the CUDA stand-in runs kernels through g++")

DTYPES = [fd.F16, fd.BF16, fd.F32]
EPS32 = float(np.finfo(np.float32).eps)
_erf = np.vectorize(math.erf, otypes=[np.float64])
K, C = math.sqrt(2 / math.pi), 0.044715


@pytest.fixture()
def cp():
    with backend.use_cuda_standin():
        yield backend.cupy()


def gelu64(x: np.ndarray, approximate: str) -> np.ndarray:
    if approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(K * (x + C * x ** 3)))
    return 0.5 * x * (1 + _erf(x / math.sqrt(2)))


def slope64(x: np.ndarray, approximate: str) -> np.ndarray:
    if approximate == "tanh":
        u = K * (x + C * x ** 3)
        with np.errstate(over="ignore"):
            sech2 = 1 / np.cosh(u) ** 2
        return 0.5 * (1 + np.tanh(u)) + 0.5 * x * sech2 * K * (1 + 3 * C * x * x)
    return 0.5 * (1 + _erf(x / math.sqrt(2))) + x * np.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


def spacing(ref: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The spacing of ``dtype`` just above ``|ref|`` (an upper bound of its half ulp times two)."""
    finfo = np.finfo(dtype)
    magnitude = np.maximum(np.abs(ref), float(finfo.tiny))
    return 2.0 ** (np.floor(np.log2(magnitude)) - finfo.nmant)


def sample(n: int, dtype: np.dtype, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = np.concatenate([rng.standard_normal(n) * 3, np.linspace(-12, 12, 97)])[:max(n, 1)]
    return x.astype(dtype)


@pytest.mark.parametrize("approximate", cuda_gelu.MODES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", [1, 7, 203, 4096 + 5])
def test_forward_is_the_float64_formula_within_float32_error(cp, approximate, dtype, n) -> None:
    x = sample(n, dtype)
    got = cuda_gelu.gelu(cp.asarray(x), approximate).get()
    assert got.dtype == dtype and got.shape == x.shape
    x64 = x.astype(np.float64)
    ref = gelu64(x64, approximate)
    tol = 16 * EPS32 * (np.abs(x64) + np.abs(ref)) + (spacing(ref, dtype) / 2 if dtype != fd.F32 else 0)
    err = np.abs(got.astype(np.float64) - ref)
    assert (err <= tol).all(), (x64[err > tol][:5], got[err > tol][:5], ref[err > tol][:5])


@pytest.mark.parametrize("approximate", cuda_gelu.MODES)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", [5, 4096 + 3])
def test_backward_is_the_float64_derivative_within_float32_error(cp, approximate, dtype, n) -> None:
    x = sample(n, dtype)
    gy = sample(n, dtype, seed=1)
    got = cuda_gelu.gelu_backward(cp.asarray(gy), cp.asarray(x), approximate).get()
    assert got.dtype == dtype
    x64, g64 = x.astype(np.float64), gy.astype(np.float64)
    ref = g64 * slope64(x64, approximate)
    tol = 16 * EPS32 * np.abs(g64) * (1 + np.abs(x64)) + 4 * EPS32 * np.abs(ref) \
        + (spacing(ref, dtype) / 2 if dtype != fd.F32 else 0)
    err = np.abs(got.astype(np.float64) - ref)
    assert (err <= tol).all(), (x64[err > tol][:5], got[err > tol][:5], ref[err > tol][:5])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_a_misaligned_view_takes_the_scalar_loop_and_gives_the_same_bits(cp, dtype) -> None:
    base = cp.asarray(sample(1001, dtype))
    view = base[1:]  # 2 or 4 bytes past an aligned start: no vector loads
    assert cuda_gelu._vectors(view.size, view) == 0
    fd.assert_same_bits([cuda_gelu.gelu(view, "none").get()],
                        [cuda_gelu.gelu(cp.asarray(view.get()), "none").get()], "gelu misaligned")
    g = cp.asarray(sample(1000, dtype, seed=2))
    fd.assert_same_bits([cuda_gelu.gelu_backward(g, view, "tanh").get()],
                        [cuda_gelu.gelu_backward(g, cp.asarray(view.get()), "tanh").get()], "gelu backward misaligned")


def test_specials_follow_the_formula(cp) -> None:
    """inf gives inf (x/2 times 2), -inf gives nan (-inf times 1 + erf(-inf) = 0), as the formula in float64."""
    x = np.float32([np.inf, -np.inf, np.nan, 0.0, -0.0])
    for approximate in cuda_gelu.MODES:
        got = cuda_gelu.gelu(cp.asarray(x), approximate).get()
        with np.errstate(invalid="ignore"):
            ref = gelu64(x.astype(np.float64), approximate).astype(np.float32)
        fd.assert_same_bits([got], [ref], f"gelu {approximate} specials")


def test_one_launch_each_way(cp) -> None:
    x = cp.asarray(sample(300, fd.F16))
    cp.counters.reset()
    y = cuda_gelu.gelu(x, "none")
    cuda_gelu.gelu_backward(y, x, "none")
    assert cp.counters.kernels() == {"tinyamp_gelu_none_f16": 1, "tinyamp_gelu_backward_none_f16_f16": 1}
    # One read of x and one write of y (2 bytes an element), then gy and x read and dx written.
    assert cp.counters.kernel_bytes()["tinyamp_gelu_none_f16"] == {"read": 600, "written": 600}


def test_takes_only_contiguous_gpu_arrays_of_the_fused_dtypes(cp) -> None:
    x = cp.ones((4, 6), np.float16)
    assert cuda_gelu.takes(x) and cuda_gelu.takes(x, x)
    assert not cuda_gelu.takes(x[:, ::2]) and not cuda_gelu.takes(x.astype(np.float64))
    assert not cuda_gelu.takes(x, cp.ones((6, 4), np.float16))
    assert not cuda_gelu.takes(np.ones(3, np.float16))
