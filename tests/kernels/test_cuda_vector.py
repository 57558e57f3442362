"""The vectorised CUDA kernels (kernels/cuda/cuda_vector.py) on the CUDA stand-in: the bits of their references.

Each kernel's source runs as C++ (the stand-in), thread by thread, over the
16-byte vector loop and the scalar tail, on aligned and misaligned arrays; the
reference is what the code path it replaces computes: ``maximum(x, 0)``,
``cuda_epilogue.relu_backward``, a broadcast copy, and NumPy's float32 column
sum (row by row into each column) rounded once.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.support import fused_drivers as fd
from tinyamp import backend
from cupy_standin import kernels as standin_kernels
from tinyamp.kernels.cuda import cuda_epilogue, cuda_vector
from tinyamp.kernels.cpu.elementwise_cpu import relu_lowp

pytestmark = pytest.mark.skipif(standin_kernels.CXX is None, reason="the CUDA stand-in runs kernels through g++")

DTYPES = [fd.F16, fd.BF16, fd.F32]
SPECIALS = np.float32([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 65504.0, -1e-8, -3.0, 2.5, 1e-40, -1e-40])


@pytest.fixture()
def cp():
    with backend.use_cuda_standin():
        yield backend.cupy()


def sample(shape, dtype, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    with np.errstate(all="ignore"):
        x = (rng.standard_normal(shape) * 3).astype(dtype)
        flat = x.reshape(-1)
        flat[:len(SPECIALS)] = SPECIALS[:flat.size].astype(dtype)
    return x


def launched(cp, name: str) -> int:
    return cp.counters.kernels().get(name, 0)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", [1, 7, 8, 64, 203, 4096 + 5])
def test_relu_gives_the_cpu_paths_bits(cp, dtype, n) -> None:
    x = sample(n, dtype)
    with np.errstate(all="ignore"):
        want = relu_lowp(x) if dtype != fd.F32 else np.maximum(x, 0)
    got = cuda_vector.relu(cp.asarray(x)).get()
    fd.assert_same_bits([got], [want], "relu")
    assert not np.signbit(got[:2]).any()  # -0.0 gives +0.0, as the CPU path and NumPy's float32 maximum


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_relu_on_a_misaligned_view_takes_the_scalar_loop(cp, dtype) -> None:
    base = cp.asarray(sample(1001, dtype))
    view = base[1:]  # 2 or 4 bytes past a 16-byte boundary
    assert not cuda_vector.aligned(view)
    with np.errstate(all="ignore"):
        want = relu_lowp(base.get()[1:]) if dtype != fd.F32 else np.maximum(base.get()[1:], 0)
        fd.assert_same_bits([cuda_vector.relu(view).get()], [want], "relu misaligned")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", [5, 16, 333])
def test_relu_backward_matches_the_epilogue_kernel(cp, dtype, n) -> None:
    gy, y = sample(n, dtype, 1), sample(n, dtype, 2)
    gy[len(SPECIALS):2 * len(SPECIALS)] = SPECIALS.astype(dtype)[:max(0, min(len(SPECIALS), n - len(SPECIALS)))] \
        if n > 2 * len(SPECIALS) else gy[len(SPECIALS):2 * len(SPECIALS)]
    want = cuda_epilogue.relu_backward(cp.asarray(gy), cp.asarray(y)).get()
    got = cuda_vector.relu_backward(cp.asarray(gy), cp.asarray(y))
    fd.assert_same_bits([got.get()], [want], "relu backward")
    with np.errstate(all="ignore"):
        fd.assert_same_bits([got.get()], [np.multiply(gy, y > 0, dtype=gy.dtype)], "relu backward vs NumPy")


def numpy_column_sum(g: np.ndarray) -> np.ndarray:
    """float32 row by row into each column, from 0.0 (NumPy's add.reduce over axis 0)."""
    return np.add.reduce(g.astype(np.float32), 0)


def chunked_column_sum(g: np.ndarray, rows: int) -> np.ndarray:
    parts = [numpy_column_sum(g[r:r + rows]) for r in range(0, g.shape[0], rows)]
    total = parts[0]
    for p in parts[1:]:
        total = total + p
    return total


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(1, 16), (33, 16), (128, 10), (5, 3)])
def test_column_sum_is_numpys_order_up_to_a_chunk_of_rows(cp, dtype, shape) -> None:
    g = sample(shape, dtype)
    with np.errstate(all="ignore"):
        acc = numpy_column_sum(g)
        want_float32 = acc
        got = cuda_vector.column_sum(cp.asarray(g), np.float32)
        fd.assert_same_bits([got.get()], [want_float32], "column sum float32")
        if dtype != fd.F32:
            fd.assert_same_bits([cuda_vector.column_sum(cp.asarray(g), dtype).get()], [acc.astype(dtype)],
                                "column sum rounded")
            fd.assert_same_bits([cuda_vector.column_sum(cp.asarray(g), np.float32, through=True).get()],
                                [acc.astype(dtype).astype(np.float32)], "column sum through 16 bits")
            # The CuPy path it replaces on the stand-in: the same bits.
            fd.assert_same_bits([cp.asarray(g).sum(axis=0, dtype=np.float32).get()], [acc], "cupy sum")


