"""The fused cross-entropy (tinyamp/kernels/cross_entropy.py, cuda_loss.py), bit for bit.

- The NumPy path of the fused kernels against the general ``CrossEntropy`` op
  (today's results), forward and backward, over dtypes, reductions, class
  weights, ignore_index, label smoothing and awkward logits (ties, +-inf, nan,
  a row of -inf, every target ignored).
- The CUDA kernels, run on the CPU by the CUDA stand-in (g++), against the
  NumPy path given the same ``exp``/``log`` as the compiled kernels (the C
  library's): every sum in the kernels follows NumPy's pairwise order, so
  nothing else may differ. Out-of-range targets give NaN there (the GPU's
  behaviour, no host check).
"""

from __future__ import annotations

import zlib

import ml_dtypes
import numpy as np
import pytest


from tests.support import device_math as device_math_module
from tests.support import fused_drivers as fd
import tinyamp as ta
from tinyamp import backend
from cupy_standin import kernels as standin_kernels
from tinyamp.kernels import cross_entropy
from tinyamp.kernels.cpu import cpu_path
from tinyamp.kernels.cuda import cuda_launch, cuda_loss

DTYPES = [np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)]
REDUCTIONS = ["mean", "sum", "none"]
VARIANTS = ["plain", "weighted", "smoothing", "weighted-smoothing", "awkward", "ignored", "all-ignored"]


