"""The CUDA stand-in itself: CuPy's strictness, views, host reads, counters, pool, cuBLAS checks, kernels.

Each behaviour is CuPy's (cupy/_core/core.pyx and friends) unless a test says
otherwise; the test suite relies on them to see on a CPU what a GPU run shows.
"""

from __future__ import annotations

import ast
import ctypes
import gc
import os

import ml_dtypes
import numpy as np
import pytest

import cupy_standin as cp
from tests.support.threads import run_threads
from cupy_standin import cublas, cublaslt, kernels, runtime
from tests.support import REPO

STANDIN_DIR = os.path.dirname(cp.__file__)


@pytest.fixture
def counters():
    # Earlier tests' cyclic garbage freed now: a block it holds, freed by a collection in the middle of the test,
    # would move the pool's addresses (test_a_repeated_step_gets_the_same_addresses failed so in a shuffled run).
    gc.collect()
    cp.get_default_memory_pool().free_all_blocks()
    cp.counters.reset()
    return cp.counters


def counts(c) -> dict:
    return {kind: c.total(kind) for kind in cp.KINDS}


# ------------------------------------------------------------- strictness
def test_implicit_conversion_to_numpy_is_cupys_type_error() -> None:
    x = cp.arange(3.0)
    message = "Implicit conversion to a NumPy array is not allowed. Please use `.get()` to construct a NumPy array explicitly."
    for convert in (np.asarray, np.array, lambda a: np.float64(1.0) * np.ones(3) + a.__array__()):
        with pytest.raises(TypeError) as info:
            convert(x)
        assert str(info.value) == message
    assert not isinstance(x, np.ndarray)


def test_numpy_arrays_in_device_operations_are_refused() -> None:
    x, host = cp.arange(3.0), np.ones(3)
    for op in (lambda: x + host, lambda: host + x, lambda: cp.maximum(x, host), lambda: np.exp(host) * x,
               lambda: cp.where(x > 0, host, x), lambda: x.__iadd__(host)):
        with pytest.raises(TypeError, match=r"^Unsupported type <class 'numpy\.ndarray'>$"):
            op()
    with pytest.raises(TypeError, match="Unsupported type <class 'list'>"):
        cp.add(x, [1, 2, 3])
    # Python and NumPy scalars are fine, and NumPy's ufuncs and functions dispatch to the device.
    assert type(x * np.float32(2) + 1) is cp.ndarray and type(np.exp(x)) is cp.ndarray
    assert type(np.sum(x)) is cp.ndarray and np.sum(x).get() == 3.0


def test_zero_d_results_stay_on_the_device_and_reads_are_counted(counters) -> None:
    x = cp.asarray(np.array([1.5, -2.0, 4.0], np.float32))
    total, first = x.sum(), x[0]
    assert type(total) is cp.ndarray and total.shape == () and type(first) is cp.ndarray
    before = counts(counters)
    assert total.item() == 3.5 and float(first) == 1.5 and bool(x[2] > 0) and int(x[1]) == -2
    assert x.tolist() == [1.5, -2.0, 4.0] and "1.5" in repr(x) and cp.asnumpy(x).dtype == np.float32
    after = counts(counters)
    assert after["d2h"] - before["d2h"] == 7 and after["syncs"] - before["syncs"] == 7
    with pytest.raises(ValueError, match="can only convert an array of size 1"):
        x.item()
    with pytest.raises(ValueError, match="more than one element is ambiguous"):
        bool(x)
    assert cp.asnumpy(np.ones(2)).tolist() == [1.0, 1.0]  # a host value passes through, as in CuPy