@pytest.mark.parametrize("chunk", [cuda_vector.SUM_ROWS, 32], ids=lambda c: f"chunk{c}")
@pytest.mark.parametrize("dtype", [fd.F16, fd.F32], ids=str)
def test_column_sum_over_many_rows_adds_the_chunks_in_order(cp, dtype, chunk) -> None:
    g = sample((cuda_vector.SUM_ROWS * 3 + 17, 24), dtype)
    kw = {} if chunk == cuda_vector.SUM_ROWS else {"chunk_rows": chunk}  # the default is what the ops use
    with np.errstate(all="ignore"):
        want = chunked_column_sum(g, chunk)
        fd.assert_same_bits([cuda_vector.column_sum(cp.asarray(g), np.float32, **kw).get()], [want], "chunked")
        # Again: the tickets went back to zero, so a second launch finishes the same way.
        fd.assert_same_bits([cuda_vector.column_sum(cp.asarray(g), np.float32, **kw).get()], [want], "chunked again")
        fd.assert_same_bits([cuda_vector.column_sum(cp.asarray(g)[:, 1:].copy(), np.float32, **kw).get()],
                            [chunked_column_sum(g[:, 1:], chunk)], "scalar columns")
    with pytest.raises(ValueError, match="column_sum: chunk_rows must be at least 1, got 0"):
        cuda_vector.column_sum(cp.asarray(g), np.float32, chunk_rows=0)


def test_column_sum_refuses_what_it_cannot_write(cp) -> None:
    g = cp.asarray(sample((4, 8), fd.F16))
    with pytest.raises(ValueError, match=r"column_sum: cannot sum float16 \[4, 8\] into bfloat16"):
        cuda_vector.column_sum(g, fd.BF16)
    with pytest.raises(ValueError, match=r"column_sum: cannot sum float32 \[4, 8\] into float32 through 16 bits"):
        cuda_vector.column_sum(g.astype(np.float32), np.float32, through=True)


def test_every_source_names_its_kernel_and_no_double() -> None:
    for name, source in cuda_vector.sources():
        assert f'extern "C" __global__ void {name}(' in source
        body = source.split(f'extern "C" __global__ void {name}(')[1]
        assert "double" not in body, name  # no float64 arithmetic in the kernels themselves


@pytest.mark.parametrize("arch", ["compute_80", "compute_90"])
def test_every_source_compiles_under_nvrtc(arch) -> None:
    """The real compiler, without a GPU (needs the NVRTC packages: cupy-cuda13x, nvidia-cuda-nvrtc)."""
    import os

    import cupy
    from cupy_backends.cuda.libs import nvrtc

    include = os.path.join(os.path.dirname(cupy.__file__), "_core", "include")
    failures = []
    for name, source in cuda_vector.sources():
        program = nvrtc.createProgram(source, f"{name}.cu", [], [])
        try:
            nvrtc.compileProgram(program, [f"-arch={arch}", f"-I{include}", "--fmad=false"])
        except nvrtc.NVRTCError:
            failures.append(f"{name}: {nvrtc.getProgramLog(program)}")
        finally:
            nvrtc.destroyProgram(program)
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("pair", cuda_vector.CONVERT_PAIRS, ids=lambda p: f"{p[0].name}-{p[1].name}")
@pytest.mark.parametrize("n", [3, 8, 40, 1000 + 3])
def test_convert_gives_astypes_bits(cp, pair, n) -> None:
    source, target = pair
    x = sample(n, source, 4)
    if source == fd.F32:  # values that round, overflow and underflow in 16 bits
        x[-3:] = np.float32([1.0009765625 + 2 ** -12, 70000.0, 3e-8])[:min(3, n)]
    with np.errstate(all="ignore"):
        want = x.astype(target)
    got = cuda_vector.convert(cp.asarray(x), target)
    fd.assert_same_bits([got.get()], [want], "convert")
    per = 4 if target == fd.F32 else 8  # a widening loads 8 bytes and stores 16; the others 16 and 16
    assert cuda_vector.convert_vectors(cp.asarray(x), got) == n // per  # fresh arrays: the vector loop
    if pair in cuda_vector.WIDENING_PAIRS:  # the layout it replaced, which bench_gpu times beside it: same bits
        fd.assert_same_bits([cuda_vector.convert(cp.asarray(x), target, eight=True).get()], [want], "convert by 8")
    from tinyamp.kernels.convert import convert  # the library's entry point takes this kernel on a GPU
    cp.counters.reset()
    fd.assert_same_bits([convert(cp.asarray(x), target).get()], [want], "convert()")
    assert sum(n for k, n in cp.counters.kernels().items() if k.startswith("tinyamp_convert_")) == 1


def test_convert_on_a_misaligned_view(cp) -> None:
    base = cp.asarray(sample(77, fd.F32))
    with np.errstate(all="ignore"):
        fd.assert_same_bits([cuda_vector.convert(base[3:], fd.F16).get()], [base.get()[3:].astype(fd.F16)],
                            "convert misaligned")


@pytest.mark.parametrize("source", [fd.F16, fd.BF16], ids=str)
@pytest.mark.parametrize("offset", range(9))
def test_widening_views_take_the_vector_loop_only_when_8_byte_aligned(cp, source, offset) -> None:
    """A uint2 load needs the input 8-byte aligned (a view 4 elements in still is); the float4 store needs the
    output 16-byte aligned (a fresh array is). Anything else takes the scalar loop, with the same bits."""
    base = cp.asarray(sample(203, source, 5))
    view = base[offset:]
    got = cuda_vector.convert(view, fd.F32)
    fd.assert_same_bits([got.get()], [base.get()[offset:].astype(fd.F32)], f"widening {offset} elements in")
    assert cuda_vector.convert_vectors(view, got) == (view.size // 4 if offset % 4 == 0 else 0)
    out = cp.empty(view.size + 4, fd.F32)
    for skip in (1, 2, 3):  # 4, 8, 12 bytes past a 16-byte boundary: no float4 store
        assert cuda_vector.convert_vectors(view, out[skip:skip + view.size]) == 0
    assert cuda_vector.convert_vectors(view, out[4:4 + view.size]) == (view.size // 4 if offset % 4 == 0 else 0)
