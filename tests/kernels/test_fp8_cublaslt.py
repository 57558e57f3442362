"""cuBLASLt's fp8 GEMM on the CUDA stand-in: taken where cuBLASLt takes it, refused where cuBLASLt refuses.

- with compute capability 9.0 (the stand-in's device set so) every per-tensor
  fp8 GEMM of a Linear (fprop TN as is; dgrad and wgrad after copying an
  operand transposed) is one ``cublasLtMatmul`` call and equals the CPU
  emulation bit for bit; ``"hopper_fast"`` sets FAST_ACCUM;
- with 8.0 (the stand-in's default, an A100) no fp8 GEMM call is made: the
  16-bit path computes the same bits;
- the stand-in's cuBLASLt refuses, as cuBLASLt does, compute capability below
  8.9, both operands E5M2, a layout other than TN and leading dimensions that
  are not multiples of 16;
- an fp8 training step on the cuBLASLt path captured in a CUDA graph equals
  the eager step bit for bit.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import tinyamp as ta
import cupy_standin
from tests.support.fp8_training import fp8_step
from cupy_standin import runtime
from cupy_standin.cublas import CUBLASError
from cupy_standin.cublaslt import LT_LIBRARY
from tinyamp import backend
from tinyamp.kernels import fp8, fp8_gemm, fp8_quantize as fq

RNG = np.random.default_rng(0)


@pytest.fixture(autouse=True)
def _inputs_from_the_seed() -> None:
    """Every test draws from the seed, whatever ran before it in this process (order, selection, xdist)."""
    global RNG
    RNG = np.random.default_rng(0)


@pytest.fixture
def hopper(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(runtime, "COMPUTE_CAPABILITY", (9, 0))
    with backend.use_cuda_standin():
        yield backend.cupy()


def _pair(m: int, n: int, k: int, fa: fp8.Fp8Format = fp8.E4M3, fb: fp8.Fp8Format = fp8.E4M3) -> tuple:
    a, b = RNG.standard_normal((m, k)).astype(np.float32), RNG.standard_normal((n, k)).astype(np.float32)
    return fq.quantize_current(a, fa)[0], fq.quantize_current(b, fb)[0]


def _on_device(q: fq.Fp8Array, cp) -> fq.Fp8Array:
    return fq.Fp8Array(cp.asarray(q.data), cp.asarray(q.scale_inv), q.fmt, q.dtype)


def _lt_calls() -> int:
    return ta.cuda.standin_counters().kernels().get("cublasLtMatmul", 0)


@pytest.mark.parametrize("trans", [(False, True), (False, False), (True, False)], ids=["fprop", "dgrad", "wgrad"])
def test_every_linear_gemm_is_one_cublaslt_call_equal_to_the_cpu(hopper, trans) -> None:
    cp = hopper
    trans_a, trans_b = trans
    qa, qb = _pair(32, 48, 64, fb=fp8.E5M2)
    if trans_a:
        qa = fq.transpose_rows(qa)
    if not trans_b:
        qb = fq.transpose_rows(qb)
    bias = RNG.standard_normal(48).astype(ta.bfloat16)
    want = fp8_gemm.fp8_gemm(qa, qb, ta.bfloat16, trans_a=trans_a, trans_b=trans_b, bias=bias)
    ta.cuda.standin_counters().reset()
    got = fp8_gemm.fp8_gemm(_on_device(qa, cp), _on_device(qb, cp), ta.bfloat16, trans_a=trans_a, trans_b=trans_b,
                            bias=cp.asarray(bias))
    assert _lt_calls() == 1
    np.testing.assert_array_equal(cp.asnumpy(got).view(np.uint16), want.view(np.uint16))


def test_the_transposed_weight_for_tn_is_made_once_and_kept_with_it(hopper) -> None:
    """dgrad (dx = g @ w) needs w's codes transposed for cuBLASLt's TN layout: made on the first GEMM, kept in the
    weight's Fp8Array (which the region's weight cache holds), reused by the next."""
    cp = hopper
    g = fq.quantize_current(RNG.standard_normal((32, 48)).astype(np.float32), fp8.E5M2)[0]
    w = fq.quantize_current(RNG.standard_normal((48, 64)).astype(np.float32), fp8.E4M3)[0]
    gd, wd = _on_device(g, cp), _on_device(w, cp)
    want = fp8_gemm.fp8_gemm(g, w, ta.float32)
    ta.cuda.standin_counters().reset()
    first = fp8_gemm.fp8_gemm(gd, wd, ta.float32)
    kept = wd.columnwise
    assert kept is not None and kept.shape == (64, 48)
    second = fp8_gemm.fp8_gemm(gd, wd, ta.float32)
    assert wd.columnwise is kept and _lt_calls() == 2
    for got in (first, second):
        np.testing.assert_array_equal(cp.asnumpy(got), want)


def test_fast_accumulation_is_set_for_hopper_fast(hopper) -> None:
    cp = hopper
    qa, qb = _pair(16, 16, 32)
    fp8_gemm.fp8_gemm(_on_device(qa, cp), _on_device(qb, cp), ta.float32, trans_b=True, accumulate="hopper_fast")
    descriptors = [o for o in LT_LIBRARY.objects.values() if o["kind"] == "operation" and o.get("a_scale")]
    assert descriptors and descriptors[-1]["fast_accum"] == 1
    fp8_gemm.fp8_gemm(_on_device(qa, cp), _on_device(qb, cp), ta.float32, trans_b=True, accumulate="promote_128")
    assert descriptors[-1]["fast_accum"] == 0


def test_an_ampere_device_takes_the_16_bit_path() -> None:
    qa, qb = _pair(16, 32, 32)
    want = fp8_gemm.fp8_gemm(qa, qb, ta.float32, trans_b=True)
    with backend.use_cuda_standin():
        cp = backend.cupy()
        ta.cuda.standin_counters().reset()
        got = fp8_gemm.fp8_gemm(_on_device(qa, cp), _on_device(qb, cp), ta.float32, trans_b=True)
        assert _lt_calls() == 0
        np.testing.assert_array_equal(cp.asnumpy(got), want)


def test_shapes_cublaslt_refuses_take_the_16_bit_path(hopper) -> None:
    cp = hopper
    for m, n, k in ((16, 32, 40), (16, 24, 32)):  # K = 40, then N = 24: not multiples of 16
        qa, qb = _pair(m, n, k)
        ta.cuda.standin_counters().reset()
        got = fp8_gemm.fp8_gemm(_on_device(qa, cp), _on_device(qb, cp), ta.float32, trans_b=True)
        assert _lt_calls() == 0
        np.testing.assert_array_equal(cp.asnumpy(got), fp8_gemm.fp8_gemm(qa, qb, ta.float32, trans_b=True))


def _heuristic(types: tuple, trans: tuple, lds: tuple, out_type: int = 14) -> None:
    """Ask the stand-in's cuBLASLt for an algorithm for D (16 x 16) = op(A) @ op(B), K = 32."""
    lib = LT_LIBRARY
    ref = lambda: ctypes.byref(ctypes.c_void_p())  # noqa: E731
    handle, desc, pref = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    lib.cublasLtCreate(ctypes.byref(handle))
    lib.cublasLtMatmulDescCreate(ctypes.byref(desc), 68, 0)
    for attribute, value in ((3, trans[0]), (4, trans[1])):
        lib.cublasLtMatmulDescSetAttribute(desc.value, attribute, ctypes.byref(ctypes.c_int32(value)), 4)
    layouts = []
    shapes = [((32, 16) if trans[0] else (16, 32)), ((16, 32) if trans[1] else (32, 16)), (16, 16), (16, 16)]
    for data_type, (rows, cols), ld in zip(types + (out_type, out_type), shapes, lds + (16, 16)):
        layout = ctypes.c_void_p()
        lib.cublasLtMatrixLayoutCreate(ctypes.byref(layout), data_type, rows, cols, max(ld, rows))
        layouts.append(layout.value)
    lib.cublasLtMatmulPreferenceCreate(ctypes.byref(pref))
    from tinyamp.kernels.cuda.cublaslt_direct import HeuristicResult
    result, count = HeuristicResult(), ctypes.c_int(0)
    lib.cublasLtMatmulAlgoGetHeuristic(handle.value, desc.value, *layouts, pref.value, 1, ctypes.byref(result),
                                       ctypes.byref(count))
    del ref