def test_views_share_memory_and_cost_nothing(counters) -> None:
    x = cp.arange(12.0).reshape(3, 4).copy()
    before = counts(counters)
    views = [x.T, x.reshape(4, 3), x[1], x[:, 1:3], x[None], x[0, 2], x.swapaxes(0, 1), cp.expand_dims(x, 0),
             cp.broadcast_to(x[0], (5, 4)), x.ravel(), x.view(np.int64)]
    assert counts(counters) == before  # no launch, no allocation
    assert all(v.base is x for v in views) and x[0, 2].shape == ()
    x[0, 2] = 100.0
    assert views[5].item() == 100.0 and views[0][2, 0].item() == 100.0
    assert x.T.data.ptr == x.data.ptr and x[1].data.ptr == x.data.ptr + 4 * 8
    launches = counters.total("launches")
    copied = x.T.reshape(12)  # not expressible as a view: a copy kernel
    assert copied.base is None and counters.total("launches") == launches + 1
    assert not x.T.flags.c_contiguous and x.T.flags.f_contiguous and x.flags.owndata and not x.T.flags.owndata


def test_boolean_masks_and_nonzero_read_a_count_on_the_host(counters) -> None:
    x = cp.arange(6.0)
    before = counts(counters)
    picked, (index,) = x[x > 2], cp.nonzero(x > 3)
    after = counts(counters)
    assert (after["syncs"] - before["syncs"], after["d2h"] - before["d2h"]) == (2, 2)  # one count read each
    assert picked.get().tolist() == [3.0, 4.0, 5.0] and index.get().tolist() == [4, 5]


def test_setitem_from_host_values_follows_cupy(counters) -> None:
    x = cp.zeros((2, 3), np.float32)
    x[0] = 1.5  # a scalar: fill
    x[1, :] = np.float32(2.0)
    with pytest.raises(ValueError, match="non-scalar numpy.ndarray cannot be used for fill"):
        x[0] = np.ones(3)
    before = counters.total("h2d")
    x[np.array([0, 1]), np.array([2, 0])] = np.array([7.0, 8.0])  # advanced: the host value is uploaded
    assert counters.total("h2d") - before == 3  # two index arrays and the values
    x[:, 1] = x[:, 0]
    assert x.get().tolist() == [[1.5, 1.5, 7.0], [8.0, 8.0, 2.0]]


def test_integer_array_indices_out_of_range_wrap_as_in_cupy() -> None:
    """CuPy takes an integer-array index modulo its axis's length, reading and writing
    (cupy/_core/_routines_indexing.pyx: _prepare_array_indexing, the scatter kernels' indices % adim)."""
    x = cp.arange(10.0).reshape(2, 5)
    assert x[:, cp.asarray([7, -6])].get().tolist() == [[2.0, 4.0], [7.0, 9.0]]
    assert x[cp.asarray([3]), cp.asarray([-1])].get().tolist() == [9.0]
    x[..., np.array([5])] = -1.0  # a host index array too: it is uploaded, then wrapped
    x[cp.asarray([-3]), 1] = -2.0
    assert x.get().tolist() == [[-1.0, 1.0, 2.0, 3.0, 4.0], [-1.0, -2.0, 7.0, 8.0, 9.0]]
    with pytest.raises(IndexError):
        x[2]  # an integer (basic indexing) is checked, as in CuPy


def test_default_rng_keeps_cupys_curand_states_on_the_device() -> None:
    """CuPy's default_rng is XORWOW with one 48-byte curandState per thread, 8 * 256 threads per multiprocessor
    (cupy/random/_bit_generator.pyx, _cuRANDGenerator): 12 MiB of device memory on an H200."""
    pool = cp.get_default_memory_pool()
    before = pool.used_bytes()
    rng = cp.random.default_rng(0)
    size = 48 * 8 * 256 * runtime.getDeviceProperties(0)["multiProcessorCount"]
    assert rng.bit_generator._state.nbytes == size and pool.used_bytes() - before >= size


def test_missing_cupy_functions_fail_loudly() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'errstate'"):
        cp.errstate  # noqa: B018 - CuPy has no errstate: code calling xp.errstate breaks on a GPU
    with pytest.raises(AttributeError, match="has no attribute 'permutation'"):
        cp.random.default_rng(0).permutation(3)  # CuPy's Generator has none either
    with pytest.raises(TypeError, match="no implementation found for 'numpy.histogram'"):
        np.histogram(cp.arange(3.0))  # not in the stand-in: NumPy's dispatch refuses, as with CuPy
    with pytest.raises(AttributeError):
        cp.arange(3.0).tofile  # noqa: B018


