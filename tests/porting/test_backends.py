"""``ta.backends`` and the float32 matmul precision: ``allow_tf32`` puts float32 GEMMs on TF32.

The flags' defaults, their coupling (``allow_tf32`` is ``set_float32_matmul_precision("high")``)
and messages are PyTorch 2.13.0's (read with it). TF32 itself: a CPU GEMM multiplies the
operands rounded to 10-bit mantissas (to nearest even); the stand-in's cuBLAS does the same
when gemm passes ``CUBLAS_COMPUTE_32F_FAST_TF32``, which it must pass explicitly.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
import pytest

import tinyamp as ta
from tinyamp.kernels import gemm
from tinyamp.kernels.cuda import cublas_gemm


@pytest.fixture(autouse=True)
def _highest() -> Iterator[None]:
    ta.set_float32_matmul_precision("highest")
    yield
    ta.set_float32_matmul_precision("highest")


def test_defaults_and_coupling_are_pytorchs() -> None:
    # torch 2.13.0: highest False True False False True
    assert ta.get_float32_matmul_precision() == "highest"
    assert ta.backends.cuda.matmul.allow_tf32 is False
    cudnn = ta.backends.cudnn
    assert (cudnn.allow_tf32, cudnn.benchmark, cudnn.deterministic, cudnn.enabled) == (True, False, False, True)
    ta.backends.cuda.matmul.allow_tf32 = True
    assert ta.get_float32_matmul_precision() == "high"  # torch 2.13.0: high
    assert ta.backends.cuda.matmul.fp32_precision == "tf32"
    ta.set_float32_matmul_precision("medium")
    assert ta.backends.cuda.matmul.allow_tf32 is True  # torch 2.13.0: True
    ta.set_float32_matmul_precision("highest")
    assert ta.backends.cuda.matmul.allow_tf32 is False and ta.backends.cuda.matmul.fp32_precision == "ieee"


def test_bad_values_are_refused_as_pytorch_refuses_them() -> None:
    # torch 2.13.0: UserWarning "x is not one of 'highest', 'high', or 'medium'; the current
    # setFloat32MatmulPrecision call has no effect."
    with pytest.warns(UserWarning, match="x is not one of 'highest', 'high', or 'medium'; the current "
                                         "setFloat32MatmulPrecision call has no effect."):
        ta.set_float32_matmul_precision("x")
    assert ta.get_float32_matmul_precision() == "highest"
    # torch 2.13.0: RuntimeError set_allow_tf32_cublas expects a bool, but got str
    with pytest.raises(RuntimeError, match="set_allow_tf32_cublas expects a bool, but got str"):
        ta.backends.cuda.matmul.allow_tf32 = "yes"
    with pytest.raises(AttributeError, match="Unknown attribute foo"):  # torch 2.13.0: the same
        ta.backends.cuda.matmul.foo = 1


def test_flags_without_a_meaning_here_are_kept() -> None:
    import tinyamp.backends.cudnn as cudnn  # the spelling older scripts use

    cudnn.benchmark = True
    cudnn.deterministic = True
    try:
        assert ta.backends.cudnn.benchmark and ta.backends.cudnn.deterministic
    finally:
        cudnn.benchmark, cudnn.deterministic = False, False
    assert not ta.backends.cudnn.is_available()
    ta.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    assert ta.backends.cuda.matmul.allow_fp16_reduced_precision_reduction is False
    ta.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = True


def test_round_to_tf32_rounds_to_nearest_even() -> None:
    one = np.float32(1.0)
    ulp = 2.0 ** -10  # TF32's spacing above 1
    x = np.array([1 + ulp / 2, 1 + 3 * ulp / 2, 1 + ulp / 2 + 2 ** -20, -(1 + ulp / 2 + 2 ** -20), 1 + ulp / 4,
                  np.inf, -np.inf, np.nan, np.finfo(np.float32).max, 0.0, 2 ** -149, 2 ** -136], np.float32)
    got = gemm.round_to_tf32(x)
    want = [one, 1 + 2 * ulp, 1 + ulp, -(1 + ulp), one, np.inf, -np.inf, np.nan, np.inf, 0.0, 0.0, 2 ** -136]
    np.testing.assert_array_equal(got, np.array(want, np.float32))
    assert got.dtype == np.float32 and not np.shares_memory(got, x)
    bits = gemm.round_to_tf32(np.random.default_rng(0).standard_normal(1000).astype(np.float32)).view(np.uint32)
    assert not (bits & 0x1FFF).any()  # 13 low mantissa bits cleared


def operands(device: str) -> "tuple[ta.Tensor, ta.Tensor]":
    # 1 + 2**-12 is a float32 but not a TF32 number: TF32 products give exactly 1 where float32 gives more
    a = ta.full((4, 3), 1 + 2 ** -12, device=device)
    b = ta.ones(3, 2, device=device)
    return a, b


def test_allow_tf32_switches_float32_gemms(device: str) -> None:
    a, b = operands(device)
    exact = (a @ b).cpu().numpy()
    np.testing.assert_array_equal(exact, np.full((4, 2), 3 * (1 + 2 ** -12), np.float32))
    ta.backends.cuda.matmul.allow_tf32 = True
    tf32 = (a @ b).cpu().numpy()
    np.testing.assert_array_equal(tf32, np.full((4, 2), 3.0, np.float32))
    if device == "cuda":
        assert cublas_gemm.last_gpu_call["compute_type_name"] == "CUBLAS_COMPUTE_32F_FAST_TF32"
        assert cublas_gemm.last_gpu_call["a_type"] == "float32" and cublas_gemm.last_gpu_call["c_type"] == "float32"
    # a Linear layer and a convolution (a GEMM too), forward and backward
    lin = ta.nn.Linear(3, 2).to(device)
    x = ta.randn(5, 3, device=device, requires_grad=True)
    lin(x).sum().backward()
    w, xs = lin.weight.detach().cpu().numpy(), x.detach().cpu().numpy()
    want = np.matmul(gemm.round_to_tf32(xs).astype(np.float64), gemm.round_to_tf32(w).T.astype(np.float64))
    np.testing.assert_allclose(lin(x).detach().cpu().numpy() - lin.bias.detach().cpu().numpy(), want, rtol=1e-6,
                               atol=1e-6)


def test_16_bit_gemms_and_float64_are_not_affected(device: str) -> None:
    ta.set_float32_matmul_precision("high")
    a, b = operands(device)
    np.testing.assert_array_equal((a.double() @ b.double()).cpu().numpy(), np.full((4, 2), 3 * (1 + 2 ** -12)))
    with ta.autocast(a.device.type, dtype=ta.float16):
        y = a @ b
    assert y.dtype == ta.float16
    if device == "cuda":
        assert cublas_gemm.last_gpu_call["compute_type_name"] == "CUBLAS_COMPUTE_32F"


def test_the_trace_reports_tf32_gemms() -> None:
    a, b = operands("cpu")
    a.requires_grad_()
    ta.backends.cuda.matmul.allow_tf32 = True
    with ta.amp.trace() as t:
        (a @ b).sum().backward()
    assert t.totals()["tf32_ops"] == 2  # the forward matmul and the one its backward runs for da
    assert [r.math for r in t.ops_named("matmul")] == ["tf32", "tf32"]
    assert "TF32 GEMM (allow_tf32)" in str(t)
    ta.backends.cuda.matmul.allow_tf32 = False
    with ta.amp.trace() as t:
        a @ b
    assert t.totals()["tf32_ops"] == 0 and "TF32" not in str(t)
