"""Bytes moved by the device, counted on the CUDA stand-in (issue 20).

How a launch's bytes are counted (array arguments; const and non-const RawKernel
pointers; declared bytes; cuBLAS's matrices; a graph replay), and the budget:
the AMP step (autocast float16 + GradScaler + SGD momentum) of the wide MLP
(``bench_launches.WIDE``) moves at most ``BYTES_BUDGET`` (1.1; the issue asked 1.3) times its floor
(``bench_launches.floor_rows``). The last test checks that a regression breaks
the budget: one float32 round trip of the hidden activation in the backward.
"""

from __future__ import annotations


import numpy as np
import pytest

from tinyamp import backend
from cupy_standin import kernels as standin_kernels
from tinyamp.kernels import gemm as gemm_module
from tinyamp.kernels.cuda import cuda_launch

import bench_launches  # noqa: E402

pytestmark = pytest.mark.skipif(standin_kernels.CXX is None, reason="the CUDA stand-in runs kernels through g++")


@pytest.fixture()
def cp():
    with backend.use_cuda_standin():
        module = backend.cupy()
        module.counters.reset()
        yield module


def moved(cp, kernel: str) -> tuple[int, int]:
    b = cp.counters.kernel_bytes()[kernel]
    return b["read"], b["written"]


def test_a_ufunc_reads_its_inputs_and_writes_its_output(cp) -> None:
    x, row = cp.ones((8, 16), np.float32), cp.ones(16, np.float16)
    cp.counters.reset()
    cp.add(x, row)  # row broadcast: its 16 elements are read once
    assert moved(cp, "add") == (8 * 16 * 4 + 16 * 2, 8 * 16 * 4)
    cp.counters.reset()
    x[:, :4].astype(np.float16)  # a strided view: the elements it covers
    assert moved(cp, "astype") == (8 * 4 * 4, 8 * 4 * 2)
    cp.counters.reset()
    cp.multiply(x, x, out=x)  # the same array twice is read once
    assert moved(cp, "multiply") == (8 * 16 * 4, 8 * 16 * 4)
    assert cp.counters.total("bytes_read") == 8 * 16 * 4
    assert "bytes: 512 read, 512 written (multiply 512+512)" in cp.counters.report()


def test_a_raw_kernel_reads_const_pointers_and_writes_the_others_unless_declared(cp) -> None:
    source = ('extern "C" __global__ void twice(const float* x, float* y, const long long n) {\n'
              "    long long i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) y[i] = 2.0f * x[i];\n}\n")
    kernel = cp.RawKernel(source, "twice")
    x, y = cp.ones(10, np.float32), cp.empty(10, np.float32)
    cp.counters.reset()
    kernel((1,), (16,), (x, y, np.int64(10)))
    assert moved(cp, "twice") == (40, 40)
    cuda_launch.count("twice", lambda: (12, 8))  # what a launch reading part of its arrays declares
    kernel((1,), (16,), (x, y, np.int64(3)))
    assert moved(cp, "twice") == (52, 48)
    assert y.get().tolist() == [2.0] * 10


def test_declared_bytes_are_computed_only_on_the_standin(monkeypatch) -> None:
    """A launch's declared bytes are a function the stand-in calls; on a GPU the host never computes them."""
    asked = []

    def declared() -> tuple[int, int]:
        asked.append(1)
        return 12, 8

    monkeypatch.setattr(backend, "standin_active", lambda: False)  # as on a GPU
    before = cuda_launch.launches.get("twice", 0)
    cuda_launch.count("twice", declared)
    assert asked == [] and cuda_launch.launches["twice"] == before + 1


