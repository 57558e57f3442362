"""The fp8 GEMM (kernels/fp8_gemm.py) and its model of Hopper's fp8 accumulator.

- every layout (per tensor, 1x128-style rows, 2-D tiles, MX) and transpose
  against NumPy from the definitions: per tensor, the exact products summed in
  float32 and scaled after; blocks, each operand dequantised first (powers of
  two: exact) then float32 BLAS; the bias added in float32, one rounding;
- what no fp8 GEMM takes is refused (both E5M2, mismatched K, blocks across
  the reduction without a column-wise copy);
- the accumulator model on tiles whose answers are known by hand (swamping of
  small products after a large one, the final truncation, the chain over
  k=32 steps against promotion every 128) and on random tiles against a
  scalar pure-Python statement of the same rules;
- on the CUDA stand-in (no fp8 GEMM: exact bfloat16 values, the 16-bit GEMM)
  the result equals the CPU's.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import tinyamp as ta
from tinyamp import backend
from tinyamp.kernels import fp8, fp8_gemm, fp8_quantize as fq

RNG = np.random.default_rng(0)


@pytest.fixture(autouse=True)
def _inputs_from_the_seed() -> None:
    """Every test draws from the seed, whatever ran before it in this process (order, selection, xdist)."""
    global RNG
    RNG = np.random.default_rng(0)


def _x(*shape: int) -> np.ndarray:
    return (RNG.standard_normal(shape) * np.exp(RNG.uniform(-3, 3, shape[:1] + (1,) * (len(shape) - 1)))
            ).astype(np.float32)


def test_per_tensor_gemm_is_exact_products_summed_in_float32_then_scaled() -> None:
    a, b, bias = _x(7, 40), _x(9, 40), _x(9)
    qa, _ = fq.quantize_current(a, fp8.E4M3)
    qb, _ = fq.quantize_current(b, fp8.E5M2)
    got = fp8_gemm.fp8_gemm(qa, qb, ta.bfloat16, trans_b=True, bias=bias)
    av, bv = fp8.decode(qa.data, ta.float8_e4m3fn), fp8.decode(qb.data, ta.float8_e5m2)
    acc = np.matmul(av, bv.T) * (qa.scale_inv * qb.scale_inv) + bias
    np.testing.assert_array_equal(got.view(np.uint16), acc.astype(np.float32).astype(ta.bfloat16).view(np.uint16))
    # float32 out: the one float32 factor scale_inv(a) * scale_inv(b) applied to the sum (cuBLASLt's alpha)
    np.testing.assert_array_equal(fp8_gemm.fp8_gemm(qa, qb, ta.float32, trans_b=True),
                                  np.matmul(av, bv.T) * (qa.scale_inv * qb.scale_inv))
    # trans_a: the same numbers from the transposed codes
    qat = fq.transpose_rows(qa)
    np.testing.assert_array_equal(fp8_gemm.fp8_gemm(qat, qb, ta.float32, trans_a=True, trans_b=True),
                                  fp8_gemm.fp8_gemm(qa, qb, ta.float32, trans_b=True))


@pytest.mark.parametrize("layout", ["rows", "tiles", "mx"])
def test_block_scaled_gemms_dequantise_exactly_along_the_reduction(layout: str) -> None:
    m, k, n = 6, 96, 5

    def q(x: np.ndarray, tiles: bool = False) -> fq.Fp8Array:
        if layout == "mx":
            return fq.quantize_mx(x, fp8.E4M3, block=32, columnwise=True)
        return fq.quantize_blocks(x, fp8.E4M3, (16, 16) if tiles else (1, 32), columnwise=True)

    a, w, g = _x(m, k), _x(n, k), _x(m, n)
    # rows 2^4 apart: down a column the small rows fall below E4M3's normal range, so a column-wise copy's
    # values differ from a row-wise copy's (power-of-two block scales commute with rounding in the normal range)
    rows = np.exp2(4.0 * np.arange(m) - 10).astype(np.float32)[:, None]
    a, g = a * rows, g * rows
    qa, qw, qg = q(a), q(w, tiles=layout == "tiles"), q(g)
    # forward: a @ w^T reduces over both operands' last dimension: their row-wise copies
    want = np.matmul(fq.dequantize(qa), fq.dequantize(qw).T)
    np.testing.assert_array_equal(fp8_gemm.fp8_gemm(qa, qw, ta.float32, trans_b=True), want)
    # weight gradient: g^T @ a reduces over the rows: both column-wise copies
    want = np.matmul(fq.dequantize(fq.transpose_rows(qg)), fq.dequantize(fq.transpose_rows(qa)).T)
    np.testing.assert_array_equal(fp8_gemm.fp8_gemm(qg, qa, ta.float32, trans_a=True), want)
    if layout != "rows":  # dgrad: g @ w reduces over w's rows (2-D tiles: the same codes; MX: its column copy)
        wt = fq.transpose_rows(qw)
        want = np.matmul(fq.dequantize(qg), fq.dequantize(wt).T)
        np.testing.assert_array_equal(fp8_gemm.fp8_gemm(qg, qw, ta.float32), want)
    for deq, src in ((fq.dequantize(qa), a), (fq.dequantize(fq.transpose_rows(qa)), a.T)):
        assert np.abs(deq - src).max() <= np.abs(src).max() / 8  # the copies stand for the same values


def test_what_no_fp8_gemm_takes_is_refused() -> None:
    qa, _ = fq.quantize_current(_x(4, 32), fp8.E5M2)
    qb, _ = fq.quantize_current(_x(4, 32), fp8.E5M2)
    with pytest.raises(ValueError, match="both operands E5M2"):
        fp8_gemm.fp8_gemm(qa, qb, ta.float32, trans_b=True)
    qc, _ = fq.quantize_current(_x(4, 16), fp8.E4M3)
    with pytest.raises(ValueError, match=r"inner dimensions differ \(32 vs 16\)"):
        fp8_gemm.fp8_gemm(qa, qc, ta.float32, trans_b=True)
    rows_only = fq.quantize_blocks(_x(4, 32), fp8.E4M3, (1, 16))
    with pytest.raises(ValueError, match="columnwise copy"):
        fp8_gemm.fp8_gemm(rows_only, qc, ta.float32, trans_a=True)
    with pytest.raises(TypeError, match="two Fp8Array operands"):
        fp8_gemm.fp8_gemm(np.zeros((2, 2)), qc, ta.float32)
    with pytest.raises(ValueError, match="accumulate must be one of"):
        fp8_gemm.fp8_gemm(qc, qc, ta.float32, trans_b=True, accumulate="fp16")


def _codes(values: list, f: fp8.Fp8Format = fp8.E4M3) -> fq.Fp8Array:
    x = np.array(values, np.float32)
    return fq.Fp8Array(fp8.encode(x, f.dtype), np.float32(1), f, np.dtype(np.float32))


@pytest.mark.parametrize("model, want", [("fp32", 4135.75), ("hopper_fast", 4096.0), ("promote_128", 4104.0)])
def test_accumulator_models_on_a_tile_known_by_hand(model: str, want: float) -> None:
    """One product 64 * 64 = 2^12, then 159 products 0.5 * 0.5 = 0.25 over five k=32 steps.

    hopper_fast: each step aligns to 2^12 with 13 fractional bits (a unit of 0.5), so every 0.25 is truncated
    away: 4096. promote_128: the first four steps give 4096, promoted; the fifth starts from zero and keeps
    its 32 * 0.25 = 8: 4104. float32: 4096 + 159 * 0.25 = 4135.75."""
    row = [[64.0] + [0.5] * 159]
    a, b = _codes(row), _codes(row)
    assert float(fp8_gemm.fp8_gemm(a, b, ta.float32, trans_b=True, accumulate=model)[0, 0]) == want


def test_the_step_truncates_its_sum_to_13_mantissa_bits_toward_zero() -> None:
    """2 * 2^12 + 2^-1 = 8192.5: the terms keep 0.5 (aligned to 2^12), the sum (2^13) keeps a unit of 1."""
    products = np.zeros((1, 32, 1))
    products[0, :3, 0] = [4096.0, 4096.0, 0.5]
    assert fp8_gemm.hopper_step(np.zeros((1, 1)), products)[0, 0] == 8192.0
    products[0, :3, 0] = [-4096.0, -4096.0, -0.5]  # toward zero on the negative side too
    assert fp8_gemm.hopper_step(np.zeros((1, 1)), products)[0, 0] == -8192.0
    products[0, :3, 0] = [4096.0, 0.5, -0.25]  # 0.5 kept, -0.25 dropped (aligned to 2^12)
    assert fp8_gemm.hopper_step(np.zeros((1, 1)), products)[0, 0] == 4096.5


def _step_reference(acc: float, products: list) -> float:
    """The same rules as ``hopper_step``, one dot product, in Python integers and floats."""
    terms = [t for t in [acc] + products if t != 0]
    if not terms:
        return 0.0
    top = max(math.frexp(t)[1] - 1 for t in terms)
    unit = 2.0 ** (top - 13)
    total = sum(math.trunc(t / unit) * unit for t in terms)
    if total == 0:
        return 0.0
    unit = 2.0 ** (math.frexp(total)[1] - 1 - 13)
    return math.trunc(total / unit) * unit


def test_random_tiles_against_the_scalar_statement_of_the_rules() -> None:
    a = fp8.decode(fp8.encode(_x(4, 96) * 30, ta.float8_e4m3fn), ta.float8_e4m3fn)
    b = fp8.decode(fp8.encode(_x(96, 3) * 30, ta.float8_e5m2), ta.float8_e5m2)
    got_fast = fp8_gemm.hopper_matmul(a, b)
    got_promoted = fp8_gemm.hopper_matmul(a, b, promote=True)
    for i in range(4):
        for j in range(3):
            acc = 0.0
            for start in range(0, 96, 32):
                acc = _step_reference(acc, [float(a[i, k]) * float(b[k, j]) for k in range(start, start + 32)])
            assert got_fast[i, j] == np.float32(acc)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    assert np.abs(got_promoted - exact).max() <= np.abs(got_fast - exact).max() + 1e-30


def test_fast_accumulation_swamps_a_long_same_sign_sum() -> None:
    """K = 4096 of positive products (the anchors' note: 7.1e-2 fast vs 6.4e-4 promoted, normwise)."""
    rng = np.random.default_rng(5)
    a = fp8.decode(fp8.encode(rng.uniform(0.5, 2, (4, 4096)).astype(np.float32), ta.float8_e4m3fn),
                   ta.float8_e4m3fn)
    b = fp8.decode(fp8.encode(rng.uniform(0.5, 2, (4096, 4)).astype(np.float32), ta.float8_e4m3fn),
                   ta.float8_e4m3fn)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    err = {p: np.linalg.norm(fp8_gemm.hopper_matmul(a, b, promote=p) - exact) / np.linalg.norm(exact)
           for p in (False, True)}
    assert err[False] > 1e-2 and err[True] < 2e-3 and err[False] > 10 * err[True]


def test_the_setting_selects_the_model_for_per_tensor_gemms() -> None:
    row = [[64.0] + [0.5] * 159]
    a, b = _codes(row), _codes(row)
    try:
        ta.backends.fp8.accumulate = "hopper_fast"
        assert float(fp8_gemm.fp8_gemm(a, b, ta.float32, trans_b=True)[0, 0]) == 4096.0
    finally:
        ta.backends.fp8.accumulate = "fp32"
    assert float(fp8_gemm.fp8_gemm(a, b, ta.float32, trans_b=True)[0, 0]) == 4135.75


def test_the_stand_in_gemm_equals_the_cpu() -> None:
    a, b, bias = _x(16, 64), _x(24, 64), _x(24)
    qa, _ = fq.quantize_current(a, fp8.E4M3)
    qb, _ = fq.quantize_current(b, fp8.E4M3)
    cpu = fp8_gemm.fp8_gemm(qa, qb, ta.bfloat16, trans_b=True, bias=bias)
    with backend.use_cuda_standin():
        cp = backend.cupy()
        qa_d, _ = fq.quantize_current(cp.asarray(a), fp8.E4M3)
        qb_d, _ = fq.quantize_current(cp.asarray(b), fp8.E4M3)
        gpu = cp.asnumpy(fp8_gemm.fp8_gemm(qa_d, qb_d, ta.bfloat16, trans_b=True, bias=cp.asarray(bias)))
    np.testing.assert_array_equal(gpu.view(np.uint16), cpu.view(np.uint16))