def test_float16_reductions_accumulate_in_float32() -> None:
    """CuPy's reduce type for float16/bfloat16 is float: 4096 ones sum to 4096 (a float16 sum stops at 2048)."""
    for dtype in (np.float16, ml_dtypes.bfloat16):
        ones = cp.ones((4096, 2), dtype)
        total = ones.sum(axis=0)
        assert total.dtype == dtype and total.get().astype(np.float32).tolist() == [4096.0, 4096.0]
    assert np.ones((4096, 2), np.float16).sum(axis=0).tolist() == [2048.0, 2048.0]  # what NumPy does


def test_ufunc_out_and_at_and_kernel_names(counters) -> None:
    x, y = cp.arange(4.0), cp.ones(4)
    cp.add(x, y, out=y)
    cp.add.at(x, cp.asarray(np.array([0, 0, 3])), 1.0)
    x += 1
    assert y.get().tolist() == [1.0, 2.0, 3.0, 4.0] and x.get().tolist() == [3.0, 2.0, 3.0, 5.0]
    assert {"add", "add.at"} <= set(counters.kernels())


# ---------------------------------------------------------------- counters
def test_counters_by_phase_and_kernel(counters) -> None:
    with counters.phase("forward"):
        a = cp.ones((2, 2), np.float32)
        b = cp.exp(a) + a
    with counters.phase("backward"):
        b.sum().item()
    snap = counters.snapshot()
    assert snap["forward"]["launches"] == 3 and snap["forward"]["allocations"] == 3
    assert snap["forward"]["kernels"] == {"add": 1, "exp": 1, "fill": 1}
    assert snap["backward"]["syncs"] == 1 and snap["backward"]["d2h"] == 1
    assert counters.phases() == ["forward", "backward"] and counters.total("launches") == 4
    assert counters.report().splitlines()[0] == ("forward: 3 launches (add 1, exp 1, fill 1), 3 allocations, "
                                                 "0 h2d, 0 d2h, 0 syncs")
    with pytest.raises(ValueError, match="unknown kind"):
        counters.total("copies")


# -------------------------------------------------------------------- pool
def test_pool_rounds_to_512_bytes_and_reuses_the_lowest_free_address() -> None:
    pool = cp.cuda.MemoryPool()  # a pool of its own: no blocks freed by earlier tests
    a, b, c = pool.malloc(40), pool.malloc(512), pool.malloc(513)
    assert pool.used_bytes() == 512 + 512 + 1024 and pool.free_bytes() == 0
    assert all(m.ptr % 256 == 0 for m in (a, b, c))
    ptrs = sorted([a.ptr, b.ptr])
    del b, a  # freed in either order ...
    first, second = pool.malloc(1), pool.malloc(100)
    assert [first.ptr, second.ptr] == ptrs  # ... handed out lowest address first
    assert pool.total_bytes() == pool.used_bytes() + pool.free_bytes() == 2048
    del first, second, c
    assert pool.used_bytes() == 0 and pool.free_bytes() == 2048 and pool.n_free_blocks() == 3
    pool.free_all_blocks()
    assert pool.total_bytes() == 0
    assert cp.empty(0).data.ptr == 0  # an empty array takes no block
    x = cp.empty(10, np.float32)
    assert x.data.mem.size == 512 and x.data.ptr % 256 == 0  # arrays come from the default pool the same way


def test_a_repeated_step_gets_the_same_addresses(counters) -> None:
    w = cp.ones((8, 8), np.float32)

    def step() -> list:
        h = w @ w
        g = cp.maximum(h, 0) * 2
        return [h.data.ptr, g.data.ptr, (g.sum() + h.sum()).data.ptr]

    step()
    assert step() == step() == step()


