"""The CUDA stand-in against CuPy: the calls tinyamp makes, their results, errors and messages.

Each case below is a small piece of what tinyamp asks of CuPy (kernels,
reductions, casts, indexing, copies, cuBLAS, stream capture and replay),
written once against a module ``cp`` (CuPy or the stand-in) and the active
CUDA backend. Its outcome is its results as NumPy arrays, or the error it
raised (type and message).

- ``test_standin_case`` (every run): the stand-in's outcome against a NumPy
  reference, or against CuPy's own error type and message (from CuPy's
  source, v14.2.0).
- ``test_cupy_and_standin_agree`` (marked ``gpu``: ``pytest -m gpu``): the
  same case on CuPy and on the stand-in; results equal (bit for bit where
  the case says so, else within the case's tolerance: cuBLAS and CuPy's
  reductions sum in their own order), the same error type, and the stand-in's
  message starting with CuPy's (the stand-in may add what it saw).

A difference a GPU shows is a difference of the stand-in: fix the stand-in,
and keep the case.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, NamedTuple

import ml_dtypes
import numpy as np
import pytest

import tinyamp as ta
import cupy_standin as cuda_standin
from tinyamp import backend
from tinyamp.kernels import gemm as gemm_module
from tinyamp.kernels.cuda import cublas_direct, cuda_launch

F16, BF16, F32, F64 = np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float32), np.dtype(np.float64)
HAS_GPU = ta.cuda.is_available() and not backend.standin_active()
CAPTURE_REFUSAL = "calling cuBLAS API during stream capture is currently unsupported"  # cupy_backends/.../cublas.pyx
# A float32 -> float16/bfloat16 -> float32 kernel of tinyamp's kind (conversions from the preamble).
ROUND_THROUGH = {
    F16: cuda_launch.KernelSpec("tinyamp_round_through_f16", "float32 x", "float32 y",
                                "y = tinyamp_f16_to_f32(tinyamp_f32_to_f16(x));", cuda_launch.F16_CONVERSIONS),
    BF16: cuda_launch.KernelSpec("tinyamp_round_through_bf16", "float32 x", "float32 y",
                                 "y = tinyamp_bf16_to_f32(tinyamp_f32_to_bf16(x));", cuda_launch.BF16_CONVERSIONS),
}


def round_through(y: Any, dtype: Any) -> Any:
    """``y`` rounded through ``dtype`` in place, one launch."""
    with cuda_launch._device(y):
        cuda_launch.elementwise(ROUND_THROUGH[np.dtype(dtype)], y, y)
    return y


class Case(NamedTuple):
    run: Callable[[Any], list]        # cp -> [results as NumPy arrays]
    expect: Any                       # a NumPy reference (list of arrays) or (exception type name, message prefix)
    exact: bool = True                # bit for bit (NaN payloads aside), else within rtol
    rtol: float = 0.0


def _specials(dtype: Any = F32) -> np.ndarray:
    return np.array([0.0, -0.0, 1.0, -1.5, 65504.0, 65520.0, 7e4, 1e-7, 6e-8, 3e-39, np.inf, -np.inf, np.nan,
                     1.0009765625, 1.00048828125, 3.140625, 1e38], dtype)


def _random(shape: tuple, dtype: Any = F32, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


# ------------------------------------------------------------------ casts, reductions, indexing, copies
def _astype(source: Any, target: Any) -> Case:
    with np.errstate(over="ignore"):  # 7e4 and 1e38 overflow float16: inf, as on a GPU
        host = _specials(F32).astype(source)
        return Case(lambda cp: [cp.asarray(host).astype(target).get()], [host.astype(target)])


def _sum_f16(cp: Any) -> list:
    x = cp.asarray(_random((64, 33), F16, 1))
    return [x.sum(axis=0, dtype=np.float32).get(), x.sum(axis=1, dtype=np.float32).get(),
            x.sum(dtype=np.float32).get()]


def _sum_f16_reference() -> list:
    x = _random((64, 33), F16, 1).astype(F32)
    return [x.sum(axis=0), x.sum(axis=1), np.array(x.sum(), F32)]


def _max_finite(cp: Any) -> list:
    x = cp.asarray(_specials(F32))
    finite = cp.asarray(_random((5, 7)))
    return [cp.isfinite(x).get(), cp.isfinite(finite).all().get(), finite.max(axis=1).get(), finite.min().get()]


def _max_finite_reference() -> list:
    finite = _random((5, 7))
    return [np.isfinite(_specials(F32)), np.array(True), finite.max(axis=1), np.array(finite.min(), F32)]


def _indexing(cp: Any) -> list:
    x = cp.asarray(_random((6, 5)))
    index = cp.asarray(np.array([4, 0, 4, 2], np.int64))
    out = [x[index].get(), x[:, 1:4].copy().get(), cp.ascontiguousarray(x.T).get(), cp.take(x, index, axis=1).get()]
    y = cp.zeros((6, 5), np.float32)
    y[index] = x[index]
    out.append(y.get())
    return out


def _indexing_reference() -> list:
    x, index = _random((6, 5)), np.array([4, 0, 4, 2])
    y = np.zeros((6, 5), np.float32)
    y[index] = x[index]
    return [x[index], x[:, 1:4], np.ascontiguousarray(x.T), np.take(x, index, axis=1), y]


def _scatter_add(cp: Any) -> list:
    out = cp.zeros((4, 3), np.float32)
    index = cp.asarray(np.array([1, 3, 1, 1], np.int64))
    backend.cuda_lib("cupyx").scatter_add(out, index, cp.ones((4, 3), np.float32))
    return [out.get()]


def _copies(cp: Any) -> list:
    host = _random((3, 4), F16, 2)
    x = cp.asarray(host)
    y = cp.empty((3, 4), F16)
    y.set(host[::-1].copy())
    return [cp.asnumpy(x), y.get(), x.copy().get()]


def _implicit_conversion(cp: Any) -> list:
    return [np.asarray(cp.zeros(3, np.float32))]


def _host_array_operand(cp: Any) -> list:
    return [cp.add(cp.zeros(3, np.float32), np.zeros(3, np.float32)).get()]


# ------------------------------------------------------------------ tinyamp's kernels
def _round_through(dtype: Any) -> Case:
    def run(cp: Any) -> list:
        y = cp.asarray(_specials(F32))
        return [round_through(y, dtype).get()]
    with np.errstate(over="ignore"):
        return Case(run, [_specials(F32).astype(dtype).astype(F32)])


def _kernel_type_mismatch(cp: Any) -> list:
    spec = ROUND_THROUGH[F16]
    kernel = cp.ElementwiseKernel(spec.in_params, spec.out_params, spec.body, spec.name, preamble=spec.preamble)
    kernel(cp.zeros(2, np.float64), cp.zeros(2, np.float64))
    return []


def _kernel_size_undecided(cp: Any) -> list:
    kernel = cp.ElementwiseKernel("raw float32 x", "raw float32 y", "y[i] = x[i];", "tinyamp_conformance_copy")
    kernel(cp.zeros(2, np.float32), cp.zeros(2, np.float32))
    return []


def _raw_kernel(cp: Any) -> list:
    table = cp.zeros(3, np.uint64)
    cuda_launch._fill_pointers(table, (7, 1 << 40, 3))
    return [table.get()]


# ------------------------------------------------------------------ cuBLAS
def _gemm(dtype: Any, out_dtype: Any = None, batch: tuple = (), trans_b: bool = False) -> Case:
    a, b = _random(batch + (9, 17), dtype, 3), _random((5, 17) if trans_b else (17, 5), dtype, 4)

    def run(cp: Any) -> list:
        return [gemm_module.gemm(cp.asarray(a), cp.asarray(b), out_dtype, trans_b=trans_b).get()]

    reference = gemm_module.gemm(a, b, out_dtype, trans_b=trans_b)
    # cuBLAS sums in its own order: float32 sums of 17 terms differ in the last bits; a 16-bit output may round
    # the other way (one unit in the last place of bfloat16 is 2^-7 relative).
    rtol = {F64: 1e-13, F32: 1e-5}.get(np.dtype(reference.dtype), 1e-2)
    return Case(run, [reference], exact=False, rtol=rtol)


def _direct_invalid_lda(cp: Any) -> list:
    a = cp.zeros((4, 4), np.float32)
    alpha, beta = np.ones((), np.float32), np.zeros((), np.float32)
    handle = cublas_direct.handle(a)
    cublas_direct.gemmEx(handle, 0, 0, 4, 4, 4, alpha.ctypes.data, a.data.ptr, 0, 2, a.data.ptr, 0, 4,
                         beta.ctypes.data, a.data.ptr, 0, 4, cublas_direct.CUBLAS_COMPUTE_32F,
                         cublas_direct.CUBLAS_GEMM_DEFAULT)
    return [a.get()]


@contextlib.contextmanager
def _capturing(cp: Any) -> Any:
    """A capture on a new stream with a private pool; yields a list that receives the graph."""
    pool = cp.cuda.MemoryPool()
    stream = cp.cuda.Stream(non_blocking=True)
    graphs: list = []
    with cp.cuda.using_allocator(pool.malloc), stream:
        stream.begin_capture()
        try:
            yield graphs
        except BaseException:
            with contextlib.suppress(Exception):  # the first error is the outcome, not the capture's end
                stream.end_capture()
            raise
        graphs.append(stream.end_capture())


def _wrapper_during_capture(cp: Any) -> list:
    cublas = backend.cuda_lib("cupy_backends.cuda.libs.cublas")
    a = cp.zeros((4, 4), np.float32)
    alpha, beta = np.ones((), np.float32), np.zeros((), np.float32)
    handle = cp.cuda.device.get_cublas_handle()
    with _capturing(cp):
        cublas.gemmEx(handle, 0, 0, 4, 4, 4, alpha.ctypes.data, a.data.ptr, 0, 4, a.data.ptr, 0, 4,
                      beta.ctypes.data, a.data.ptr, 0, 4, cublas.CUBLAS_COMPUTE_32F, -1)
    return []


def _matmul_during_capture(cp: Any) -> list:
    a = cp.ones((4, 4), np.float32)
    with _capturing(cp):
        cp.matmul(a, a)
    return []


def _capture_and_replay(cp: Any) -> list:
    """A GEMM (direct cuBLAS), a tinyamp kernel and a ufunc captured, then replayed on new inputs."""
    x, w = cp.asarray(_random((6, 8), F16, 5)), cp.asarray(_random((8, 3), F16, 6))
    cublas_direct.prepare(x.device)
    round_through(cp.multiply(gemm_module.gemm(x, w, np.float32), np.float32(2.0)), F16)  # compiled before
    outputs = []
    with _capturing(cp) as graphs:
        y = gemm_module.gemm(x, w, np.float32)
        round_through(y, F16)
        z = cp.multiply(y, np.float32(2.0))
    graph = graphs[0]
    for seed in (7, 8):
        x[...] = cp.asarray(_random((6, 8), F16, seed))
        graph.launch()
        cp.cuda.get_current_stream().synchronize()
        outputs.append(z.get())
    return outputs


def _capture_and_replay_reference() -> list:
    w = _random((8, 3), F16, 6)
    return [(gemm_module.gemm(_random((6, 8), F16, seed), w, np.float32).astype(F16).astype(F32) * 2)
            for seed in (7, 8)]


def _pointer_copies(cp: Any) -> list:
    """MemoryPointer.copy_from_device_async: a row of one array into another, then a whole copy captured (it runs
    only at the replay) and replayed after the source changed."""
    src, dst = cp.asarray(_random((4, 6), F32, 9)), cp.zeros((4, 6), F32)
    dst.data.copy_from_device_async(src.data + 24, 24)
    results = [dst.get()]
    with _capturing(cp) as graphs:
        dst.data.copy_from_device_async(src.data, src.nbytes)
    results.append(dst.get())
    src[...] = cp.asarray(_random((4, 6), F32, 10))
    graphs[0].launch()
    cp.cuda.get_current_stream().synchronize()
    return results + [dst.get()]


def _pointer_copies_reference() -> list:
    first = np.zeros((4, 6), F32)
    first[0] = _random((4, 6), F32, 9)[1]
    return [first, first, _random((4, 6), F32, 10)]


def _pointer_copy_from_an_int(cp: Any) -> list:
    cp.zeros(3, F32).data.copy_from_device_async(cp.ones(3, F32).data.ptr, 12)
    return []


def _get_during_capture(cp: Any) -> list:
    x = cp.ones(3, np.float32)
    with _capturing(cp):
        x.get()
    return []


def _upload_during_capture(cp: Any) -> list:
    with _capturing(cp):
        cp.asarray(np.ones(3, np.float32))
    return []


def _sync_during_capture(cp: Any) -> list:
    with _capturing(cp):
        cp.cuda.get_current_stream().synchronize()
    return []


CASES = {
    "astype f32->f16": _astype(F32, F16),
    "astype f32->bf16": _astype(F32, BF16),
    "astype f16->f32": _astype(F16, F32),
    "astype bf16->f32": _astype(BF16, F32),
    "astype f64->f16": _astype(F64, F16),
    "sum f16 as f32": Case(_sum_f16, _sum_f16_reference(), exact=False, rtol=1e-5),  # summation order
    "max, min, isfinite, all": Case(_max_finite, _max_finite_reference()),
    "indexing and copies of views": Case(_indexing, _indexing_reference()),
    "cupyx.scatter_add": Case(_scatter_add, [np.array([[0, 0, 0], [3, 3, 3], [0, 0, 0], [1, 1, 1]], F32)]),
    "host<->device copies": Case(_copies, [_random((3, 4), F16, 2), _random((3, 4), F16, 2)[::-1],
                                           _random((3, 4), F16, 2)]),
    "implicit conversion to NumPy": Case(_implicit_conversion, ("TypeError", "Implicit conversion to a NumPy array "
                                                                "is not allowed. Please use `.get()` to construct "
                                                                "a NumPy array explicitly.")),
    "host array operand": Case(_host_array_operand, ("TypeError", "Unsupported type <class 'numpy.ndarray'>")),
    "round through float16": _round_through(F16),
    "round through bfloat16": _round_through(BF16),
    "ElementwiseKernel dtype mismatch": Case(_kernel_type_mismatch, ("TypeError", "Type is mismatched. y float64 "
                                                                     "float32")),
    "ElementwiseKernel without a size": Case(_kernel_size_undecided, ("ValueError", "Loop size is undecided.")),
    "RawKernel pointer fill": Case(_raw_kernel, [np.array([7, 1 << 40, 3], np.uint64)]),
    "gemm f16": _gemm(F16),
    "gemm f16 -> f32": _gemm(F16, F32),
    "gemm bf16 -> f32, b transposed": _gemm(BF16, F32, trans_b=True),
    "gemm f16 batched": _gemm(F16, batch=(3,)),
    "gemm f32": _gemm(F32),
    "gemm f32 batched": _gemm(F32, batch=(2,)),
    "gemm f64": _gemm(F64),
    "direct cuBLAS, lda too small": Case(_direct_invalid_lda, ("CUBLASError", "CUBLAS_STATUS_INVALID_VALUE")),
    "CuPy's cuBLAS wrapper during a capture": Case(_wrapper_during_capture, ("NotImplementedError",
                                                                             CAPTURE_REFUSAL)),
    "cupy.matmul during a capture": Case(_matmul_during_capture, ("NotImplementedError", CAPTURE_REFUSAL)),
    "capture and replay": Case(_capture_and_replay, _capture_and_replay_reference(), exact=False, rtol=1e-2),
    "device-to-device copies by pointer": Case(_pointer_copies, _pointer_copies_reference()),
    "pointer copy from an int": Case(_pointer_copy_from_an_int, ("TypeError", "Argument 'src' has incorrect type "
                                                                 "(expected cupy.cuda.memory.MemoryPointer, got int)")),
    "get during a capture": Case(_get_during_capture, ("RuntimeError", "the current stream is capturing, so D2H "
                                                                       "transfers are disallowed")),
    "asarray of a host array during a capture": Case(_upload_during_capture, ("RuntimeError", "the current stream is "
                                                                              "capturing, so H2D transfers are "
                                                                              "disallowed")),
    "synchronize during a capture": Case(_sync_during_capture, ("CUDARuntimeError",
                                                                "cudaErrorStreamCaptureUnsupported: operation not "
                                                                "permitted when stream is capturing")),
}


# ------------------------------------------------------------------ running and comparing
def outcome(case: Case) -> tuple:
    """("ok", [arrays]) or ("raise", type name, message), running ``case`` on the active CUDA backend."""
    cp = backend.cupy()
    try:
        return ("ok", [np.asarray(r) for r in case.run(cp)])
    except Exception as exc:  # noqa: BLE001 - the outcome is what is compared
        return ("raise", type(exc).__name__, str(exc))


def _bits(array: np.ndarray) -> np.ndarray:
    """Bit patterns with every NaN as one pattern (CuPy and NumPy may keep different NaN payloads)."""
    raw = array.view(f"u{array.dtype.itemsize}").copy() if array.dtype.kind != "b" else array.copy()
    if array.dtype.kind != "b" and array.dtype.kind not in "iu":
        raw[np.isnan(array.astype(np.float64))] = 0
    return raw


def assert_same_results(got: list, want: list, case: Case, what: str) -> None:
    assert len(got) == len(want), f"{what}: {len(got)} results, expected {len(want)}"
    for index, (g, w) in enumerate(zip(got, want)):
        g, w = np.asarray(g), np.asarray(w)
        assert (g.dtype, g.shape) == (w.dtype, w.shape), f"{what}[{index}]: {g.dtype}{g.shape} vs {w.dtype}{w.shape}"
        if case.exact:
            np.testing.assert_array_equal(_bits(g), _bits(w), err_msg=f"{what}[{index}]")
        else:
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=case.rtol,
                                       atol=case.rtol, err_msg=f"{what}[{index}]")


def assert_same_error(got: tuple, want: tuple, what: str) -> None:
    assert got[0] == "raise", f"{what}: expected {want[0]}: {want[1]!r}, got results"
    assert got[1] == want[0], f"{what}: raised {got[1]}: {got[2]}; expected {want[0]}: {want[1]}"
    assert got[2].startswith(want[1]), f"{what}: message {got[2]!r} does not start with {want[1]!r}"


@pytest.mark.parametrize("name", list(CASES))
def test_standin_case(name: str) -> None:
    case = CASES[name]
    cuda_standin.get_default_memory_pool().free_all_blocks()
    with backend.use_cuda_standin():
        got = outcome(case)
    if isinstance(case.expect, tuple):
        assert_same_error(got, case.expect, name)
    else:
        assert got[0] == "ok", f"{name}: raised {got[1]}: {got[2]}"
        assert_same_results(got[1], case.expect, case, name)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="no CUDA GPU")
@pytest.mark.parametrize("name", list(CASES))
def test_cupy_and_standin_agree(name: str) -> None:
    case = CASES[name]
    on_cupy = outcome(case)
    with backend.use_cuda_standin():
        on_standin = outcome(case)
    if on_cupy[0] == "raise":
        assert_same_error(on_standin, (on_cupy[1], on_cupy[2]), f"{name} (CuPy raised; the stand-in)")
    else:
        assert on_standin[0] == "ok", f"{name}: CuPy ran, the stand-in raised {on_standin[1]}: {on_standin[2]}"
        assert_same_results(on_standin[1], on_cupy[1], case, name)
    if isinstance(case.expect, tuple):  # and CuPy itself raises what its source says
        assert_same_error(on_cupy, case.expect, f"{name} (CuPy)")
