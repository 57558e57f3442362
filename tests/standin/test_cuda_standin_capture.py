"""Stream capture on the CUDA stand-in: graphs replay the recorded work, and a capture refuses what CUDA refuses.

What a replay must do is what a CUDA graph does: redo every recorded operation
on the memory it was recorded on, reading the device memory as it is at the
replay and the launch arguments as they were at the capture. So each
operation is checked the same way: capture it, change its inputs' device
contents, replay, and compare with the operation run eagerly on the new
contents. Nothing may run during the capture itself (CUDA records, it does
not run). See cupy_standin/_capture.py.
"""

from __future__ import annotations

import ctypes
import re

import numpy as np
import pytest

import cupy_standin as cp
from cupy_standin import cublas, cupyx, runtime

HALF = np.float16


@pytest.fixture
def side():
    """A non-blocking stream to capture on, and a private pool installed while the test runs."""
    pool = cp.cuda.MemoryPool()
    with cp.cuda.using_allocator(pool.malloc):
        yield cp.cuda.Stream(non_blocking=True), pool
    assert cp.cuda.graph.active is None, "a test left a capture open"


def capture(stream, work):
    """(what ``work()`` returned, the graph of it) captured on ``stream``."""
    with stream:
        stream.begin_capture()
        try:
            result = work()
        finally:
            graph = stream.end_capture()
    return result, graph