def test_the_stand_ins_cublaslt_refuses_what_cublaslt_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime, "COMPUTE_CAPABILITY", (9, 0))
    _heuristic((28, 29), (1, 0), (32, 32))  # E4M3 x E5M2, TN, ld 32: taken
    with pytest.raises(CUBLASError, match="both CUDA_R_8F_E5M2"):
        _heuristic((29, 29), (1, 0), (32, 32))
    with pytest.raises(CUBLASError, match="only the TN layout"):
        _heuristic((28, 28), (0, 0), (16, 32))
    with pytest.raises(CUBLASError, match="multiples of 16"):
        _heuristic((28, 28), (1, 0), (40, 40))
    with pytest.raises(CUBLASError, match="A and B both fp8"):
        _heuristic((28, 14), (1, 0), (32, 32))
    monkeypatch.setattr(runtime, "COMPUTE_CAPABILITY", (8, 0))
    with pytest.raises(CUBLASError, match="compute capability 8.9 or more, this device has 8.0"):
        _heuristic((28, 28), (1, 0), (32, 32))
    assert cupy_standin is not None


def test_a_graphed_fp8_step_on_cublaslt_equals_the_eager_step(hopper) -> None:
    def train(graphed: bool) -> tuple:
        ta.manual_seed(0)
        model = ta.nn.Sequential(ta.nn.Linear(64, 32), ta.nn.ReLU(), ta.nn.Linear(32, 16)).to("cuda")
        opt = ta.optim.SGD(model.parameters(), lr=0.05)
        recipe = ta.amp.recipe.DelayedScaling(amax_history_len=3)
        batches = [ta.tensor(np.random.default_rng(k).standard_normal((32, 64)).astype(np.float32), device="cuda")
                   for k in range(5)]

        def step(x):
            return fp8_step(model, opt, recipe, x)

        run = ta.cuda.make_graphed_step(step, (batches[0],), num_warmup_iters=2) if graphed else step
        ta.cuda.standin_counters().reset()
        losses = [run(x).item() for x in batches]
        calls = _lt_calls()
        ta.amp.recipe.update_pending_backward()
        return losses, [p.detach().cpu().numpy() for p in model.parameters()], calls

    eager, graphed = train(False), train(True)
    assert eager[2] > 0  # the fp8 GEMMs went to cuBLASLt
    assert graphed[0] == eager[0]
    for a, b in zip(graphed[1], eager[1]):
        np.testing.assert_array_equal(a, b)