def test_resolve_refuses_memory_outside_live_allocations() -> None:
    x = cp.empty(16, np.float32)
    ptr = x.data.ptr
    with pytest.raises(ValueError, match="run past the end of their allocation"):
        cp.ndarray((1000,), np.float32, memptr=x.data)
    del x
    with pytest.raises(ValueError, match="not inside any live device allocation"):
        cublas._matrix("gemmEx", "A", ptr, np.dtype(np.float32), 2, 2, 2)


def test_a_pointer_copy_must_stay_inside_live_allocations() -> None:
    src, dst = cp.arange(16, dtype=np.float32), cp.zeros(16, np.float32)
    with pytest.raises(ValueError, match="copy_from_device_async: source: 64 bytes at .* run past the end"):
        dst.data.copy_from_device_async(src.data + 4, 64)
    with pytest.raises(ValueError, match="copy_from_device_async: destination: 68 bytes at .* run past the end"):
        dst.data.copy_from_device_async(src.data, 68)
    dst.data.copy_from_device_async(src.data + 4, 60)
    np.testing.assert_array_equal(dst.get(), np.r_[np.arange(1, 16), 0].astype(np.float32))


def test_allocators_and_the_pinned_pool() -> None:
    calls = []

    def recording(nbytes):
        calls.append(nbytes)
        return cp.get_default_memory_pool().malloc(nbytes)

    global_allocator = cp.cuda.get_allocator()
    with cp.cuda.using_allocator(recording):
        cp.empty(3, np.float64)
        with pytest.raises(ValueError, match="Can't change the global allocator inside `using_allocator`"):
            cp.cuda.set_allocator(recording)
    assert calls == [24] and cp.cuda.get_allocator() == global_allocator
    pinned = cp.cuda.alloc_pinned_memory(64)
    host = np.frombuffer(pinned, np.float32, 16)
    host[:] = 3.0
    assert pinned.size == 64 and pinned.ptr == host.ctypes.data


# ------------------------------------------------------- devices, streams
def test_devices_streams_and_events(counters) -> None:
    assert runtime.getDeviceCount() == 1 and cp.cuda.Device().id == 0
    with pytest.raises(runtime.CUDARuntimeError, match="cudaErrorInvalidDevice: invalid device ordinal"):
        with cp.cuda.Device(1):
            pass
    before = counters.total("syncs")
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        assert cp.cuda.get_current_stream() is stream and stream.done
    assert cp.cuda.get_current_stream() is cp.cuda.Stream.null
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    end.record()
    end.synchronize()
    cp.cuda.Device().synchronize()
    runtime.deviceSynchronize()
    assert counters.total("syncs") - before == 3 and cp.cuda.get_elapsed_time(start, end) >= 0.0


# ------------------------------------------------------------------ cuBLAS
def _gemm_args(a, b, out, m, n, k, lda, ldb, ldc, a_type=runtime.CUDA_R_16F, c_type=runtime.CUDA_R_16F,
               compute=cublas.CUBLAS_COMPUTE_32F):
    one, zero = np.ones((), np.float32), np.zeros((), np.float32)
    return (cp.cuda.device.get_cublas_handle(), cublas.CUBLAS_OP_N, cublas.CUBLAS_OP_N, m, n, k, one.ctypes.data,
            a.data.ptr, a_type, lda, b.data.ptr, a_type, ldb, zero.ctypes.data, out.data.ptr, c_type, ldc, compute,
            cublas.CUBLAS_GEMM_DEFAULT)