def test_cublas_counts_its_matrices_and_a_graph_replay_its_nodes(cp) -> None:
    a, b = cp.ones((64, 32), np.float16), cp.ones((16, 32), np.float16)
    bias = cp.ones(16, np.float16)
    cp.counters.reset()
    gemm_module.gemm(a, b, trans_b=True)
    assert moved(cp, "gemmEx") == ((64 * 32 + 16 * 32) * 2, 64 * 16 * 2)
    cp.counters.reset()
    gemm_module.gemm_bias(a, b, bias, trans_b=True)  # the bias read by the epilogue, the output written once
    assert moved(cp, "cublasLtMatmul") == ((64 * 32 + 16 * 32 + 16) * 2, 64 * 16 * 2)
    stream = cp.cuda.Stream()
    y = cp.empty(8, np.float32)
    x = cp.ones(8, np.float32)
    with stream:
        stream.begin_capture()
        cp.multiply(x, 3.0, out=y)
        graph = stream.end_capture()
    cp.counters.reset()
    graph.launch()
    assert moved(cp, "cudaGraphLaunch") == (32, 32)


def test_the_floor_counts_each_tensor_the_fewest_times() -> None:
    """The floor's terms, counted by hand (RESULTS.md derives them): 22 bytes per batch x hidden element
    (11 float16 passes: linear 1's output, relu's read and write, linear 2's read, dh, dW2's read of h,
    relu backward's two reads and write, dW1's and db1's reads); 10 per input element (float32 read,
    float16 written, read by linear 1 and dW1); 30 per parameter (unscale 8, SGD momentum 20, the float16
    copy 2) plus the 16-bit weights' reads and the float32 gradients' writes; the small terms."""
    b, k, h, c = 8192, 784, 8192, 10
    floor = bench_launches.floor_bytes(True, "sgd", inputs=k, hidden=h, batch=b)
    params = h * k + h + c * h + c
    by_hand = 22 * b * h + 10 * b * k + 6 * h * k + 6 * h + 8 * c * h + 6 * c + 14 * b * c + 24 * b + 30 * params
    assert floor == by_hand


@pytest.fixture(scope="module")
def wide_amp_step() -> dict:
    return bench_launches.count_step(True, "sgd", **bench_launches.WIDE)


def test_the_wide_amp_step_moves_at_most_1_1x_its_floor(wide_amp_step) -> None:
    problems = bench_launches.over_bytes_budget(wide_amp_step)
    assert not problems, "\n".join(problems) + "\n" + bench_launches.bytes_table("amp-sgd", wide_amp_step,
                                                                                  bench_launches.WIDE)
    assert bench_launches.BYTES_BUDGET == 1.1


def test_the_first_layer_writes_its_output_once(wide_amp_step) -> None:
    """No float32 copy of the first layer's output and no C read: the GEMM's epilogue adds the bias."""
    b, h, i = bench_launches.WIDE["batch"], bench_launches.WIDE["hidden"], bench_launches.WIDE["inputs"]
    c = bench_launches.CLASSES
    forward = wide_amp_step["forward"]["bytes"]
    assert forward["cublasLtMatmul"] == {"written": 2 * b * h + 2 * b * c,
                                         "read": 2 * (b * i + h * i + h) + 2 * (b * h + c * h + c)}
    assert "tinyamp_bias_act_convert" not in forward


def float32_round_trip(phase: str) -> None:
    """What a regression might add: the hidden activation's gradient through float32 and back (a
    float16 array of batch x hidden elements, widened: 2 bytes read and 4 written an element)."""
    if phase == "backward":
        sizes = bench_launches.WIDE
        backend.cupy().empty((sizes["batch"], sizes["hidden"]), np.float16).astype(np.float32)


def test_one_float32_round_trip_breaks_the_bytes_budget() -> None:
    counts = bench_launches.count_step(True, "sgd", extra=float32_round_trip, **bench_launches.WIDE)
    with pytest.raises(AssertionError, match=r"amp-sgd wide: \d+ bytes = 1\.\d+x the floor \d+ > 1\.1x"):
        problems = bench_launches.over_bytes_budget(counts)
        assert not problems, "\n".join(problems)