def make_case(dtype: np.dtype, reduction: str, variant: str, seed: int = 0) -> dict:
    """Logits, targets and options for one case; sizes cross NumPy's pairwise block of 128."""
    rng = np.random.default_rng(zlib.crc32(f"{dtype}-{reduction}-{variant}-{seed}".encode()))
    n, classes = [(1, 1), (7, 10), (129, 5), (300, 37), (40, 130), (64, 2)][rng.integers(0, 6)]
    x = (rng.standard_normal((n, classes)) * 4).astype(dtype)
    target = rng.integers(0, classes, n).astype(np.int64)
    weight, eps, ignore_index = None, 0.0, -100
    if "weighted" in variant:
        weight = (rng.random(classes) * 2).astype(dtype)
        weight[0] = 0
    if "smoothing" in variant:
        eps = [0.1, 1.0, 0.3][seed % 3]
    if variant == "awkward":
        x[:, : min(classes, 3)] = x[:, :1]  # ties
        x[0, 0] = -np.inf
        x[n // 2, -1] = np.inf
        x[-1, :] = -np.inf  # a row of -inf: shifted by 0, loss nan
        if n > 2:
            x[1, 0] = np.nan
    if variant in ("ignored", "awkward"):
        ignore_index = int(rng.integers(0, classes)) if seed % 2 else -100
        target[rng.random(n) < 0.4] = ignore_index
    if variant == "all-ignored":
        target[:] = ignore_index
    return dict(x=x, target=target, weight=weight, ignore_index=ignore_index, reduction=reduction,
                label_smoothing=eps, gy_seed=seed)


def upstream(shape: tuple, dtype: np.dtype, seed: int) -> np.ndarray:
    return np.random.default_rng(seed + 99).standard_normal(shape).astype(dtype)


def op_result(case: dict) -> list:
    """The CrossEntropy op (its general path), forward and backward."""
    x = ta.tensor(case["x"], requires_grad=True)
    weight = None if case["weight"] is None else ta.tensor(case["weight"])
    with np.errstate(all="ignore"):
        loss = ta.cross_entropy(x, ta.tensor(case["target"]), weight, ignore_index=case["ignore_index"],
                                reduction=case["reduction"], label_smoothing=case["label_smoothing"])
        loss.backward(ta.tensor(upstream(loss.shape, loss.dtype, case["gy_seed"])))
    return [loss.detach().numpy(), x.grad.numpy()]


def fused_result(case: dict, out_dtype=None, via_float32: bool = False, exp=np.exp, log=np.log,
                 check_range: bool = True, cp=None) -> list:
    """cross_entropy.forward/backward: the NumPy path, or with ``cp`` (the stand-in) the kernels."""
    x, target, weight = case["x"], case["target"], case["weight"]
    device = (lambda a: a) if cp is None else (lambda a: None if a is None else cp.asarray(a))
    x, target, weight = device(x), device(target), device(weight)
    options = dict(ignore_index=case["ignore_index"], reduction=case["reduction"],
                   label_smoothing=case["label_smoothing"])
    out_dtype = x.dtype if out_dtype is None else out_dtype
    with np.errstate(all="ignore"):
        loss, saved = cross_entropy.forward(x, target, weight, out_dtype=out_dtype, exp=exp, log=log,
                                            check_range=check_range, **options)
        gy = device(upstream(loss.shape, loss.dtype, case["gy_seed"]))
        grad = cross_entropy.backward(x, target, weight, gy, saved, out_dtype=x.dtype, via_float32=via_float32,
                                      exp=exp, **options)
    return [loss, grad] if cp is None else [loss.get(), grad.get()]


CASES = [(d, r, v) for d in DTYPES for r in REDUCTIONS for v in VARIANTS]


def case_id(c) -> str:
    return f"{c[0].name}-{c[1]}-{c[2]}"


@pytest.mark.parametrize("spec", CASES, ids=case_id)
@pytest.mark.parametrize("seed", [0, 1])
def test_numpy_path_matches_the_op(spec, seed) -> None:
    case = make_case(*spec, seed=seed)
    fd.assert_same_bits(fused_result(case), op_result(case), f"cross-entropy {case_id(spec)}")


def test_fusable_takes_two_dimensional_16_and_32_bit_logits_only() -> None:
    x, t = np.zeros((3, 4), np.float32), np.zeros(3, np.int64)
    assert cross_entropy.fusable(x, t, None) and cross_entropy.fusable(x.astype(np.float16), t, np.ones(4, np.float32))
    assert not cross_entropy.fusable(x.astype(np.float64), t, None)
    assert not cross_entropy.fusable(np.zeros((3, 4, 2), np.float32), np.zeros((3, 2), np.int64), None)
    assert not cross_entropy.fusable(np.zeros((0, 4), np.float32), np.zeros(0, np.int64), None)
    assert not cross_entropy.fusable(x, t.astype(np.int32), None)
    assert not cross_entropy.fusable(x, t, np.ones(3, np.float32))


# ------------------------------------------------------------ the kernels
needs_gxx = pytest.mark.skipif(standin_kernels.CXX is None, reason="the CUDA stand-in runs kernels through g++")


def libm_math() -> tuple:
    """(exp, log) of float32 arrays computed by the C library the compiled kernels call (``expf``/``logf``).

    NumPy's vectorised float32 ``exp``/``log`` round differently in the last bit
    for some inputs; the NumPy path given these computes what the kernels compute.
    """
    return device_math_module.libm("expf"), device_math_module.libm("logf")


@pytest.fixture(scope="module")
def device_math():
    return libm_math() if standin_kernels.CXX is not None else None


@pytest.fixture
def cp():
    with backend.use_cuda_standin():
        yield backend.cupy()


@needs_gxx
@pytest.mark.parametrize("spec", CASES, ids=case_id)
def test_kernels_match_the_numpy_path(cp, device_math, spec) -> None:
    exp, log = device_math
    case = make_case(*spec, seed=1)
    want = fused_result(case, exp=exp, log=log)
    fd.assert_same_bits(fused_result(case, cp=cp), want, f"cross-entropy kernels {case_id(spec)}")


@needs_gxx
@pytest.mark.parametrize("dtype", DTYPES[1:], ids=str)
@pytest.mark.parametrize("variant", ["plain", "weighted-smoothing"])
def test_kernels_with_float32_loss_and_gradient_rounded_through_float32(cp, device_math, dtype, variant) -> None:
    """Autocast's case: 16-bit logits, a float32 loss, the float32 gradient rounded to the logits' dtype."""
    exp, log = device_math
    for reduction in REDUCTIONS:
        case = make_case(dtype, reduction, variant, seed=2)
        want = fused_result(case, out_dtype=np.float32, via_float32=True, exp=exp, log=log)
        got = fused_result(case, out_dtype=np.float32, via_float32=True, cp=cp)
        fd.assert_same_bits(got, want, f"{dtype} {reduction} {variant}")


@needs_gxx
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_kernels_give_nan_for_out_of_range_targets(cp, device_math, reduction) -> None:
    """No host check on a GPU: the row weighs NaN, as the op's GPU branch (checked on NumPy in test_cuda_kernels)."""
    exp, log = device_math
    case = make_case(np.dtype(np.float32), reduction, "plain", seed=3)
    case["x"] = np.random.default_rng(0).standard_normal((9, 5)).astype(np.float32)
    case["target"] = np.array([1, 5, 0, -2, 4, 4, 3, 2, 1], np.int64)
    got = fused_result(case, cp=cp)
    with pytest.raises(IndexError, match="target value -2 is out of range"):  # the device's flag, at the next sync
        ta.cuda.synchronize()
    fd.assert_same_bits(got, fused_result(case, exp=exp, log=log, check_range=False), reduction)
    with pytest.raises(cross_entropy.TargetOutOfRange):  # the NumPy path checks on the host
        fused_result(case)
    loss, grad = got
    if reduction == "mean":  # the divisor is NaN: every gradient is
        assert np.isnan(grad).all()
    else:
        assert np.isnan(grad[[1, 3]]).all() and np.isfinite(grad[[0, 2, 4, 5, 6, 7, 8]]).all()
    assert np.isnan(loss).any()


@needs_gxx
@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("n", [1, 128, 129, 1000, 8193, 10000, 40000, 65537])
def test_the_forward_tree_over_many_rows_and_its_tickets(cp, device_math, n, reduction) -> None:
    """Row counts around NumPy's blocks, over one or many CUDA blocks (40000: a thread sums several slots;
    65537: more slots than shared memory holds); the ticket is back to 0 after each launch, for the next one.
    A float32 loss (autocast's), which a sum over many rows does not overflow."""
    exp, log = device_math
    case = make_case(np.dtype(np.float16), reduction, "ignored", seed=0)
    rng = np.random.default_rng(n)
    case["x"] = (rng.standard_normal((n, 3)) * 3).astype(np.float16)
    case["target"] = rng.integers(-1, 3, n).astype(np.int64)
    case["ignore_index"] = -1
    options = dict(out_dtype=np.float32, via_float32=True)
    want = fused_result(case, exp=exp, log=log, **options)
    before = dict(cuda_launch.launches)
    for _ in range(2):  # the second launch finds the ticket the first one left
        fd.assert_same_bits(fused_result(case, cp=cp, **options), want, f"n={n}")
        assert not cuda_loss._ticket_array(cp.cuda.Device(0)).get().any()
    launched = {k: n - before.get(k, 0) for k, n in cuda_launch.launches.items() if n > before.get(k, 0)}
    assert launched == {"tinyamp_ce_forward_f16_f32_f32": 2, "tinyamp_ce_backward_f16_f32_f32_f16": 2}


def test_kernel_sources_declare_what_the_launches_pass() -> None:
    names = set()
    for name, source in cuda_loss.raw_sources():
        params = standin_kernels.parse_signature(source, name)
        assert params[0][0] in ("float*", "unsigned short*") and source.count("{") == source.count("}")
        names.add(name)
    assert len(names) == 27 + 81


@pytest.mark.skipif(not (cpu_path.BACKEND == "numba" and cpu_path.numba_available()), reason="numba not installed")
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("via_float32", [False, True])
def test_float16_gradient_rounding_is_astypes_with_and_without_numba(monkeypatch, smoothing, via_float32) -> None:
    # Wide logits and a loss scale: many softmax entries underflow float16 (NumPy's slow cast path),
    # some land in its subnormals, some overflow it; the numba rounding must give astype's bits.
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((7, 10)) * 12).astype(np.float16)
    x[2, 3], x[4, :] = np.inf, -np.inf
    x[5, 1] = np.nan
    target = rng.integers(0, 10, 7).astype(np.int64)
    options = dict(ignore_index=-100, reduction="mean", label_smoothing=smoothing)

    def gradient() -> np.ndarray:
        with np.errstate(all="ignore"):
            _, saved = cross_entropy.forward(x, target, None, out_dtype=np.float32, **options)
            return cross_entropy.backward(x, target, None, np.asarray(np.float32(2.0 ** 20)), saved,
                                          out_dtype=np.float16, via_float32=via_float32, **options)

    assert cpu_path.numba_default()
    fast = gradient()
    monkeypatch.setattr(cpu_path, "BACKEND", "astype")  # numba off: NumPy's astype
    general = gradient()
    fd.assert_same_bits([fast], [general], "float16 gradient")
    magnitude = np.abs(general.astype(np.float32))
    assert np.isnan(magnitude).any() and np.isinf(magnitude).any()
    if not smoothing:  # (smoothing's uniform term keeps every entry large)
        assert (magnitude == 0).any() and ((magnitude > 0) & (magnitude < 2.0 ** -14)).any()  # float16 subnormals
