"""softmax and log_softmax's CUDA kernels (tinyamp/kernels/cuda/cuda_softmax.py) on the CUDA stand-in.

The kernels, run as C++ by the stand-in, give the bits of their NumPy
transcriptions (``cuda_kernels_reference.softmax_reference`` and
``softmax_backward_reference``, with the C library's ``expf``/``logf``), and
the transcriptions are float64 softmax within their float32 error: a sum of n
terms within about ``n eps`` of the exact one (first-order bound), each
exponential within an ulp, so softmax within ``(n + 8) eps`` relative,
log_softmax within that much times ``1 + |y|`` absolute; a 16-bit result may
also be off by its own half ulp.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.support import cuda_kernels_reference as ref
from tests.support import device_math
from tests.support import fused_drivers as fd
from tinyamp import backend
from tinyamp.kernels.cuda import cuda_rows, cuda_softmax
from cupy_standin import kernels as standin_kernels

pytestmark = pytest.mark.skipif(standin_kernels.CXX is None, reason="the CUDA stand-in runs kernels through g++")

EPS32 = float(np.finfo(np.float32).eps)
DTYPES = [fd.F16, fd.BF16, fd.F32]
SHAPES = [(1, 1), (3, 7), (40, 64), (2, 1000)]


@pytest.fixture()
def cp():
    with backend.use_cuda_standin():
        yield backend.cupy()


def data(shape, dtype, seed=0):
    return (np.random.default_rng(seed).standard_normal(shape) * 3).astype(dtype)


def half_ulp(values, dtype):
    if np.dtype(dtype) == fd.F32:
        return np.zeros(np.shape(values))
    finfo = np.finfo(dtype)
    return 2.0 ** (np.floor(np.log2(np.maximum(np.abs(values), float(finfo.tiny)))) - finfo.nmant - 1)


def softmax64(x):
    x = x.astype(np.float64)
    z = x - x.max(-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(-1, keepdims=True), z - np.log(e.sum(-1, keepdims=True))


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_forward_gives_the_transcriptions_bits_and_float64_within_its_error(cp, log, dtype, shape) -> None:
    x = data(shape, dtype)
    got = cuda_softmax.forward(cp.asarray(x), log=log).get()
    want = ref.softmax_reference(x, log, cuda_rows.threads_for(shape[-1]), device_math.libm("expf"),
                                 device_math.libm("logf"))
    fd.assert_same_bits([got], [want], "softmax")
    p64, logp64 = softmax64(x)
    exact = logp64 if log else p64
    n = shape[-1]
    tol = (n + 8) * EPS32 * ((1 + np.abs(exact)) if log else np.abs(exact)) + half_ulp(exact, dtype)
    assert (np.abs(got.astype(np.float64) - exact) <= tol).all()


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_backward_gives_the_transcriptions_bits_and_float64_within_its_error(cp, log, dtype, shape) -> None:
    x = data(shape, dtype)
    y = cuda_softmax.forward(cp.asarray(x), log=log)
    gy = data(shape, dtype, seed=1)
    got = cuda_softmax.backward(cp.asarray(gy), y, log=log).get()
    want = ref.softmax_backward_reference(gy, y.get(), log, cuda_rows.threads_for(shape[-1]), device_math.libm("expf"))
    fd.assert_same_bits([got], [want], "softmax backward")
    g64, y64 = gy.astype(np.float64), y.get().astype(np.float64)
    if log:
        exact = g64 - np.exp(y64) * g64.sum(-1, keepdims=True)
        scale = np.abs(g64) + np.exp(y64) * np.abs(g64).sum(-1, keepdims=True)
    else:
        exact = y64 * (g64 - (g64 * y64).sum(-1, keepdims=True))
        scale = np.abs(y64) * (np.abs(g64) + np.abs(g64 * y64).sum(-1, keepdims=True))
    tol = (shape[-1] + 8) * EPS32 * scale + half_ulp(exact, dtype)
    assert (np.abs(got.astype(np.float64) - exact) <= tol).all()


def test_rows_of_infinities_and_nan_follow_the_composed_path(cp) -> None:
    """A row of -inf shifts by 0 (softmax 0/0 = NaN, as PyTorch), NaN spreads over its row, +inf makes NaN."""
    x = np.float32([[-np.inf, -np.inf, -np.inf], [1.0, np.nan, 2.0], [np.inf, 1.0, 0.0], [0.0, -np.inf, 1.0]])
    for log in (False, True):
        got = cuda_softmax.forward(cp.asarray(x), log=log).get()
        with np.errstate(all="ignore"):
            z = x - np.where(x.max(-1, keepdims=True) == -np.inf, 0, x.max(-1, keepdims=True))
            e = np.exp(z)
            want = z - np.log(e.sum(-1, keepdims=True)) if log else e / e.sum(-1, keepdims=True)
        assert np.array_equal(np.isnan(got), np.isnan(want)), (log, got)
        assert np.allclose(np.nan_to_num(got), np.nan_to_num(want), rtol=1e-6, atol=1e-7)


def test_one_launch_each_way(cp) -> None:
    x = cp.asarray(data((6, 10), fd.F16))
    cp.counters.reset()
    y = cuda_softmax.forward(x, log=True)
    cuda_softmax.backward(y, y, log=True)
    assert cp.counters.kernels() == {"tinyamp_log_softmax_f16": 1, "tinyamp_log_softmax_backward_f16_f16": 1}
