"""cuBLASLt's GELU epilogues (kernels/gemm.py's gemm_bias_gelu and gemm_dgelu) on the CUDA stand-in.

The stand-in's libcublasLt emulates GELU_AUX_BIAS and DGELU_BGRAD with the
checks cuBLASLt makes for them (an auxiliary matrix whose leading dimension is
no less than D's rows and divisible by 8, a 16-byte-aligned auxiliary pointer)
and computes them from the float32 accumulator with the tanh GELU. The switch
(``gemm.GELU_EPILOGUE``) is off by default; on, each function is one
cuBLASLt launch and agrees with the float64 formula within float32's error
and one 16-bit rounding; off (or when cuBLASLt refuses the layout), the GEMM
and GELU kernels compute the same functions, one more rounding apart.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.support import fused_drivers as fd
from tinyamp import backend
from tinyamp.kernels import gemm
from tinyamp.kernels.cuda import cublaslt_direct
from cupy_standin import kernels as standin_kernels

pytestmark = pytest.mark.skipif(standin_kernels.CXX is None, reason="the CUDA stand-in runs kernels through g++")

K, C = math.sqrt(2 / math.pi), 0.044715


@pytest.fixture()
def cp():
    with backend.use_cuda_standin():
        yield backend.cupy()


def gelu64(z):
    return 0.5 * z * (1 + np.tanh(K * (z + C * z ** 3)))


def slope64(z):
    u = K * (z + C * z ** 3)
    return 0.5 * (1 + np.tanh(u)) + 0.5 * z / np.cosh(u) ** 2 * K * (1 + 3 * C * z * z)


def close16(got, exact, scale, extra=0.0):
    """Within half a float16 ulp of the exact value, plus float32's error of a length-64 sum of terms whose
    magnitudes add to ``scale``, plus ``extra``."""
    tol = np.abs(exact) * 2.0 ** -11 + 64 * 2.0 ** -23 * scale + 2.0 ** -24 + extra
    return (np.abs(got.astype(np.float64) - exact) <= tol).all()


def operands(m, k, n, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((m, k)).astype(np.float16), (rng.standard_normal((n, k)) / 4).astype(np.float16),
            rng.standard_normal(n).astype(np.float16))


def test_the_switch_is_off_by_default() -> None:
    assert gemm.GELU_EPILOGUE is False


def test_gelu_aux_bias_is_one_cublaslt_call_of_the_formula(cp, monkeypatch) -> None:
    monkeypatch.setattr(gemm, "GELU_EPILOGUE", True)
    a, w, b = operands(40, 64, 24)
    da, dw, db = cp.asarray(a), cp.asarray(w), cp.asarray(b)
    cp.counters.reset()
    y, z = gemm.gemm_bias_gelu(da, dw, db, trans_b=True)
    assert cp.counters.kernels() == {"cublasLtMatmul": 1}
    z64 = a.astype(np.float64) @ w.astype(np.float64).T + b
    scale = np.abs(a.astype(np.float64)) @ np.abs(w.astype(np.float64)).T
    assert close16(z.get(), z64, scale) and close16(y.get(), gelu64(z64), scale)
    # The aux matrix is written as well as D (the pre-activation a backward reads).
    assert cp.counters.kernel_bytes()["cublasLtMatmul"]["written"] == 2 * 40 * 24 * 2


def test_dgelu_bgrad_is_one_cublaslt_call_of_the_formula(cp, monkeypatch) -> None:
    monkeypatch.setattr(gemm, "GELU_EPILOGUE", True)
    g, w, _ = operands(40, 16, 32, seed=1)  # g (M, 16) @ w (32, 16)^T: dz (M, 32)
    z = np.random.default_rng(2).standard_normal((40, 32)).astype(np.float16)
    cp.counters.reset()
    dz, db = gemm.gemm_dgelu(cp.asarray(g), cp.asarray(w), cp.asarray(z), trans_b=True)
    assert cp.counters.kernels() == {"cublasLtMatmul": 1}
    dz64 = (g.astype(np.float64) @ w.astype(np.float64).T) * slope64(z.astype(np.float64))
    scale = np.abs(g.astype(np.float64)) @ np.abs(w.astype(np.float64)).T
    assert close16(dz.get(), dz64, scale) and close16(db.get(), dz64.sum(0), scale.sum(0))


def test_off_the_kernels_compute_the_same_functions(cp) -> None:
    a, w, b = operands(40, 64, 24)
    cp.counters.reset()
    y, z = gemm.gemm_bias_gelu(cp.asarray(a), cp.asarray(w), cp.asarray(b), trans_b=True)
    assert cp.counters.kernels() == {"cublasLtMatmul": 1, "tinyamp_gelu_tanh_f16": 1}
    z64 = a.astype(np.float64) @ w.astype(np.float64).T + b
    scale = np.abs(a.astype(np.float64)) @ np.abs(w.astype(np.float64)).T
    # gelu of the rounded z: one more float16 rounding (its ulp times gelu's slope, at most 1.13).
    assert close16(z.get(), z64, scale) and close16(y.get(), gelu64(z64), scale, 1.13 * np.abs(z64) * 2.0 ** -11)


def test_cublaslt_refuses_an_auxiliary_matrix_it_cannot_take_and_the_kernels_run(cp, monkeypatch) -> None:
    """N = 12 is not a multiple of 8: cuBLASLt offers no algorithm for the aux matrix's leading dimension."""
    monkeypatch.setattr(gemm, "GELU_EPILOGUE", True)
    a, w, b = operands(8, 16, 12)
    da, dw, db = cp.asarray(a), cp.asarray(w), cp.asarray(b)
    y, z = cp.empty((8, 12), np.float16), cp.empty((8, 12), np.float16)
    assert not cublaslt_direct.matmul_epilogue(da, dw, db, y, True, "gelu_aux_bias", aux=z)
    cp.counters.reset()
    gemm.gemm_bias_gelu(da, dw, db, trans_b=True)
    assert cp.counters.kernels() == {"cublasLtMatmul": 1, "tinyamp_gelu_tanh_f16": 1}


def test_the_standin_checks_the_auxiliary_matrix_as_cublaslt() -> None:
    """Without the aux pointer, or with a leading dimension below D's rows, the heuristic refuses the problem."""
    from cupy_standin import cublaslt  # noqa: PLC0415 - the stand-in's emulation, checked directly
    lt = cublaslt.LT_LIBRARY
    operation = {"transa": 1, "transb": 0, "epilogue": cublaslt.EPILOGUE_GELU_AUX_BIAS, "bias": 0, "aux": 0,
                 "aux_ld": 16}
    layout = {"type": 2, "rows": 16, "cols": 4, "ld": 16}
    square = {"type": 2, "rows": 16, "cols": 16, "ld": 16}
    with pytest.raises(cublaslt.CUBLASError, match="auxiliary matrix"):
        lt._problem(operation, square, layout, layout, layout)
    with pytest.raises(cublaslt.CUBLASError, match="auxiliary matrix"):
        lt._problem(dict(operation, aux=256, aux_ld=8), square, layout, layout, layout)
    assert lt._problem(dict(operation, aux=256), square, layout, layout, layout)[3] == 16
