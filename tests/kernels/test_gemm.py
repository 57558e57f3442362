"""Tests for tinyamp.kernels.gemm: float32 accumulation, one rounding, clear errors.

Three groups:
- CPU numerics and errors (always run);
- the cuBLAS argument plumbing, run on the CPU against a host stand-in for
  cuBLAS that reads and writes memory through the raw pointers, leading
  dimensions and strides it is given (always run);
- the same checks on device arrays: on the CUDA stand-in and on a real GPU
  (``cuda_backend``; the GPU ones marked ``gpu``, skipped without a GPU).
"""

from __future__ import annotations

import ctypes
import importlib
from types import SimpleNamespace

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tinyamp import backend
from tinyamp.kernels.gemm import gemm, gemm_fp16_accumulate

# The GPU path's module (last_gpu_call and the cuBLAS plumbing).
gemm_module = importlib.import_module("tinyamp.kernels.cuda.cublas_gemm")

F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
BF16 = np.dtype(ml_dtypes.bfloat16)


def _random(shape, dtype, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _small_ints(shape, dtype, seed=0):
    """Integers in [-4, 4]: every product and short sum is exact in any dtype,
    so results can be compared bit for bit whatever the summation order."""
    return np.random.default_rng(seed).integers(-4, 5, shape).astype(dtype)


def _ulp(values, dtype):
    """Spacing of ``dtype`` at each value (normal range)."""
    info = ml_dtypes.finfo(dtype)
    mag = np.maximum(np.abs(np.asarray(values, np.float64)), float(info.smallest_normal))
    return float(info.eps) * np.exp2(np.floor(np.log2(mag)))


def _ref32(a, b):
    return a.astype(np.float32) @ b.astype(np.float32)


U32 = 2.0 ** -24  # float32's unit roundoff


def _within_dot_product_bound(got, a, b, dtype):
    """Elementwise: is ``got`` within the error bound of a float32-accumulated product rounded once to ``dtype``?

    |got - exact| <= 2 * gamma_{k-1} * sum_i |a_i||b_i| + half a spacing of ``dtype`` at |exact| + that term.

    Why: products of float16/bfloat16 numbers are exact in float32 (11+11 and
    8+8 significant bits fit in 24), so only the k-1 additions of a length-k
    dot product round. Whatever their order (cuBLAS splits and blocks K), each
    product takes part in at most k-1 of them, which bounds the float32 sum s by
    gamma_{k-1} = (k-1)u / (1 - (k-1)u) times sum |a_i||b_i| (Higham, Accuracy
    and Stability of Numerical Algorithms, 2nd ed., section 3.1). The factor 2
    allows tensor cores, whose accumulations may truncate instead of rounding to
    nearest (below 2u per addition instead of u). Then s is rounded once to
    ``dtype``: at most half the spacing at |s|, and |s| <= |exact| + the sum
    bound, so the spacing is taken there. One ulp of the result is the wrong
    yardstick: with cancellation the result is small and the sum's error is not.
    """
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    k = a.shape[-1]
    gamma = (k - 1) * U32 / (1 - (k - 1) * U32)
    sum_bound = 2 * gamma * (np.abs(a64) @ np.abs(b64))
    exact = a64 @ b64
    half_spacing = _ulp(np.abs(exact) + sum_bound, dtype) / 2
    return np.abs(np.asarray(got, np.float64) - exact) <= sum_bound + half_spacing


# --------------------------------------------------------------------------
# CPU numerics
# --------------------------------------------------------------------------

def test_long_dot_of_ones_is_exact_with_fp32_accumulation():
    a, b = np.ones((1, 4096), F16), np.ones((4096, 1), F16)
    out = gemm(a, b)
    assert out.dtype == F16 and out.shape == (1, 1)
    assert out[0, 0] == 4096


def test_fp16_accumulation_stalls_at_2048():
    a, b = np.ones((1, 4096), F16), np.ones((4096, 1), F16)
    out = gemm_fp16_accumulate(a, b)
    assert out.dtype == F16
    assert out[0, 0] == 2048  # 2048 + 1 rounds back to 2048 in float16


def test_fp16_accumulate_matches_gemm_when_nothing_rounds():
    a, b = _small_ints((2, 3, 5), F16, 1), _small_ints((5, 4), F16, 2)
    np.testing.assert_array_equal(gemm_fp16_accumulate(a, b), gemm(a, b))


def test_fp16_accumulate_rejects_other_dtypes():
    a = np.ones((2, 3), np.float32)
    with pytest.raises(ValueError, match="gemm_fp16_accumulate.*float16"):
        gemm_fp16_accumulate(a, a.T.copy())


@pytest.mark.parametrize("dtype", [F16, BF16], ids=["float16", "bfloat16"])
def test_one_rounding_of_the_float32_product(dtype):
    a, b = _random((64, 300), dtype, 1), _random((300, 48), dtype, 2)
    out = gemm(a, b)
    assert out.dtype == dtype
    # Bit for bit the emulation the design promises ...
    np.testing.assert_array_equal(out.view(np.uint16), _ref32(a, b).astype(dtype).view(np.uint16))
    # ... and so within the dot-product bound of the exact (float64) product,
    assert _within_dot_product_bound(out, a, b, dtype).all()
    # which a float16 accumulator breaks (so the bound can fail).
    if dtype == F16:
        assert not _within_dot_product_bound(gemm_fp16_accumulate(a, b), a, b, dtype).all()


@pytest.mark.parametrize("dtype", [F16, BF16], ids=["float16", "bfloat16"])
def test_out_dtype_float32_returns_the_unrounded_accumulator(dtype):
    a, b = _random((16, 40), dtype, 3), _random((40, 8), dtype, 4)
    out = gemm(a, b, np.float32)
    assert out.dtype == F32
    np.testing.assert_array_equal(out, _ref32(a, b))


@pytest.mark.parametrize("dtype", [F32, F64], ids=["float32", "float64"])
def test_float32_and_float64_use_their_own_blas(dtype):
    a, b = _random((7, 9), dtype, 5), _random((9, 4), dtype, 6)
    out = gemm(a, b)
    assert out.dtype == dtype
    np.testing.assert_array_equal(out, a @ b)


def test_batched_with_broadcast_batch_dims():
    a, b = _small_ints((2, 1, 3, 4), F16, 7), _small_ints((5, 4, 6), F16, 8)
    out = gemm(a, b)
    assert out.shape == (2, 5, 3, 6) and out.dtype == F16
    np.testing.assert_array_equal(out, (a.astype(np.float64) @ b.astype(np.float64)).astype(F16))
    # Random data too: must equal the emulation exactly.
    a, b = _random((2, 1, 3, 4), F16, 9), _random((5, 4, 6), F16, 10)
    np.testing.assert_array_equal(gemm(a, b), _ref32(a, b).astype(F16))


@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("trans_b", [False, True])
def test_trans_flags(trans_a, trans_b):
    a, b = _small_ints((3, 5, 4), F16, 11), _small_ints((4, 6), F16, 12)
    a_in = np.ascontiguousarray(a.swapaxes(-1, -2)) if trans_a else a
    b_in = np.ascontiguousarray(b.swapaxes(-1, -2)) if trans_b else b
    out = gemm(a_in, b_in, trans_a=trans_a, trans_b=trans_b)
    np.testing.assert_array_equal(out, (a.astype(np.float64) @ b.astype(np.float64)).astype(F16))
    out32 = gemm(a_in, b_in, np.float32, trans_a=trans_a, trans_b=trans_b)
    assert out32.dtype == F32
    np.testing.assert_array_equal(out32, a.astype(np.float32) @ b.astype(np.float32))


def test_same_operand_twice_and_inputs_untouched():
    x = _random((6, 10), F16, 13)
    before = x.copy()
    np.testing.assert_array_equal(gemm(x, x, trans_b=True), _ref32(x, x.T).astype(F16))
    np.testing.assert_array_equal(x, before)


def test_empty_inner_dimension_gives_zeros():
    out = gemm(np.ones((3, 0), F16), np.ones((0, 2), F16))
    assert out.shape == (3, 2) and out.dtype == F16 and not out.any()


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_matches_numpy_matmul_on_random_shapes(data):
    dims = st.integers(1, 4)
    m, k, n = data.draw(dims), data.draw(dims), data.draw(dims)
    batch = data.draw(st.lists(st.integers(1, 3), max_size=3))
    # Each operand keeps a random subset of the trailing batch dims, some set to 1.
    def operand_batch():
        keep = data.draw(st.integers(0, len(batch)))
        tail = batch[len(batch) - keep:]
        return tuple(d if data.draw(st.booleans()) else 1 for d in tail)
    trans_a, trans_b = data.draw(st.booleans()), data.draw(st.booleans())
    a = _small_ints(operand_batch() + (m, k), F16, 14)
    b = _small_ints(operand_batch() + (k, n), F16, 15)
    a_in = a.swapaxes(-1, -2).copy() if trans_a else a
    b_in = b.swapaxes(-1, -2).copy() if trans_b else b
    expected = a.astype(np.float64) @ b.astype(np.float64)
    out = gemm(a_in, b_in, trans_a=trans_a, trans_b=trans_b)
    assert out.shape == expected.shape
    np.testing.assert_array_equal(out, expected.astype(F16))


# --------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------

def _assert_message(excinfo, *parts):
    message = str(excinfo.value)
    assert message.startswith("gemm:"), message
    for part in parts:
        assert part in message, (part, message)


def test_inner_dimension_mismatch():
    with pytest.raises(ValueError) as excinfo:
        gemm(np.ones((2, 3), F16), np.ones((4, 5), F16))
    _assert_message(excinfo, "inner", "(2, 3)", "(4, 5)", "float16")


def test_inner_dimension_mismatch_names_trans_flag():
    with pytest.raises(ValueError) as excinfo:
        gemm(np.ones((2, 3), F16), np.ones((3, 5), F16), trans_b=True)
    _assert_message(excinfo, "(2, 3)", "(3, 5)", "trans_b=True")


def test_dtype_mismatch():
    with pytest.raises(ValueError) as excinfo:
        gemm(np.ones((2, 3), F16), np.ones((3, 5), F32))
    _assert_message(excinfo, "dtype", "(2, 3) float16", "(3, 5) float32")


def test_batch_dims_do_not_broadcast():
    with pytest.raises(ValueError) as excinfo:
        gemm(np.ones((3, 2, 4), BF16), np.ones((5, 4, 6), BF16))
    _assert_message(excinfo, "batch", "(3, 2, 4) bfloat16", "(5, 4, 6) bfloat16")


@pytest.mark.parametrize("a_shape, b_shape", [((3,), (3, 2)), ((2, 3), (3,))])
def test_vectors_are_rejected(a_shape, b_shape):
    with pytest.raises(ValueError) as excinfo:
        gemm(np.ones(a_shape, F16), np.ones(b_shape, F16))
    _assert_message(excinfo, "2-D")


def test_unsupported_dtypes():
    with pytest.raises(ValueError) as excinfo:
        gemm(np.ones((2, 3), np.int32), np.ones((3, 2), np.int32))
    _assert_message(excinfo, "int32")
    with pytest.raises(ValueError) as excinfo:
        gemm(np.ones((2, 3), F16), np.ones((3, 2), F16), np.int8)
    _assert_message(excinfo, "out_dtype", "int8")


def test_non_arrays_are_rejected():
    with pytest.raises(TypeError, match="gemm"):
        gemm([[1.0]], np.ones((1, 1), F32))


# --------------------------------------------------------------------------
# cuBLAS argument plumbing, checked on the host
# --------------------------------------------------------------------------

class _HostArray(np.ndarray):
    """A NumPy array that gives its address the way CuPy does: ``x.data.ptr``."""

    @property
    def data(self):
        return SimpleNamespace(ptr=self.ctypes.data)


def _host(x):
    return x.view(_HostArray)


class _FakeCublas:
    """Column-major GEMM over raw host pointers, per cuBLAS's definition.

    C[i, j] = alpha * sum_l op(A)[i, l] op(B)[l, j] (+ beta * C), where a
    column-major matrix with leading dimension ld stores element (i, j) at
    i + j * ld and batch p starts stride * p elements later. Each pointer must
    fall inside a buffer the test registered, and numpy refuses a view that
    reaches past the buffer's end, so wrong ld or strides fail cleanly.
    """

    CUBLAS_OP_N, CUBLAS_OP_T = 0, 1
    CUBLAS_COMPUTE_16F, CUBLAS_COMPUTE_32F = 64, 68
    CUBLAS_GEMM_DEFAULT, CUBLAS_GEMM_DEFAULT_TENSOR_OP = -1, 99
    _TYPES = {2: F16, 14: BF16, 0: F32}

    def __init__(self):
        self.buffers = []
        self.calls = []

    def register(self, x):
        while isinstance(x.base, np.ndarray):
            x = x.base
        self.buffers.append(x)
        return x

    def _matrices(self, ptr, type_, rows, cols, ld, stride, count):
        assert ld >= max(1, rows), f"ld {ld} < rows {rows}"
        for root in self.buffers:
            start = root.ctypes.data
            if start <= ptr < start + root.nbytes:
                dtype = self._TYPES[type_]
                return np.ndarray((count, rows, cols), dtype, buffer=root, offset=ptr - start,
                                  strides=(stride * dtype.itemsize, dtype.itemsize,
                                           ld * dtype.itemsize))
        raise AssertionError(f"pointer {ptr:#x} is in no registered buffer")

    # Method names and argument order as in CuPy's cuBLAS wrapper.
    def gemmStridedBatchedEx(self, handle, transa, transb, m, n, k, alpha,  # noqa: N802
                             a_ptr, a_type, lda, stride_a, b_ptr, b_type, ldb, stride_b,
                             beta, c_ptr, c_type, ldc, stride_c, batch_count,
                             compute_type, algo):
        self.calls.append(dict(function="gemmStridedBatchedEx", transa=transa, transb=transb,
                               m=m, n=n, k=k, lda=lda, ldb=ldb, ldc=ldc, stride_a=stride_a,
                               stride_b=stride_b, stride_c=stride_c, batch_count=batch_count,
                               compute_type=compute_type, algo=algo))
        assert a_type == b_type
        ta, tb = transa == self.CUBLAS_OP_T, transb == self.CUBLAS_OP_T
        a = self._matrices(a_ptr, a_type, *((k, m) if ta else (m, k)), lda, stride_a,
                           batch_count)
        b = self._matrices(b_ptr, b_type, *((n, k) if tb else (k, n)), ldb, stride_b,
                           batch_count)
        c = self._matrices(c_ptr, c_type, m, n, ldc, stride_c, batch_count)
        op_a = a.swapaxes(-1, -2) if ta else a
        op_b = b.swapaxes(-1, -2) if tb else b
        alpha_v = ctypes.c_float.from_address(alpha).value
        beta_v = ctypes.c_float.from_address(beta).value
        result = alpha_v * (op_a.astype(np.float64) @ op_b.astype(np.float64))
        if beta_v != 0:  # with beta == 0, C is write-only (may hold garbage)
            result += beta_v * c.astype(np.float64)
        c[...] = result.astype(c.dtype)

    def gemmEx(self, handle, transa, transb, m, n, k, alpha,  # noqa: N802
               a_ptr, a_type, lda, b_ptr, b_type, ldb, beta, c_ptr, c_type, ldc,
               compute_type, algo):
        self.gemmStridedBatchedEx(handle, transa, transb, m, n, k, alpha,
                                  a_ptr, a_type, lda, 0, b_ptr, b_type, ldb, 0,
                                  beta, c_ptr, c_type, ldc, 0, 1, compute_type, algo)
        self.calls[-1]["function"] = "gemmEx"


def _fake_backend():
    fake = _FakeCublas()

    def wrap(x):
        fake.register(x)
        return _host(x)

    xp = SimpleNamespace(
        empty=lambda shape, dtype: wrap(np.empty(shape, dtype)),
        ascontiguousarray=lambda x: wrap(np.ascontiguousarray(x)),
        broadcast_to=lambda x, shape: _host(np.broadcast_to(x, shape)),
    )
    return xp, fake


def _input(x, fake, transposed_view=False):
    """Register ``x`` as device memory; optionally hand it over as ``base.T``."""
    if transposed_view:
        base = np.ascontiguousarray(x.swapaxes(-1, -2))
        fake.register(base)
        return _host(base).swapaxes(-1, -2)
    fake.register(x)
    return _host(x)


_BATCHED = "gemmStridedBatchedEx"
CASES = {
    # name: (a shape, b shape, trans_a, trans_b, expected function). A shared
    # b folds the batch into M when the stored a is untransposed, which a
    # transposed view of a turns around (and the rest stays the same).
    "2d": ((3, 4), (4, 5), False, False, "gemmEx"),
    "2d_ta": ((4, 3), (4, 5), True, False, "gemmEx"),
    "2d_tb": ((3, 4), (5, 4), False, True, "gemmEx"),
    "2d_ta_tb": ((4, 3), (5, 4), True, True, "gemmEx"),
    "batched": ((2, 3, 4), (2, 4, 5), False, False, _BATCHED),
    "batched_tb": ((2, 3, 4), (2, 5, 4), False, True, _BATCHED),
    "shared_b_folds_into_m": ((2, 3, 4), (4, 5), False, False, ("gemmEx", _BATCHED)),
    "shared_b_trans_a": ((2, 4, 3), (4, 5), True, False, (_BATCHED, "gemmEx")),
    "shared_a": ((3, 4), (2, 4, 5), False, False, _BATCHED),
    "broadcast_both": ((2, 1, 3, 4), (5, 4, 6), False, False, _BATCHED),
    "leading_ones": ((1, 1, 3, 4), (1, 4, 5), False, False, "gemmEx"),
}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("c_dtype", [F16, F32], ids=["c_float16", "c_float32"])
@pytest.mark.parametrize("in_dtype", [F16, BF16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("as_views", [False, True], ids=["contiguous", "transposed_views"])
def test_cublas_arguments_on_host_stand_in(name, c_dtype, in_dtype, as_views):
    a_shape, b_shape, trans_a, trans_b, function = CASES[name]
    if isinstance(function, tuple):  # (contiguous inputs, transposed views)
        function = function[as_views]
    xp, fake = _fake_backend()
    a = _small_ints(a_shape, in_dtype, 21)
    b = _small_ints(b_shape, in_dtype, 22)
    a_in, b_in = _input(a, fake, as_views), _input(b, fake, as_views)
    out = gemm_module._cublas_gemm(xp, fake, 0, a_in, b_in, c_dtype, trans_a, trans_b,
                                   compute_type=fake.CUBLAS_COMPUTE_32F,
                                   algo=fake.CUBLAS_GEMM_DEFAULT_TENSOR_OP)
    expected = gemm(a, b, np.float32, trans_a=trans_a, trans_b=trans_b)
    assert out.dtype == c_dtype and out.shape == expected.shape
    np.testing.assert_array_equal(np.asarray(out, np.float64), expected.astype(np.float64))
    (call,) = fake.calls
    assert call["function"] == function
    assert call["compute_type"] == 68 and call["algo"] == 99
    assert gemm_module.last_gpu_call["function"] == function
    assert gemm_module.last_gpu_call["compute_type_name"] == "CUBLAS_COMPUTE_32F"


def test_cublas_shared_operand_uses_stride_zero_and_views_are_not_copied():
    xp, fake = _fake_backend()
    a = _small_ints((3, 4), F16, 23)
    b = _small_ints((2, 4, 5), F16, 24)
    b_view = _input(b, fake, transposed_view=True)  # a (2, 4, 5) view of (2, 5, 4)
    gemm_module._cublas_gemm(xp, fake, 0, _input(a, fake), b_view, F16, False, False,
                             compute_type=68, algo=99)
    (call,) = fake.calls
    assert call["stride_b"] == 0  # a (= cuBLAS's B): the shared 2-D operand, not copied
    assert call["transa"] == fake.CUBLAS_OP_T  # the view was passed with a flipped flag
    # Only the output was allocated: neither input was copied.
    assert len(fake.buffers) == 3


# --------------------------------------------------------------------------
# GPU (CuPy) - same checks on device arrays
# --------------------------------------------------------------------------

def _cupy():
    return backend.cupy()


def _cublas():
    return backend.cuda_lib("cupy_backends.cuda.libs.cublas")


def _device_array(x):
    cp = _cupy()
    try:
        return cp.asarray(x)
    except Exception as exc:  # bfloat16 arrays need CuPy >= 14
        pytest.skip(f"CuPy cannot hold {x.dtype.name} arrays here: {exc}")


def test_gpu_long_dot_of_ones(cuda_backend):
    a = _device_array(np.ones((1, 4096), F16))
    b = _device_array(np.ones((4096, 1), F16))
    out = gemm(a, b)
    assert backend.is_cupy_array(out) and out.dtype == F16
    assert float(out[0, 0]) == 4096
    assert gemm_module.last_gpu_call["function"] == "gemmEx"
    assert gemm_module.last_gpu_call["compute_type"] == _cublas().CUBLAS_COMPUTE_32F
    assert float(gemm_fp16_accumulate(a, b)[0, 0]) == 2048


@pytest.mark.parametrize("dtype", [F16, BF16], ids=["float16", "bfloat16"])
def test_gpu_agrees_with_float32_matmul_within_the_dot_product_bound(dtype, cuda_backend):
    cp = _cupy()
    a_host, b_host = _random((96, 512), dtype, 31), _random((512, 80), dtype, 32)
    a, b = _device_array(a_host), _device_array(b_host)
    out = gemm(a, b)
    assert out.dtype == dtype
    assert gemm_module.last_gpu_call["compute_type"] == _cublas().CUBLAS_COMPUTE_32F
    assert gemm_module.last_gpu_call["c_type"] == dtype.name
    got = cp.asnumpy(out)
    # cuBLAS's own summation order, checked against the exact product with the
    # standard bound (see _within_dot_product_bound), which float16 accumulation breaks.
    assert _within_dot_product_bound(got, a_host, b_host, dtype).all()
    if dtype == F16:
        assert not _within_dot_product_bound(cp.asnumpy(gemm_fp16_accumulate(a, b)), a_host, b_host, dtype).all()
    exact = a_host.astype(np.float64) @ b_host.astype(np.float64)
    # float32 output: no rounding, error of a float32 sum only.
    out32 = gemm(a, b, np.float32)
    assert out32.dtype == F32 and gemm_module.last_gpu_call["c_type"] == "float32"
    bound = 512 * 2.0**-23 * (np.abs(a_host.astype(np.float64)) @ np.abs(b_host.astype(np.float64)))
    assert np.all(np.abs(cp.asnumpy(out32).astype(np.float64) - exact) <= bound)


@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("trans_b", [False, True])
def test_gpu_batched_broadcast_and_trans(trans_a, trans_b, cuda_backend):
    a = _small_ints((2, 1, 3, 4), F16, 33)
    b = _small_ints((5, 4, 6), F16, 34)
    a_in = np.ascontiguousarray(a.swapaxes(-1, -2)) if trans_a else a
    b_in = np.ascontiguousarray(b.swapaxes(-1, -2)) if trans_b else b
    expected = gemm(a_in, b_in, trans_a=trans_a, trans_b=trans_b)  # CPU, exact here
    out = gemm(_device_array(a_in), _device_array(b_in), trans_a=trans_a, trans_b=trans_b)
    assert out.shape == (2, 5, 3, 6) and out.dtype == F16
    np.testing.assert_array_equal(_cupy().asnumpy(out), expected)
    assert gemm_module.last_gpu_call["function"] == "gemmStridedBatchedEx"
    assert gemm_module.last_gpu_call["compute_type"] == _cublas().CUBLAS_COMPUTE_32F
    assert gemm_module.last_gpu_call["batch_count"] == 10


@pytest.mark.parametrize("a_shape, b_shape, trans_b, function", [
    ((2, 3, 4), (4, 5), False, "gemmEx"),              # shared weight folds into M
    ((3, 4), (2, 4, 5), False, "gemmStridedBatchedEx"),  # shared a: stride 0
    ((2, 3, 4), (2, 5, 4), True, "gemmStridedBatchedEx"),
])
def test_gpu_batched_layouts_and_transposed_views(a_shape, b_shape, trans_b, function, cuda_backend):
    cp = _cupy()
    a, b = _small_ints(a_shape, F16, 35), _small_ints(b_shape, F16, 36)
    expected = gemm(a, b, np.float32, trans_b=trans_b)
    # b handed over as a transposed view of a C-contiguous array: no copy needed.
    b_dev = cp.ascontiguousarray(_device_array(b).swapaxes(-1, -2)).swapaxes(-1, -2)
    out = gemm(_device_array(a), b_dev, np.float32, trans_b=trans_b)
    np.testing.assert_array_equal(cp.asnumpy(out), expected)
    assert gemm_module.last_gpu_call["function"] == function
    assert gemm_module.last_gpu_call["compute_type"] == _cublas().CUBLAS_COMPUTE_32F


@pytest.mark.parametrize("dtype", [F32, F64], ids=["float32", "float64"])
def test_gpu_float32_and_float64_call_cublas_directly(dtype, cuda_backend):
    """float32/float64 GEMMs go through tinyamp's direct cuBLAS call too (capturable), in their own precision."""
    cp = _cupy()
    a, b = _random((2, 7, 9), dtype, 37), _random((9, 4), dtype, 38)
    out = gemm(_device_array(a), _device_array(b))
    assert out.dtype == dtype
    assert gemm_module.last_gpu_call["function"] == "gemmEx"  # the shared b folds the batch into M
    assert gemm_module.last_gpu_call["compute_type_name"] == ("CUBLAS_COMPUTE_64F" if dtype == F64
                                                              else "CUBLAS_COMPUTE_32F")
    assert gemm_module.last_gpu_call["c_type"] == dtype.name
    np.testing.assert_allclose(cp.asnumpy(out), a @ b, rtol=1e-5 if dtype == F32 else 1e-12)


def test_gpu_errors_and_mixed_devices(cuda_backend):
    a = _device_array(np.ones((2, 3), F16))
    with pytest.raises(ValueError) as excinfo:
        gemm(a, _device_array(np.ones((4, 5), F16)))
    _assert_message(excinfo, "inner", "(2, 3)", "(4, 5)", "float16")
    with pytest.raises(ValueError) as excinfo:
        gemm(a, _device_array(np.ones((3, 5), F32)))
    _assert_message(excinfo, "dtype", "float16", "float32")
    with pytest.raises(ValueError) as excinfo:
        gemm(a, np.ones((3, 5), F16))
    _assert_message(excinfo, "devices")


def test_gpu_zero_sizes(cuda_backend):
    cp = _cupy()
    out = gemm(_device_array(np.ones((3, 0), F16)), _device_array(np.ones((0, 2), F16)))
    assert out.shape == (3, 2) and not bool(cp.any(out))
    out = gemm(_device_array(np.ones((0, 3, 4), F16)), _device_array(np.ones((4, 2), F16)))
    assert out.shape == (0, 3, 2)