def test_gemm_ex_checks_what_cublas_checks() -> None:
    a, b = cp.ones((3, 4), np.float16), cp.ones((4, 5), np.float16)
    out = cp.full((3, 5), np.nan, np.float16)  # beta is 0: C's garbage must not be read
    # Row-major out = a @ b is column-major out^T = b^T @ a^T: b first, m=5, n=3, k=4.
    cublas.gemmEx(*_gemm_args(b, a, out, 5, 3, 4, 5, 4, 5))
    assert out.get().tolist() == [[4.0] * 5] * 3
    with pytest.raises(cublas.CUBLASError, match=r"CUBLAS_STATUS_INVALID_VALUE \(gemmEx: lda=4 < max\(1, 5\)\)"):
        cublas.gemmEx(*_gemm_args(b, a, out, 5, 3, 4, 4, 4, 5))
    with pytest.raises(cublas.CUBLASError, match="CUBLAS_STATUS_NOT_SUPPORTED"):
        cublas.gemmEx(*_gemm_args(b, a, out, 5, 3, 4, 5, 4, 5, compute=cublas.CUBLAS_COMPUTE_64F))
    with pytest.raises(cublas.CUBLASError, match="CUBLAS_STATUS_NOT_SUPPORTED"):
        cublas.gemmEx(*_gemm_args(b, a, out, 5, 3, 4, 5, 4, 5, c_type=runtime.CUDA_R_16BF))
    # k=8 reads 40 elements of a 20-element operand: refused, although inside its 512-byte pool block
    with pytest.raises(ValueError, match=r"matrix A: 80 bytes at .* run past the end of their allocation "
                                         r"\(0x[0-9a-f]+, 40 bytes\) by 40 bytes"):
        cublas.gemmEx(*_gemm_args(b, a, out, 5, 3, 8, 5, 8, 5))
    with pytest.raises(cublas.CUBLASError, match="CUBLAS_STATUS_NOT_INITIALIZED"):
        cublas.gemmEx(12345, *_gemm_args(b, a, out, 5, 3, 4, 5, 4, 5)[1:])
    with pytest.raises(OverflowError, match="value too large to convert to int"):
        cublas.gemmEx(*_gemm_args(b, a, out, 2 ** 31, 3, 4, 5, 4, 5))


def test_gemm_ex_accumulates_in_float32_and_reads_device_scalars() -> None:
    ones = cp.ones((1, 4096), np.float16)
    out = cp.empty((1, 1), np.float16)
    # Column-major A (1 x 4096, lda 1) and B (4096 x 1, ldb 4096) are both the contiguous row of ones.
    cublas.gemmEx(*_gemm_args(ones, ones, out, 1, 1, 4096, 1, 4096, 1))
    assert out.item() == 4096.0  # a float16 accumulator would stop at 2048
    handle = cp.cuda.device.get_cublas_handle()
    alpha, beta = cp.asarray(np.array(0.5, np.float32)), cp.asarray(np.array(1.0, np.float32))
    args = list(_gemm_args(ones, ones, out, 1, 1, 4096, 1, 4096, 1))
    args[6], args[13] = alpha.data.ptr, beta.data.ptr
    cublas.setPointerMode(handle, cublas.CUBLAS_POINTER_MODE_DEVICE)
    try:
        cublas.gemmEx(*args)
    finally:
        cublas.setPointerMode(handle, cublas.CUBLAS_POINTER_MODE_HOST)
    assert out.item() == 0.5 * 4096 + 4096


# ------------------------------------------------------------------ kernels
def test_ptx_float16_conversions_are_recognised_and_other_assembly_refused() -> None:
    source = r'''
extern "C" __global__ void k(const unsigned short* x, unsigned short* y) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x[threadIdx.x]));
    unsigned short h;
    const float g = f * 3.0f;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(g));
    y[threadIdx.x] = h;
}'''
    # An operand here is an expression, not a name: only the two forms CUDA code writes are known.
    with pytest.raises(ValueError, match="inline PTX on line 4"):
        cp.RawKernel(source, "k")
    source = source.replace("(x[threadIdx.x])", "(xi)").replace("float f;", "float f; unsigned short xi = x[threadIdx.x];")
    kernel = cp.RawKernel(source, "k")
    if kernels.CXX is None:
        pytest.skip("no g++")  # pragma: no cover - CI has g++
    x = cp.asarray(np.array([1.0, 2.5, 65504.0], np.float16)).view(np.uint16)
    y = cp.empty(3, np.uint16)
    kernel((1,), (3,), (x, y))
    assert y.view(np.float16).get().tolist() == [3.0, 7.5, np.inf]