def _inputs(seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {"a": rng.standard_normal((4, 6)).astype(np.float32), "b": rng.standard_normal((4, 6)).astype(np.float32),
            "h": rng.standard_normal((4, 6)).astype(HALF), "t": rng.standard_normal((4, 6)).astype(np.float32),
            "i": rng.permutation(4)[:3].astype(np.int64), "v": rng.standard_normal(6).astype(np.float32)}


def _device(values: dict) -> dict:
    return {key: cp.asarray(value) for key, value in values.items()}


SQUARE = cp.ElementwiseKernel("T x, float32 scale", "T y", "y = x * x * scale;", "standin_test_square")
GATHER = cp.RawKernel(r"""
extern "C" __global__ void standin_test_gather(const unsigned long long* table, float* out, const int n) {
    const float* src = reinterpret_cast<const float*>(table[0]);  // where to read: decided by device memory
    for (int i = 0; i < n; ++i) out[i] = 2.0f * src[i];
}
""", "standin_test_gather")


def _direct_handle() -> tuple[int, int]:
    """A handle of the stand-in's libcublas (as tinyamp's cublas_direct makes one) and a 1 MiB workspace."""
    handle = ctypes.c_void_p()
    cublas.LIBRARY.cublasCreate_v2(ctypes.byref(handle))
    return handle.value, runtime.malloc(1 << 20)


DIRECT_HANDLE, WORKSPACE = _direct_handle()


def _on_current_stream(handle: int) -> int:
    """``handle`` set to the current stream, with its workspace (setting a stream resets it)."""
    cublas.LIBRARY.cublasSetStream_v2(handle, cp.cuda.get_current_stream().ptr)
    cublas.LIBRARY.cublasSetWorkspace_v2(handle, WORKSPACE, 1 << 20)
    return handle


def _gemm(d: dict):
    out = cp.empty((4, 4), np.float32)
    alpha, beta = np.array(2.0, np.float32), np.array(0.0, np.float32)
    # row-major out = a @ b.T: column-major out^T = b @ a^T, b given first with op T.
    cublas.LIBRARY.cublasGemmEx(_on_current_stream(DIRECT_HANDLE), cublas.CUBLAS_OP_T, cublas.CUBLAS_OP_N, 4, 4, 6,
                                alpha.ctypes.data, d["b"].data.ptr, runtime.CUDA_R_32F, 6, d["a"].data.ptr,
                                runtime.CUDA_R_32F, 6, beta.ctypes.data, out.data.ptr, runtime.CUDA_R_32F, 4,
                                cublas.CUBLAS_COMPUTE_32F, cublas.CUBLAS_GEMM_DEFAULT)
    return out


def _gather(d: dict):
    table = cp.asarray(np.array([d["a"].data.ptr], np.uint64)) if cp.cuda.graph.active is None else d["table"]
    out = cp.empty(24, np.float32)
    GATHER((1,), (1,), (table, out, np.int32(24)))
    return out


def _inplace(method):
    def run(d):
        method(d)
        return d["t"]
    return run


OPERATIONS = {
    "ufuncs": lambda d: d["a"] * d["b"] + 1.5,
    "ufunc_out": lambda d: cp.multiply(d["a"], 2.0, out=d["t"]),
    "iadd": _inplace(lambda d: d["t"].__iadd__(d["a"])),
    "sum_axis": lambda d: d["a"].sum(axis=0),
    "mean_float16": lambda d: cp.mean(d["h"]),
    "max_keepdims": lambda d: d["a"].max(axis=1, keepdims=True),
    "astype": lambda d: d["a"].astype(HALF),
    "copy_transposed": lambda d: d["a"].T.copy(),
    "reshape_copy": lambda d: d["a"].T.reshape(-1),
    "setitem_slice": _inplace(lambda d: d["t"].__setitem__(slice(1, 3), d["a"][0:2])),
    "setitem_scalar": _inplace(lambda d: d["t"].__setitem__(0, 7.0)),
    "setitem_device_index": _inplace(lambda d: d["t"].__setitem__(d["i"], d["v"])),
    "getitem_device_index": lambda d: d["a"][d["i"]],
    "fill": _inplace(lambda d: d["t"].fill(3.0)),
    "zeros": lambda d: cp.zeros((3, 2), np.float32),
    "ones_like": lambda d: cp.ones_like(d["a"]),
    "copyto_where": _inplace(lambda d: cp.copyto(d["t"], d["a"], where=d["a"] > 0)),
    "where": lambda d: cp.where(d["a"] > 0, d["a"], d["b"]),
    "clip": lambda d: cp.clip(d["a"], -0.5, 0.5),
    "take_along_axis": lambda d: cp.take_along_axis(d["a"], cp.argmax(d["b"], axis=1)[:, None], axis=1),
    "sort": lambda d: cp.sort(d["a"], axis=1),
    "concatenate": lambda d: cp.concatenate([d["a"], d["b"]], axis=0),
    "scatter_add": _inplace(lambda d: cupyx.scatter_add(d["t"], (d["i"],), d["v"])),
    "elementwise_kernel": _inplace(lambda d: SQUARE(d["a"], 0.5, d["t"])),
    "raw_kernel_pointer_table": _gather,
    "cublas_gemmEx": _gemm,
}


@pytest.mark.parametrize("name", sorted(OPERATIONS))
def test_a_replay_redoes_the_operation_on_the_device_memory_as_it_is_then(side, name) -> None:
    stream, _ = side
    work = OPERATIONS[name]
    before = _device(_inputs(0))
    if name == "raw_kernel_pointer_table":
        before["table"] = cp.asarray(np.array([before["a"].data.ptr], np.uint64))
    kept = {key: value.get() for key, value in before.items()}
    out, graph = capture(stream, lambda: work(before))
    # Nothing ran: every array is as it was, and a new output holds the garbage of fresh memory.
    for key, value in before.items():
        np.testing.assert_array_equal(value.get(), kept[key], err_msg=f"{key} changed during the capture")
    if not any(out is value for value in before.values()):
        assert out.get().tobytes() == bytes([0xFF]) * out.nbytes, "a new output was written during the capture"
    # New contents in the same memory; the replay must compute from them.
    fresh = _inputs(1)
    for key, value in fresh.items():
        before[key][...] = cp.asarray(value)
    graph.launch()
    expected = work(_device(fresh))
    np.testing.assert_array_equal(out.get(), expected.get())
    assert graph.nodes, "nothing was recorded"


def test_launch_arguments_are_frozen_and_device_memory_is_read_at_replay(side) -> None:
    """The difference that makes a captured step stale: a host number passed as an argument vs. one in memory."""
    stream, _ = side
    step_by_argument = cp.ElementwiseKernel("float32 g, float32 lr", "float32 w", "w = w - lr * g;", "standin_test_sgd")
    step_from_memory = cp.ElementwiseKernel("float32 g, raw float32 lr", "float32 w", "w = w - lr[0] * g;",
                                            "standin_test_sgd_device_lr")
    g, w1, w2 = cp.ones(3, np.float32), cp.zeros(3, np.float32), cp.zeros(3, np.float32)
    lr_host, lr_device = 0.5, cp.full((1,), 0.5, np.float32)
    _, graph = capture(stream, lambda: (step_by_argument(g, lr_host, w1), step_from_memory(g, lr_device, w2)))
    lr_host = 0.25  # noqa: F841 - a scheduler changing the host value: the graph kept 0.5
    lr_device[...] = 0.25  # the same change written into device memory: the graph reads it
    graph.launch()
    np.testing.assert_array_equal(w1.get(), [-0.5] * 3)
    np.testing.assert_array_equal(w2.get(), [-0.25] * 3)


def test_cupy_cublas_wrappers_and_matmul_refuse_during_a_capture_with_cupys_text(side) -> None:
    """CuPy's cuBLAS wrappers refuse while the current stream captures, and so do matmul/dot, which use them."""
    stream, _ = side
    d = _device(_inputs(0))
    handle, alpha, beta = cp.cuda.get_cublas_handle(), np.array(1.0, np.float32), np.array(0.0, np.float32)
    calls = {
        "gemmEx": lambda: cublas.gemmEx(handle, 0, 0, 4, 4, 4, alpha.ctypes.data, d["a"].data.ptr, runtime.CUDA_R_32F,
                                        4, d["b"].data.ptr, runtime.CUDA_R_32F, 4, beta.ctypes.data, d["t"].data.ptr,
                                        runtime.CUDA_R_32F, 4, cublas.CUBLAS_COMPUTE_32F, -1),
        "matmul": lambda: d["a"] @ d["b"].T,
        "matmul float16": lambda: d["h"] @ d["h"].T,
        "dot": lambda: cp.dot(d["a"], d["b"].T),
    }
    for name, call in calls.items():
        with stream:
            stream.begin_capture()
            try:
                with pytest.raises(NotImplementedError) as excinfo:
                    call()
            finally:
                stream.end_capture()  # nothing ran, the capture is still valid (CuPy refuses before CUDA)
        assert str(excinfo.value) == "calling cuBLAS API during stream capture is currently unsupported", name
    cp.dot(d["v"], d["v"])  # a vector dot product is a reduction in CuPy: no cuBLAS
    with stream:
        stream.begin_capture()
        cp.dot(d["v"], d["v"])
        stream.end_capture()


def test_direct_cublas_needs_the_capturing_stream_and_a_workspace(side) -> None:
    """cuBLAS called directly captures only on the capturing stream, with a workspace set after the stream."""
    stream, _ = side
    d = _device(_inputs(0))
    cublas.LIBRARY.cublasSetStream_v2(DIRECT_HANDLE, 0)
    with stream:
        stream.begin_capture()
        with pytest.raises(runtime.CUDARuntimeError, match="not the capturing stream"):
            _gemm_on(DIRECT_HANDLE, d)
        with pytest.raises(runtime.CUDARuntimeError, match="StreamCaptureInvalidated"):
            stream.end_capture()
    with stream:
        stream.begin_capture()
        cublas.LIBRARY.cublasSetStream_v2(DIRECT_HANDLE, stream.ptr)  # resets the workspace
        with pytest.raises(runtime.CUDARuntimeError, match="without a user workspace"):
            _gemm_on(DIRECT_HANDLE, d)
        with pytest.raises(runtime.CUDARuntimeError, match="StreamCaptureInvalidated"):
            stream.end_capture()
    with stream:
        stream.begin_capture()
        with pytest.raises(runtime.CUDARuntimeError, match="cublasCreate_v2"):
            _direct_handle()
        with pytest.raises(runtime.CUDARuntimeError, match="StreamCaptureInvalidated"):
            stream.end_capture()
    with pytest.raises(RuntimeError, match="race"):  # eager, on a stream other than the current one
        _gemm_on(DIRECT_HANDLE, d)


def _gemm_on(handle: int, d: dict) -> None:
    alpha, beta = np.array(1.0, np.float32), np.array(0.0, np.float32)
    cublas.LIBRARY.cublasGemmEx(handle, 0, 0, 4, 4, 4, alpha.ctypes.data, d["a"].data.ptr, runtime.CUDA_R_32F, 4,
                                d["b"].data.ptr, runtime.CUDA_R_32F, 4, beta.ctypes.data, d["t"].data.ptr,
                                runtime.CUDA_R_32F, 4, cublas.CUBLAS_COMPUTE_32F, -1)


def test_cublas_alpha_is_frozen_in_host_pointer_mode_and_read_in_device_mode(side) -> None:
    stream, _ = side
    handle = DIRECT_HANDLE
    a, b = cp.ones((2, 2), np.float32), cp.ones((2, 2), np.float32)
    out_host, out_device = cp.zeros((2, 2), np.float32), cp.zeros((2, 2), np.float32)
    alpha_host, zero = np.array(1.0, np.float32), np.array(0.0, np.float32)
    alpha_device, zero_device = cp.ones((1,), np.float32), cp.zeros((1,), np.float32)

    def gemm(out, alpha, beta):
        cublas.LIBRARY.cublasGemmEx(_on_current_stream(handle), 0, 0, 2, 2, 2, alpha, a.data.ptr, runtime.CUDA_R_32F,
                                    2, b.data.ptr, runtime.CUDA_R_32F, 2, beta, out.data.ptr, runtime.CUDA_R_32F, 2,
                                    cublas.CUBLAS_COMPUTE_32F, -1)

    def work():
        gemm(out_host, alpha_host.ctypes.data, zero.ctypes.data)
        cublas.setPointerMode(handle, cublas.CUBLAS_POINTER_MODE_DEVICE)
        try:
            gemm(out_device, alpha_device.data.ptr, zero_device.data.ptr)
        finally:
            cublas.setPointerMode(handle, cublas.CUBLAS_POINTER_MODE_HOST)

    _, graph = capture(stream, work)
    alpha_host[...] = 3.0
    alpha_device[...] = 3.0
    graph.launch()
    np.testing.assert_array_equal(out_host.get(), np.full((2, 2), 2.0))  # 1 * (ones @ ones)
    np.testing.assert_array_equal(out_device.get(), np.full((2, 2), 6.0))


def test_a_generator_keeps_its_state_on_the_device_so_each_replay_draws_the_next_numbers(side) -> None:
    stream, _ = side
    eager = cp.random.default_rng(7)
    first, second = eager.standard_normal(5, np.float32).get(), eager.standard_normal(5, np.float32).get()
    captured = cp.random.default_rng(7)
    out, graph = capture(stream, lambda: captured.standard_normal(5, np.float32))
    graph.launch()
    np.testing.assert_array_equal(out.get(), first)  # the capture did not advance the generator
    graph.launch()
    np.testing.assert_array_equal(out.get(), second)


def test_a_replay_is_one_launch_without_allocations_copies_or_syncs(side) -> None:
    stream, _ = side
    x = cp.ones(8, np.float32)
    _, graph = capture(stream, lambda: x.__imul__(2.0) + (x * 3.0).sum())
    cp.counters.reset()
    graph.launch()
    assert {kind: cp.counters.total(kind) for kind in cp.KINDS} == {
        "launches": 1, "allocations": 0, "h2d": 0, "d2h": 0, "syncs": 0}
    assert cp.counters.kernels() == {"cudaGraphLaunch": 1}
    assert graph.nodes == ["multiply", "multiply", "sum", "add"]


def test_temporaries_freed_during_a_capture_are_reused_in_stream_order(side) -> None:
    stream, pool = side
    x = cp.arange(6, dtype=np.float32)

    def work():
        for _ in range(3):  # each temporary goes back to the private pool and the next takes its block
            y = x * 2.0
            x[...] = y + 1.0
        return None

    _, graph = capture(stream, work)
    # Six temporaries in three blocks: the next y is made while the last one is still bound.
    assert pool.total_bytes() == 3 * 512
    graph.launch()
    np.testing.assert_array_equal(x.get(), ((np.arange(6) * 2 + 1) * 2 + 1) * 2 + 1)


# ------------------------------------------------------------------ refusals
_OPENED: list = []  # contexts a refusal enters (kept alive: a dropped generator context would exit at once)


def _enter(context) -> None:
    _OPENED.append(context)
    context.__enter__()


REFUSED = {
    "item": (lambda x: x.sum().item(), "a device-to-host copy (item)"),
    "get": (lambda x: x.get(), "a device-to-host copy (get)"),
    "bool": (lambda x: bool(x[0] > 0), "a device-to-host copy (bool)"),
    "float": (lambda x: float(x[0]), "a device-to-host copy (float)"),
    "repr": (lambda x: repr(x), "a device-to-host copy (repr)"),
    "mask_indexing": (lambda x: x[x > 0], "a device-to-host copy (mask)"),
    "nonzero": (lambda x: cp.nonzero(x), "a device-to-host copy (nonzero)"),
    "non_blocking_get": (lambda x: x.get(blocking=False), "a device-to-host copy (get)"),
    "asarray_pageable": (lambda x: cp.asarray(np.ones(3)), "a host-to-device copy from pageable"),
    "asarray_pinned": (lambda x: cp.asarray(np.frombuffer(cp.cuda.alloc_pinned_memory(16), np.float32, 4)),
                       "a host-to-device copy from pinned"),
    "set": (lambda x: x.set(np.ones(x.shape, x.dtype)), "a host-to-device copy from pageable"),
    "host_index": (lambda x: x[[0, 1]], "a host-to-device copy from pageable"),
    "stream_synchronize": (lambda x: cp.cuda.get_current_stream().synchronize(), "a synchronisation (Stream.synchronize)"),
    "device_synchronize": (lambda x: cp.cuda.Device().synchronize(), "a synchronisation (Device.synchronize)"),
    "runtime_synchronize": (lambda x: runtime.deviceSynchronize(), "a synchronisation (deviceSynchronize)"),
    "event_synchronize": (lambda x: cp.cuda.Event().synchronize(), "a synchronisation (Event.synchronize)"),
    "stream_query": (lambda x: cp.cuda.get_current_stream().done, "a query (Stream.done)"),
    "event_query": (lambda x: cp.cuda.Event().done, "a query (Event.done)"),
    "free_all_blocks": (lambda x: cp.get_default_memory_pool().free_all_blocks(), "releasing pool memory"),
    "default_pool": (lambda x: _enter(cp.cuda.using_allocator(None)) or x * 2,
                     "an allocation from the default memory pool"),
    "other_stream": (lambda x: _enter(cp.cuda.Stream.null) or x.__imul__(2), "device work on <Stream null>"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_capture_refuses_what_cuda_refuses_naming_the_operation_and_the_line(name) -> None:
    refused, what = REFUSED[name]
    stream, pool = cp.cuda.Stream(non_blocking=True), cp.cuda.MemoryPool()
    x = cp.arange(1.0, 5.0, dtype=np.float32)
    transfer = "host-to-device" in what or "device-to-host" in what
    with cp.cuda.using_allocator(pool.malloc), stream:
        stream.begin_capture()
        with pytest.raises(RuntimeError if transfer else runtime.CUDARuntimeError) as info:
            refused(x)
        if transfer:  # CuPy's own refusal, before CUDA: its RuntimeError and text, and the capture goes on
            stream.end_capture()
        else:
            with pytest.raises(runtime.CUDARuntimeError) as ended:
                stream.end_capture()
        while _OPENED:  # inside out, before the contexts they were entered in
            _OPENED.pop().__exit__(None, None, None)
    assert cp.cuda.memory._thread_local.allocator is None and cp.cuda.get_current_stream() is cp.cuda.Stream.null
    error = str(info.value)
    if transfer:
        direction = "H2D" if "host-to-device" in what else "D2H"
        assert type(info.value) is RuntimeError
        assert error.startswith(f"the current stream is capturing, so {direction} transfers are disallowed (")
        assert what in error and re.search(r"test_cuda_standin_capture\.py:\d+ \(<lambda>\)", error), error
        np.testing.assert_array_equal(x.get(), [1, 2, 3, 4])
        return
    assert info.value.status == runtime.cudaErrorStreamCaptureUnsupported
    assert error.startswith("cudaErrorStreamCaptureUnsupported: operation not permitted when stream is capturing (")
    assert what in error
    assert re.search(r"test_cuda_standin_capture\.py:\d+ \(<lambda>\)", error), error
    assert ended.value.status == runtime.cudaErrorStreamCaptureInvalidated and what in str(ended.value)
    np.testing.assert_array_equal(x.get(), [1, 2, 3, 4])  # and nothing of the capture ran


def test_global_mode_refuses_pool_growth_that_relaxed_mode_allows() -> None:
    stream, pool = cp.cuda.Stream(non_blocking=True), cp.cuda.MemoryPool()
    x = cp.ones(100, np.float32)
    with cp.cuda.using_allocator(pool.malloc), stream:
        stream.begin_capture(runtime.streamCaptureModeGlobal)
        with pytest.raises(runtime.CUDARuntimeError, match=r"grows the pool \(cudaMalloc, an unsafe call in "
                                                              r"streamCaptureModeGlobal"):
            x * 2
        with pytest.raises(runtime.CUDARuntimeError):
            stream.end_capture()
        stream.begin_capture(runtime.streamCaptureModeRelaxed)
        y = x * 2  # CuPy's default: the private pool may grow
        stream.end_capture()
        del y
        stream.begin_capture(runtime.streamCaptureModeGlobal)
        z = x * 3  # the block the relaxed capture freed is reused: no growth, so global mode allows it
        stream.end_capture().launch()
        np.testing.assert_array_equal(z.get(), np.full(100, 3.0))


def test_a_graph_refuses_to_run_on_memory_its_owner_freed_since_the_capture(side) -> None:
    stream, _ = side
    with cp.cuda.using_allocator(None):  # made outside the capture, in the shared pool
        table = cp.ones(4, np.float32)
    out = cp.zeros(4, np.float32)
    _, graph = capture(stream, lambda: cp.multiply(table, 2.0, out=out))
    graph.launch()
    del table  # a cache dropping an array the graph still reads
    with pytest.raises(RuntimeError, match=r"node 0 \(multiply\) uses device memory allocated outside the "
                                           r"graph's pool that has been freed since the capture"):
        graph.launch()


def test_capture_misuse_is_refused_as_cupy_and_cuda_do(side) -> None:
    stream, _ = side
    with pytest.raises(RuntimeError, match=r"^cannot capture on the default \(legacy\) stream$"):
        cp.cuda.Stream.null.begin_capture()
    with pytest.raises(runtime.CUDARuntimeError, match=r"cudaErrorIllegalState.*is not capturing"):
        stream.end_capture()
    with pytest.raises(NotImplementedError, match="must be created via stream capture"):
        cp.cuda.graph.Graph()
    other = cp.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        assert stream.is_capturing() and not other.is_capturing()
        assert runtime.streamIsCapturing(stream.ptr)
        with pytest.raises(runtime.CUDARuntimeError, match="already capturing"):
            other.begin_capture()
        stream.end_capture()
    assert not stream.is_capturing()


def test_a_graph_launched_inside_a_capture_becomes_one_node_of_it(side) -> None:
    stream, _ = side
    x = cp.ones(3, np.float32)
    _, inner = capture(stream, lambda: x.__iadd__(1.0))
    _, outer = capture(stream, lambda: (inner.launch(), x.__imul__(10.0)))
    assert outer.nodes == ["cudaGraphLaunch", "multiply"]
    outer.launch()
    np.testing.assert_array_equal(x.get(), [20.0] * 3)
