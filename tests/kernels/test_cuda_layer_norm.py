"""LayerNorm's CUDA kernels (tinyamp/kernels/cuda/cuda_layer_norm.py) on the CUDA stand-in.

Two references. ``cuda_kernels_reference.layer_norm_reference`` and
``layer_norm_backward_reference`` transcribe the kernels' float32 order to
NumPy (each thread's strided sum, the block tree, the chunked weight
gradients): the kernels, run as C++ by the stand-in, must give their bits.
And float64 LayerNorm, which checks that the transcription computes
LayerNorm: float32 sums of n terms are within about ``n eps`` of the exact
sum (first-order bound of a sequential sum; the tree is better), so the
tolerances below scale with the row length (statistics), or with the rows of
a chunk plus the chunks (the weight and bias gradients), times the terms'
magnitudes; a 16-bit result may also be off by its own half ulp.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.support import cuda_kernels_reference as ref
from tests.support import fused_drivers as fd
from tinyamp import backend
from tinyamp.kernels.cuda import cuda_layer_norm, cuda_rows
from cupy_standin import kernels as standin_kernels

pytestmark = pytest.mark.skipif(standin_kernels.CXX is None, reason="the CUDA stand-in runs kernels through g++")

EPS32 = float(np.finfo(np.float32).eps)
# (x dtype, parameter dtype, output dtype): under autocast float32 throughout; outside it a 16-bit
# input with float32 (O2's norms) or 16-bit parameters, the output in the input's dtype.
CASES = [(fd.F32, fd.F32, fd.F32), (fd.F16, fd.F32, fd.F16), (fd.BF16, fd.BF16, fd.BF16), (fd.F16, fd.F16, fd.F32)]
SHAPES = [(1, 1), (3, 5), (37, 128), (300, 33), (4, 1000)]


@pytest.fixture()
def cp():
    with backend.use_cuda_standin():
        yield backend.cupy()


def data(shape, dtype, seed=0, offset=0.5):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * 2 + offset).astype(dtype)


def half_ulp(values: np.ndarray, dtype) -> np.ndarray:
    if np.dtype(dtype) == fd.F32:
        return np.zeros(values.shape)
    finfo = np.finfo(dtype)
    return 2.0 ** (np.floor(np.log2(np.maximum(np.abs(values), float(finfo.tiny)))) - finfo.nmant - 1)


def layer_norm64(x, w, b, eps):
    x = x.astype(np.float64)
    mean = x.mean(-1, keepdims=True)
    rstd = 1 / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + eps)
    xhat = (x - mean) * rstd
    y = xhat * (1 if w is None else w.astype(np.float64)) + (0 if b is None else b.astype(np.float64))
    return y, xhat, mean[:, 0], rstd[:, 0]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtypes", CASES, ids=str)
@pytest.mark.parametrize("affine", [True, False])
def test_forward_gives_the_transcriptions_bits_and_float64_within_its_error(cp, shape, dtypes, affine) -> None:
    x_dtype, w_dtype, y_dtype = dtypes
    rows, cols = shape
    x = data(shape, x_dtype)
    w = data(cols, w_dtype, seed=1, offset=1.0) if affine else None
    b = data(cols, w_dtype, seed=2, offset=0.0) if affine else None
    y, mean, rstd = cuda_layer_norm.forward(cp.asarray(x), None if w is None else cp.asarray(w),
                                            None if b is None else cp.asarray(b), 1e-5, 1, y_dtype)
    assert y.dtype == y_dtype and mean.shape == rstd.shape == (rows,)
    want = ref.layer_norm_reference(x, w, b, 1e-5, cuda_rows.threads_for(cols), y_dtype)
    fd.assert_same_bits([y.get(), mean.get(), rstd.get()], list(want), "layer_norm")
    y64, xhat64, mean64, rstd64 = layer_norm64(x, w, b, 1e-5)
    scale = (np.abs(xhat64) + 1) * (1 if w is None else np.abs(w.astype(np.float64))) + (0 if b is None else
                                                                                         np.abs(b.astype(np.float64)))
    tol = 4 * (cols + 4) * EPS32 * scale + half_ulp(y64, y_dtype)
    err = np.abs(y.get().astype(np.float64) - y64)
    assert (err <= tol).all(), (err.max(), tol[err > tol][:3])
    assert np.allclose(rstd.get(), rstd64, rtol=4 * (cols + 4) * EPS32, atol=0)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtypes", CASES, ids=str)
@pytest.mark.parametrize("affine", [True, False])
def test_backward_gives_the_transcriptions_bits_and_float64_within_its_error(cp, shape, dtypes, affine) -> None:
    x_dtype, w_dtype, g_dtype = dtypes
    rows, cols = shape
    x = data(shape, x_dtype)
    gy = data(shape, g_dtype, seed=3, offset=0.1)
    w = data(cols, w_dtype, seed=1, offset=1.0) if affine else None
    _, mean, rstd = cuda_layer_norm.forward(cp.asarray(x), None if w is None else cp.asarray(w), None, 1e-5, 1,
                                            g_dtype)
    dx, dw, db = cuda_layer_norm.backward(cp.asarray(gy), cp.asarray(x), None if w is None else cp.asarray(w),
                                          mean, rstd, 1, w_dtype)
    assert dx.dtype == x_dtype and dw.dtype == db.dtype == w_dtype and dw.shape == (cols,)
    chunk_rows, nchunks = cuda_layer_norm.chunking(rows)
    want = ref.layer_norm_backward_reference(gy, x, w, mean.get(), rstd.get(), cuda_rows.threads_for(cols),
                                             chunk_rows, w_dtype)
    fd.assert_same_bits([dx.get(), dw.get(), db.get()], list(want), "layer_norm backward")
    _, xhat64, _, rstd64 = layer_norm64(x, None, None, 1e-5)
    g64 = gy.astype(np.float64)
    gw = g64 * (1 if w is None else w.astype(np.float64))
    dx64 = rstd64[:, None] * (gw - gw.mean(-1, keepdims=True) - xhat64 * (gw * xhat64).mean(-1, keepdims=True))
    scale = rstd64[:, None] * (np.abs(gw) + np.abs(gw).mean(-1, keepdims=True)
                               + np.abs(xhat64) * np.abs(gw * xhat64).mean(-1, keepdims=True))
    tol = 8 * (cols + 4) * EPS32 * scale + half_ulp(dx64, x_dtype)
    err = np.abs(dx.get().astype(np.float64) - dx64)
    assert (err <= tol).all(), (err.max(), tol[err > tol][:3])
    for got, terms in ((dw, g64 * xhat64), (db, g64)):
        exact = terms.sum(0)
        tol = (chunk_rows + nchunks + 8) * EPS32 * np.abs(terms).sum(0) * 2 + half_ulp(exact, w_dtype)
        assert (np.abs(got.get().astype(np.float64) - exact) <= tol).all()


def test_backward_gives_only_what_is_asked_for(cp) -> None:
    x = cp.asarray(data((9, 16), fd.F32))
    _, mean, rstd = cuda_layer_norm.forward(x, None, None, 1e-5, 1, fd.F32)
    full = cuda_layer_norm.backward(x, x, None, mean, rstd, 1, fd.F32)
    dx, dw, db = cuda_layer_norm.backward(x, x, None, mean, rstd, 1, fd.F32, need_dw=False, need_db=False)
    assert dw is None and db is None
    fd.assert_same_bits([dx.get()], [full[0].get()], "dx alone")
    dx, dw, db = cuda_layer_norm.backward(x, x, None, mean, rstd, 1, fd.F32, need_dx=False)
    assert dx is None
    fd.assert_same_bits([dw.get(), db.get()], [full[1].get(), full[2].get()], "dw and db alone")


def test_several_trailing_dims_make_one_row(cp) -> None:
    x = data((3, 4, 5, 6), fd.F32)
    y, mean, _ = cuda_layer_norm.forward(cp.asarray(x), None, None, 1e-5, 2, fd.F32)
    flat, mean_flat, _ = cuda_layer_norm.forward(cp.asarray(x.reshape(12, 30)), None, None, 1e-5, 1, fd.F32)
    fd.assert_same_bits([y.get().reshape(12, 30), mean.get()], [flat.get(), mean_flat.get()], "trailing dims")


def test_one_launch_each_way_and_the_bytes_it_moves(cp) -> None:
    rows, cols = 64, 128
    x = cp.asarray(data((rows, cols), fd.F32))
    w, b = cp.ones(cols, np.float32), cp.zeros(cols, np.float32)
    for _ in range(2):  # the first call makes the persistent placeholders and ticket (a memset each)
        cp.counters.reset()
        y, mean, rstd = cuda_layer_norm.forward(x, w, b, 1e-5, 1, fd.F32)
        cuda_layer_norm.backward(y, x, w, mean, rstd, 1, fd.F32)
    kernels = cp.counters.kernels()
    assert kernels == {"tinyamp_layer_norm_f32_f32_f32": 1, "tinyamp_layer_norm_backward_f32_f32_f32": 1}, kernels
    moved = cp.counters.kernel_bytes()
    # forward: x, w, b read; y, mean, rstd written.
    assert moved["tinyamp_layer_norm_f32_f32_f32"] == {"read": 4 * (rows * cols + 2 * cols),
                                                       "written": 4 * (rows * cols + 2 * rows)}
    # backward: gy, x, w, mean, rstd, the partials and the ticket read; dx, the partials, dw, db, the ticket written.
    _, nchunks = cuda_layer_norm.chunking(rows)
    partials = 4 * 2 * nchunks * cols
    assert moved["tinyamp_layer_norm_backward_f32_f32_f32"] == {
        "read": 4 * (2 * rows * cols + cols + 2 * rows) + partials + 4,
        "written": 4 * (rows * cols + 2 * cols) + partials + 4}