def test_syncthreads_runs_a_blocks_threads_up_to_the_barrier_and_shared_memory_is_the_blocks() -> None:
    source = r'''
extern "C" __global__ void k(const float* x, float* y, const int diverge) {
    __shared__ float buf[4];
    buf[threadIdx.x] = x[blockIdx.x * blockDim.x + threadIdx.x];
    if (diverge && threadIdx.x == 2) return;
    __syncthreads();
    y[blockIdx.x * blockDim.x + threadIdx.x] = buf[blockDim.x - 1 - threadIdx.x];  // a later thread's write
}'''
    if kernels.CXX is None:
        pytest.skip("no g++")  # pragma: no cover - CI has g++
    kernel = cp.RawKernel(source, "k")
    x, y = cp.arange(8, dtype=np.float32), cp.zeros(8, np.float32)
    kernel((2,), (4,), (x, y, np.int32(0)))
    assert y.get().tolist() == [3, 2, 1, 0, 7, 6, 5, 4]
    with pytest.raises(RuntimeError, match="k: a thread returned while others of its block waited at __syncthreads"):
        kernel((2,), (4,), (x, y, np.int32(1)))


def test_a_vector_access_at_a_misaligned_address_is_cudas_misaligned_address_error() -> None:
    """CUDA's uint2/uint4/float4 carry 8/16-byte alignment; a GPU faults on a load or store of one elsewhere."""
    source = r'''
extern "C" __global__ void k(const unsigned short* x, float* y) {
    const uint2 a = *reinterpret_cast<const uint2*>(x);
    *reinterpret_cast<float4*>(y) = make_float4((float)(a.x & 0xffffu), (float)(a.x >> 16),
                                                (float)(a.y & 0xffffu), (float)(a.y >> 16));
}'''
    if kernels.CXX is None:
        pytest.skip("no g++")  # pragma: no cover - CI has g++
    kernel = cp.RawKernel(source, "k")
    x, y = cp.arange(16, dtype=np.uint16), cp.zeros(12, np.float32)
    kernel((1,), (1,), (x[4:], y[4:]))  # 8 and 16 bytes into their allocations
    assert y.get()[4:8].tolist() == [4, 5, 6, 7]
    with pytest.raises(runtime.CUDARuntimeError, match=r"cudaErrorMisalignedAddress: misaligned address \(k: "
                       r"'const struct uint2' at 0x[0-9a-f]+, which needs 8-byte alignment on line 3 of its source"):
        kernel((1,), (1,), (x[1:], y[4:]))
    with pytest.raises(runtime.CUDARuntimeError, match=r"'struct float4' at 0x[0-9a-f]+, which needs 16-byte"):
        kernel((1,), (1,), (x[4:], y[2:]))
    kernel((1,), (1,), (x[8:], y[8:]))  # the error went with its launch
    assert y.get()[8:12].tolist() == [8, 9, 10, 11]


def test_the_package_imports_only_numpy_ml_dtypes_and_the_standard_library() -> None:
    allowed = {"numpy", "ml_dtypes"}
    for name in sorted(os.listdir(STANDIN_DIR)):
        if not name.endswith(".py"):
            continue
        # the NCCL stand-in carries its collectives over MPI: mpi4py, imported inside a function on first use
        allowed = {"numpy", "ml_dtypes", "mpi4py"} if name == "nccl.py" else {"numpy", "ml_dtypes"}
        tree = ast.parse(open(os.path.join(STANDIN_DIR, name)).read())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                assert node.level <= 1 and not (node.module or "").startswith("tinyamp"), (name, node.module)
                if node.level == 0:
                    assert node.module.split(".")[0] in allowed | set(_stdlib()), (name, node.module)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    assert alias.name.split(".")[0] in allowed | set(_stdlib()), (name, alias.name)


def _stdlib() -> frozenset:
    import sys  # noqa: PLC0415
    return sys.stdlib_module_names | {"__future__"}


def test_watch_sees_every_event_with_its_detail_and_can_refuse_one(counters) -> None:
    """What a capture-safety mode builds on: a listener that raises stops the operation's caller."""
    seen = []
    host, pinned = np.ones(4, np.float32), cp.cuda.alloc_pinned_memory(16)
    staged = np.frombuffer(pinned, np.float32, 4)
    with counters.watch(lambda kind, detail: seen.append((kind, detail))):
        x = cp.asarray(host)
        y = cp.asarray(staged)
        (x + y).sum().item()
        cp.cuda.Device().synchronize()
    pool = cp.get_default_memory_pool()
    assert seen == [("allocations", pool), ("h2d", "pageable"), ("allocations", pool), ("h2d", "pinned"),
                    ("allocations", pool), ("launches", "add"), ("allocations", pool), ("launches", "sum"),
                    ("d2h", "item"), ("syncs", "item"), ("syncs", "Device.synchronize")]

    def refuse_syncs(kind, detail):
        if kind == "syncs":
            raise RuntimeError(f"a host synchronisation ({detail}) during capture")

    with counters.watch(refuse_syncs):
        (x * 2).sum()  # fine: launches and allocations only
        with pytest.raises(RuntimeError, match=r"a host synchronisation \(bool\) during capture"):
            bool(x[0] > 0)
    assert bool(x[0] > 0)  # the listener is gone


def test_import_tinyamp_does_not_load_the_stand_in() -> None:
    """The stand-in is loaded only when asked for (TINYAMP_CUDA=standin, use_cuda_standin(), a test fixture)."""
    import subprocess
    import sys
    code = ("import sys, tinyamp\n"
            "loaded = sorted(m for m in sys.modules if m.startswith('cupy_standin'))\n"
            "assert not loaded, loaded\n"
            "tinyamp.backend.use_cuda_standin()\n"
            "assert 'cupy_standin' in sys.modules\n")
    env = {k: v for k, v in os.environ.items() if k != "TINYAMP_CUDA"}
    env["PYTHONPATH"] = str(REPO)
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr


def test_elementwise_kernel_takes_a_read_only_broadcast_input() -> None:
    """``y.sum().backward()`` through ReLU hands its kernel a broadcast (read-only) gradient: read, never written back."""
    import tinyamp as ta
    from tinyamp import backend

    ta.manual_seed(0)
    cpu_model = ta.nn.Sequential(ta.nn.Linear(8, 16), ta.nn.ReLU())
    x = ta.randn(4, 8)
    cpu_model(x).sum().backward()
    with backend.use_cuda_standin():
        model = ta.nn.Sequential(ta.nn.Linear(8, 16), ta.nn.ReLU()).to("cuda")
        model.load_state_dict(cpu_model.state_dict())
        model(x.to("cuda")).sum().backward()
        grad = model[0].weight.grad.to("cpu").numpy()
    np.testing.assert_allclose(grad, cpu_model[0].weight.grad.numpy(), rtol=1e-6)


def test_cublas_and_cublaslt_objects_made_by_threads_at_once_stay_distinct() -> None:
    """Real cuBLAS/cuBLASLt hand each caller its own handle, descriptor, layout and algorithm: so does the stand-in,
    even when threads create them at the same moment (two objects given one address would overwrite each other)."""
    lt, blas = cublaslt.LT_LIBRARY, cublas.LIBRARY
    made: list = []

    def make() -> None:
        for _ in range(300):
            ref = ctypes.c_void_p()
            lt.cublasLtMatrixLayoutCreate(ctypes.byref(ref), runtime.CUDA_R_16F, 4, 4, 4)
            made.append(("lt", ref.value))
            ref = ctypes.c_void_p()
            blas.cublasCreate_v2(ctypes.byref(ref))
            made.append(("blas", ref.value))

    assert run_threads(make, [()] * 8) == []
    assert len(set(made)) == len(made) == 8 * 300 * 2
    for kind, address in made:
        if kind == "lt":
            assert lt.objects[address]["kind"] == "layout"
        else:
            assert address in blas.handles
