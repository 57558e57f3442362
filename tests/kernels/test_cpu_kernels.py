"""Bit-exactness of the CPU kernels (convert.py, elementwise_cpu.py, gemm_bias's epilogue) against astype / np.maximum / np.where.

Every fast path is compared bit for bit with the NumPy/ml_dtypes reference:
exhaustively over all 65536 16-bit patterns, and for float32 sources over
every float16/bfloat16 rounding boundary (exact values, halfway ties and
their float32 neighbours) plus a million random float32 bit patterns with
extra NaNs, infinities and subnormals. Each test runs on both numba float16
kernels (hardware F16C and integer: one loop, the conversion passed in).
"""


import ml_dtypes
import numpy as np
import pytest

import tinyamp.kernels
from tinyamp.kernels.cpu import cpu_numba, cpu_path
from tinyamp.kernels.cpu import elementwise_cpu as ew
from tinyamp.kernels.convert import convert
from tinyamp.kernels.cpu.cpu_numba import select_f16_impl
from tinyamp.kernels.gemm import gemm, gemm_bias


F32 = np.dtype(np.float32)
F16 = np.dtype(np.float16)
BF16 = np.dtype(ml_dtypes.bfloat16)
LOWP = [F16, BF16]
ALL = [F32, F16, BF16]
PAIRS = [(s, d) for s in ALL for d in ALL if s != d]

HAVE_NUMBA = cpu_path._numba_installed() and cpu_path.BACKEND == "numba" and cpu_path.numba_available()

_backend_params = []
if HAVE_NUMBA:
    _backend_params.append(pytest.param(("numba", "int"), id="numba-int"))
    _backend_params.append(
        pytest.param(
            ("numba", "hw"),
            id="numba-f16c",
            marks=pytest.mark.skipif(not cpu_path.F16C, reason="no hardware float16 conversion"),
        )
    )
else:
    _backend_params.append(pytest.param(("numba", None), id="numba", marks=pytest.mark.skip(reason="numba not installed or not selected")))


@pytest.fixture(params=_backend_params)
def backend(request):
    name, impl = request.param
    if impl is not None:
        select_f16_impl(impl)
    yield name
    if HAVE_NUMBA:
        select_f16_impl("hw" if cpu_path.F16C else "int")


def bits(a):
    a = np.ascontiguousarray(a)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def reference(x, dt):
    with np.errstate(all="ignore"):
        return x.astype(dt)


def assert_same_bits(got, ref):
    assert got.dtype == ref.dtype and got.shape == ref.shape
    gb, rb = bits(got), bits(ref)
    bad = np.flatnonzero(gb.ravel() != rb.ravel())
    if bad.size:
        i = bad[:8]
        raise AssertionError(
            f"{bad.size} mismatches; first at {i.tolist()}: got {[hex(v) for v in gb.ravel()[i]]} "
            f"expected {[hex(v) for v in rb.ravel()[i]]}"
        )


# ---------------------------------------------------------------------------
# inputs


ALL16 = np.arange(65536, dtype=np.uint16)


def f32_boundary_cases():
    """float32 bit patterns at every float16 and bfloat16 rounding boundary."""
    # float16: every non-negative finite value, the midpoints between
    # neighbours (ties, including 65504/65536 -> 65520), and the float32
    # neighbours of each midpoint; both signs.
    pos = ALL16[:0x7C01].view(np.float16).astype(np.float64)  # up to +inf = 65536 stand-in
    pos[-1] = 65536.0
    mids = ((pos[:-1] + pos[1:]) / 2).astype(np.float32)  # exact in float32
    vals = np.concatenate([
        pos[:-1].astype(np.float32),
        mids,
        np.nextafter(mids, np.float32(np.inf)),
        np.nextafter(mids, np.float32(0)),
        np.float32([65519.996, 65520.0, 65536.0, 1e6, 3.4e38, 2.0**-25, 2.0**-26, 1e-45, 1e-40]),
    ]).astype(np.float32)
    f16_cases = np.concatenate([vals, -vals]).view(np.uint32)
    # bfloat16: every pattern as float32, the halfway point below the next
    # pattern, and its neighbours.
    hi = ALL16.astype(np.uint32) << 16
    bf_cases = np.concatenate([hi, hi | 0x8000, hi | 0x7FFF, hi | 0x8001, hi | 0x1])
    return np.concatenate([f16_cases, bf_cases])


def f32_random_bits(n=1_000_000, seed=1234):
    rng = np.random.default_rng(seed)
    u = rng.integers(0, 2**32, size=n, dtype=np.uint64).astype(np.uint32)
    k = n // 8
    u[:k] = (u[:k] & 0x807FFFFF) | 0x7F800000  # NaNs (and a few infs), both signs
    u[k : 2 * k] &= 0x807FFFFF  # float32 subnormals and zeros
    u[2 * k : 3 * k] = (u[2 * k : 3 * k] & 0x80FFFFFF) | 0x33000000  # around float16 subnormals
    u[3 * k : 4 * k] = (u[3 * k : 4 * k] & 0x80FFFFFF) | 0x47000000  # around float16 overflow
    u[4 * k : 4 * k + 8] = [0x7F800000, 0xFF800000, 0, 0x80000000, 0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001]
    return u


# ---------------------------------------------------------------------------
# convert: exhaustive 16-bit sources


@pytest.mark.parametrize("src,dst", [p for p in PAIRS if p[0] != F32], ids=str)
def test_all_16bit_patterns(backend, src, dst):
    x = ALL16.view(src)
    assert_same_bits(convert(x, dst, backend=backend), reference(x, dst))


@pytest.mark.parametrize("dst", LOWP, ids=str)
def test_f32_boundaries_and_ties(backend, dst):
    x = f32_boundary_cases().view(np.float32)
    assert_same_bits(convert(x, dst, backend=backend), reference(x, dst))


@pytest.mark.parametrize("dst", LOWP, ids=str)
def test_f32_random_bit_patterns(backend, dst):
    x = f32_random_bits().view(np.float32)
    assert_same_bits(convert(x, dst, backend=backend), reference(x, dst))


def test_nan_rules_documented(backend):
    """The NaN payload rules the module docstring states (they are astype's)."""
    u = np.array([0x7F800001, 0x7F802000, 0xFFA00000, 0x7FC00000], np.uint32)
    x = u.view(np.float32)
    assert bits(convert(x, F16, backend=backend)).tolist() == [0x7C01, 0x7C01, 0xFD00, 0x7E00]
    assert bits(convert(x, BF16, backend=backend)).tolist() == [0x7FC0, 0x7FC0, 0xFFC0, 0x7FC0]
    h = np.array([0x7C01, 0xFE00], np.uint16).view(F16)
    assert bits(convert(h, F32, backend=backend)).tolist() == [0x7F802000, 0xFFC00000]
    b = np.array([0x7F81, 0xFFFF], np.uint16).view(BF16)
    assert bits(convert(b, F16, backend=backend)).tolist() == [0x7E00, 0xFE00]


# ---------------------------------------------------------------------------
# convert: the wrapper (layouts, out=, fallbacks)


@pytest.mark.parametrize("src,dst", PAIRS, ids=lambda p: str(p))
def test_layouts_and_out(backend, src, dst):
    rng = np.random.default_rng(0)
    base = reference(rng.standard_normal((64, 96)).astype(np.float32) * 100, src)
    for a in (base, np.asfortranarray(base), base[:, ::3], base.T, base[::-1], base.reshape(4, 16, 96)):
        ref = reference(a, dst)
        got = convert(a, dst, backend=backend)
        assert_same_bits(got, ref)
        if a.flags.c_contiguous or a.flags.f_contiguous:
            assert got.flags.c_contiguous == ref.flags.c_contiguous
            assert got.flags.f_contiguous == ref.flags.f_contiguous
        for order in ("C", "F"):
            out = np.empty(a.shape, dst, order=order)
            r = convert(a, dst, out=out, backend=backend)
            assert r is out
            assert_same_bits(out, ref)


def test_overlapping_out(backend):
    buf = np.random.default_rng(1).standard_normal(4096).astype(np.float32)
    ref = reference(buf, F16)
    out = buf.view(np.float16)[1024 : 1024 + 4096]  # overlaps the source's tail
    r = convert(buf, F16, out=out, backend=backend)
    assert r is out
    assert_same_bits(out, ref)


def test_defaults_and_fallbacks():
    assert cpu_path.BACKEND in ("numba", "astype")
    assert tinyamp.kernels.warmup() == cpu_path.BACKEND
    x = np.linspace(-70000, 70000, 10_000, dtype=np.float32)
    assert_same_bits(convert(x, F16), reference(x, F16))  # auto backend, large
    assert_same_bits(convert(x[:5], F16), reference(x[:5], F16))  # small: astype
    assert_same_bits(convert(np.float32(3.0)[()], F16), reference(np.float32(3.0)[()], F16))
    z = np.array(2.5, np.float32)  # 0-d
    assert_same_bits(convert(z, F16, backend="numba"), reference(z, F16))
    e = np.empty((0, 3), np.float32)
    assert convert(e, F16).shape == (0, 3)
    assert_same_bits(convert(x, np.float64), x.astype(np.float64))  # not a fast pair
    assert_same_bits(convert(x, F32), x)
    assert convert(x, F32) is not x  # astype copies
    y = convert(x, "float16", backend="astype")
    assert y.dtype == F16

    class Sub(np.ndarray):
        pass

    s = x[:100].view(Sub) / 1000  # (subclasses go to astype, which may warn)
    assert type(convert(s, F16)) is Sub
    with pytest.raises(ValueError):
        convert(x, F16, out=np.empty(3, F16), backend="numba")
    with pytest.raises(ValueError):
        convert(x, F16, backend="nope")
    with pytest.raises(ValueError, match="expected 'numba' or 'astype'"):  # the NumPy bit recipes are gone
        convert(x, F16, backend="numpy")


def test_never_warns(backend):
    import warnings

    x = np.float32([1e6, -1e6, np.nan, 3.4e38] * 1024)
    x.view(np.uint32)[2] = 0x7F800001  # signalling NaN: astype warns "invalid"
    for n in (x.size, 4):  # fast path and the small-array astype path
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for dt in LOWP:
                assert_same_bits(convert(x[:n], dt, backend=None), reference(x[:n], dt))
                assert_same_bits(convert(x[:n], dt, backend=backend), reference(x[:n], dt))


# ---------------------------------------------------------------------------
# ReLU forward / backward


@pytest.mark.parametrize("dt", LOWP, ids=str)
def test_relu_all_patterns(backend, dt):
    x = ALL16.view(dt)
    with np.errstate(all="ignore"):
        ref = bits(np.maximum(x, 0)).copy()
    ref[ref == 0x8000] = 0  # documented: -0.0 -> +0.0 (NumPy's float16 loop keeps -0.0)
    got = ew.relu_lowp(x, backend=backend)
    assert got.dtype == dt
    assert np.array_equal(bits(got), ref)
    out = np.empty_like(x)
    assert ew.relu_lowp(x, out=out, backend=backend) is out
    assert np.array_equal(bits(out), ref)
    y = x.copy()  # in place
    ew.relu_lowp(y, out=y, backend=backend)
    assert np.array_equal(bits(y), ref)
    x2 = x.reshape(256, 256)[:, ::2]  # non-contiguous
    assert np.array_equal(bits(ew.relu_lowp(x2, backend=backend)).ravel(), ref.reshape(256, 256)[:, ::2].ravel())


def spy_on_kernel(monkeypatch, name):
    """A list that gets one entry per call of numba kernel ``name`` (which still runs)."""
    calls = []
    real = cpu_numba.KERNELS[name]
    monkeypatch.setitem(cpu_numba.KERNELS, name, lambda *args: calls.append(1) or real(*args))
    return calls


def patterns16(dt, shape, seed):
    """``shape``-many distinct 16-bit patterns as ``dt`` (every pattern for 65,536 elements)."""
    return np.random.default_rng(seed).permutation(ALL16)[:int(np.prod(shape))].view(dt).reshape(shape)


FAST_PATH_SHAPES = [(65536,), (256, 256), (16, 64, 64), (), (0, 16)]


@pytest.mark.skipif(not HAVE_NUMBA, reason="numba not installed or not selected")
@pytest.mark.parametrize("dt", LOWP, ids=str)
@pytest.mark.parametrize("shape", FAST_PATH_SHAPES, ids=str)
def test_relu_fast_path_all_patterns(monkeypatch, dt, shape):
    """The common call (no ``out``/``backend``, C-contiguous): the numba kernel, any ndim."""
    calls = spy_on_kernel(monkeypatch, "relu16")
    x = patterns16(dt, shape, 6)
    with np.errstate(all="ignore"):
        ref = bits(np.maximum(x, 0)).copy()
    ref[ref == 0x8000] = 0  # documented: -0.0 -> +0.0
    got = ew.relu_lowp(x)
    assert calls == ([1] if x.size else []) and got.dtype == dt and got.shape == shape
    assert np.array_equal(bits(got), ref)


@pytest.mark.skipif(not HAVE_NUMBA, reason="numba not installed or not selected")
@pytest.mark.parametrize("dt", LOWP, ids=str)
@pytest.mark.parametrize("shape", FAST_PATH_SHAPES, ids=str)
def test_relu_backward_fast_path_all_patterns(monkeypatch, dt, shape):
    """The common call (no ``out``/``backend``, C-contiguous, one shape): the numba kernel, any ndim."""
    calls = spy_on_kernel(monkeypatch, "relu_bwd16")
    x, g = patterns16(dt, shape, 6), patterns16(dt, shape, 7)
    with np.errstate(all="ignore"):
        ref = np.where(x > 0, g, 0)
    got = ew.relu_backward_lowp(g, x)
    assert calls == ([1] if x.size else [])
    assert_same_bits(got, ref)


@pytest.mark.parametrize("dt", LOWP, ids=str)
def test_relu_backward_all_patterns(backend, dt):
    x = ALL16.view(dt)
    g = np.random.default_rng(2).permutation(ALL16).view(dt)
    with np.errstate(all="ignore"):
        ref = np.where(x > 0, g, 0)
    got = ew.relu_backward_lowp(g, x, backend=backend)
    assert_same_bits(got, ref)
    out = np.empty_like(g)
    assert ew.relu_backward_lowp(g, x, out=out, backend=backend) is out
    assert_same_bits(out, ref)
    gg = g.copy()
    ew.relu_backward_lowp(gg, x, out=gg, backend=backend)  # in place into grad
    assert_same_bits(gg, ref)
    xf, gf = np.asfortranarray(x.reshape(256, 256)), np.asfortranarray(g.reshape(256, 256))
    assert_same_bits(ew.relu_backward_lowp(gf, xf, backend=backend), ref.reshape(256, 256))
    assert_same_bits(ew.relu_backward_lowp(g.reshape(256, 256), xf, backend=backend), ref.reshape(256, 256))


def test_relu_fallbacks():
    x = np.array([-1.0, 0.0, 2.0, np.nan], np.float32)
    assert_same_bits(ew.relu_lowp(x), np.maximum(x, 0))
    with np.errstate(all="ignore"):
        ref = np.where(x > 0, x, 0)
    assert_same_bits(ew.relu_backward_lowp(x, x), ref)


# ---------------------------------------------------------------------------
# linear's bias epilogue (gemm_bias on the CPU)


@pytest.mark.parametrize("dt", LOWP, ids=str)
def test_the_bias_epilogue_rounds_the_float32_sum_once(backend, dt):
    """The numba epilogue on every kind of float32 pattern (ties, overflow, NaN payloads) and an inf/nan bias."""
    rng = np.random.default_rng(3)
    u = f32_random_bits(200 * 300, seed=5)
    y = np.concatenate([u[: 100 * 300], rng.standard_normal(100 * 300).astype(np.float32).view(np.uint32)])
    y = y.view(np.float32).reshape(200, 300)
    b = rng.standard_normal(300).astype(np.float32)
    b[:3] = [np.inf, -np.inf, np.nan]
    with np.errstate(all="ignore"):
        ref = (y + b).astype(dt)
    got = np.empty((200, 300), np.uint16)
    cpu_numba.KERNELS["bias_round_f16" if dt == F16 else "bias_round_bf16"](y, b, got)
    assert_same_bits(got.view(dt), ref)


@pytest.mark.parametrize("dt", LOWP, ids=str)
@pytest.mark.parametrize("path", ["numba", "astype"])
def test_gemm_bias_on_the_cpu_is_the_unfused_expression(monkeypatch, dt, path):
    """linear's 16-bit forward: the float32 GEMM, += the widened bias, one rounding; numba or astype alike."""
    if path == "numba":
        assert HAVE_NUMBA, "numba is a dependency of the default install and must load"
        calls = spy_on_kernel(monkeypatch, "bias_round_f16" if dt == F16 else "bias_round_bf16")
    else:
        monkeypatch.setattr(cpu_path, "BACKEND", "astype")
    rng = np.random.default_rng(8)
    x = (rng.standard_normal((65, 40)) * 60).astype(dt)
    w = (rng.standard_normal((24, 40)) * 60).astype(dt)
    bias = (rng.standard_normal(24) * 1e3).astype(dt)
    bias[:3] = [np.inf, -np.inf, np.nan]
    with np.errstate(all="ignore"):
        x[0, :4] = np.array([np.inf, np.nan, 65504, -0.0]).astype(dt)
        want = (gemm(x, w, np.float32, trans_b=True) + bias.astype(np.float32)).astype(dt)
    assert_same_bits(gemm_bias(x, w, bias, trans_b=True), want)
    assert_same_bits(gemm_bias(x, w.T, bias), want)
    if path == "numba":
        assert calls == [1, 1]


def test_broken_numba_falls_back(monkeypatch):
    """numba installed but unusable: warn once, use astype, stay exact."""

    def broken():
        raise ImportError("simulated")

    monkeypatch.setattr(cpu_path, "_nb_state", None)
    monkeypatch.setattr(cpu_path, "LOADED", False)
    monkeypatch.setattr(cpu_path, "BACKEND", "numba")
    monkeypatch.setattr(cpu_path, "_load_numba", broken)
    x = f32_random_bits(100_000, seed=3).view(np.float32)
    with pytest.warns(RuntimeWarning, match="numba cast kernels unavailable"):
        got = convert(x, F16)
    assert cpu_path.BACKEND == "astype" and not cpu_path.LOADED
    assert_same_bits(got, reference(x, F16))
    with pytest.raises(RuntimeError):
        convert(x, F16, backend="numba")


# ---------------------------------------------------------------------------
# the calls without backend= (the hot paths of an AMP step)


@pytest.fixture(params=[p for p in _backend_params if p.values[0][0] == "numba"])
def numba_impl(request):
    """numba's float16 kernels (integer, then F16C), selected for the calls without ``backend=``."""
    select_f16_impl(request.param[1])
    yield request.param[1]
    select_f16_impl("hw" if cpu_path.F16C else "int")


def test_default_calls_take_numba_with_the_same_bits(numba_impl):
    """Each kernel's call without ``backend=`` (its short path) gives the explicit path's bits."""
    x32 = np.concatenate([f32_boundary_cases(), f32_random_bits(100_000)]).view(np.float32)
    for dt in LOWP:
        out = np.empty(x32.shape, dt)
        assert convert(x32, dt, out=out) is out
        assert_same_bits(out, reference(x32, dt))
        x = ALL16.view(dt).reshape(256, 256)
        assert_same_bits(ew.relu_lowp(x), ew.relu_lowp(x, backend="numba"))
        g = np.random.default_rng(2).permutation(ALL16).view(dt).reshape(256, 256)
        assert_same_bits(ew.relu_backward_lowp(g, x), ew.relu_backward_lowp(g, x, backend="numba"))
        acc = x32[: 300 * 200].reshape(300, 200)
        b = np.random.default_rng(3).standard_normal(200).astype(np.float32)
        got = np.empty(acc.shape, np.uint16)
        cpu_numba.KERNELS["bias_round_f16" if dt == F16 else "bias_round_bf16"](acc, b, got)  # the chosen impl
        with np.errstate(all="ignore"):
            assert_same_bits(got.view(dt), (acc + b).astype(dt))


# ---------------------------------------------------------------------------
# each special value alone
#
# The random and boundary inputs above always hold +inf, -inf and NaNs of both
# signs together, so a path that detects "some special value is present" from
# one sign only (a max over the int16 view, say) still gets the others right by
# accident. Here each special value is converted alone (the only special in the
# array, with and without finite neighbours), on every path including astype,
# against bit patterns written out by hand (IEEE 754: +-inf keep their sign;
# the canonical quiet NaN keeps its sign and stays the canonical quiet NaN).

SPECIAL_BITS = {  # dtype -> {name: bits}
    F32: {"+inf": 0x7F800000, "-inf": 0xFF800000, "+nan": 0x7FC00000, "-nan": 0xFFC00000},
    F16: {"+inf": 0x7C00, "-inf": 0xFC00, "+nan": 0x7E00, "-nan": 0xFE00},
    BF16: {"+inf": 0x7F80, "-inf": 0xFF80, "+nan": 0x7FC0, "-nan": 0xFFC0},
}
FINITE = [1.5, -2.0, 0.0, 0.25]  # exact in all three formats


@pytest.fixture(params=[pytest.param(("astype", None), id="astype")] + _backend_params)
def any_backend(request):
    name, impl = request.param
    if impl is not None:
        select_f16_impl(impl)
    yield name
    if HAVE_NUMBA:
        select_f16_impl("hw" if cpu_path.F16C else "int")


def _with_special(dtype, special_bits, n, finite):
    """n elements: every one the special value, or finite values with it at a few places."""
    uint = {2: np.uint16, 4: np.uint32}[dtype.itemsize]
    if finite:
        x = np.resize(np.array(FINITE, np.float32), n).astype(dtype)
        x.view(uint)[[0, n // 2, n - 1]] = special_bits
        return x
    return np.full(n, special_bits, uint).view(dtype)


@pytest.mark.parametrize("special", ["+inf", "-inf", "+nan", "-nan"])
@pytest.mark.parametrize("src,dst", PAIRS, ids=lambda p: str(p))
@pytest.mark.parametrize("finite", [False, True], ids=["alone", "among-finite"])
def test_each_special_value_alone(any_backend, src, dst, special, finite):
    n = 4096  # above every size threshold, so backend=None would take the fast path too
    x = _with_special(src, SPECIAL_BITS[src][special], n, finite)
    got = bits(convert(x, dst, backend=any_backend))
    expected = bits(np.resize(np.array(FINITE, np.float32), n).astype(dst)) if finite \
        else np.empty(n, {2: np.uint16, 4: np.uint32}[dst.itemsize])
    where = [0, n // 2, n - 1] if finite else slice(None)
    expected[where] = SPECIAL_BITS[dst][special]
    bad = np.flatnonzero(got != expected)
    assert bad.size == 0, (f"{special} {src}->{dst} on {any_backend}: {bad.size} wrong, first at {bad[0]}: "
                           f"{hex(got[bad[0]])}, expected {hex(expected[bad[0]])}")


# ---------------------------------------------------------------------------
# cpu_optim: SGD and Adam in one numba pass, bit for bit the NumPy path

from tests.support import fused_drivers as fd  # noqa: E402
from tinyamp.kernels.cpu import cpu_optim  # noqa: E402


def _fused_or_numpy(fused, numpy_path):
    """A driver update: the numba pass on kept float32 steps, the NumPy path otherwise."""
    def update(*args, low=None, **case):
        keep = args[-1]
        if (keep is True or bool(keep)) and fused(*args[:-1], **case):
            if low is not None:
                low[...] = args[0].astype(low.dtype)
            return
        numpy_path(*args, low=low, **case)
    return update


@pytest.mark.skipif(not HAVE_NUMBA, reason="numba not installed or not selected")
@pytest.mark.parametrize("dtypes", fd.DTYPE_CASES, ids=lambda d: "-".join(str(x) for x in d))
@pytest.mark.parametrize("case", fd.SGD_CASES, ids=fd.case_id)
def test_numba_sgd_matches_the_numpy_path(case, dtypes):
    want = fd.sgd_run(fd.numpy_sgd, case, dtypes)
    got = fd.sgd_run(_fused_or_numpy(cpu_optim.sgd_update, fd.numpy_sgd), case, dtypes)
    for step, (a, b) in enumerate(zip(got, want)):
        fd.assert_same_bits(a, b, f"sgd step {step}")


@pytest.mark.skipif(not HAVE_NUMBA, reason="numba not installed or not selected")
@pytest.mark.parametrize("dtypes", fd.DTYPE_CASES, ids=lambda d: "-".join(str(x) for x in d))
@pytest.mark.parametrize("case", fd.ADAM_CASES, ids=fd.case_id)
def test_numba_adam_matches_the_numpy_path(case, dtypes):
    def fused(w, g, m, v, v_max, step, *, amsgrad=None, **case):
        return cpu_optim.adam_update(w, g, m, v, v_max, step, **case)

    want = fd.adam_run(fd.numpy_adam, case, dtypes)
    got = fd.adam_run(_fused_or_numpy(fused, fd.numpy_adam), case, dtypes)
    for step, (a, b) in enumerate(zip(got, want)):
        fd.assert_same_bits(a, b, f"adam step {step}")
    # float32 weights with float32 gradients took the numba pass (the others are not its case).
    assert cpu_optim._applies(np.zeros(2, np.float32)) == (cpu_path.BACKEND == "numba")


# ------------------------------------------------- gaps a mutation audit found (issue 30)
@pytest.mark.parametrize("make", [lambda ps: __import__("tinyamp").optim.SGD(ps, lr=0.1, momentum=0.9),
                                  lambda ps: __import__("tinyamp").optim.Adam(ps, lr=0.1)], ids=["sgd", "adam"])
def test_a_non_contiguous_parameter_is_updated_where_it_lives(make) -> None:
    # The numba update indexes a flat view; a transposed parameter's reshape would be a copy, and the update
    # would land there and be lost. cpu_optim refuses such an array (the NumPy path runs): same values.
    import tinyamp as ta

    values = np.arange(24, dtype=np.float32).reshape(4, 6) / 7
    runs = []
    for transposed in (False, True):
        p = ta.nn.Parameter(ta.tensor(values).T if transposed else ta.tensor(values.T.copy()))
        assert p.array.flags.c_contiguous != transposed
        opt = make([p])
        for _ in range(2):
            opt.zero_grad()
            (p * p).sum().backward()
            opt.step()
        runs.append(p.detach().numpy().copy())
    np.testing.assert_array_equal(runs[1], runs[0])
    assert not np.array_equal(runs[0], values.T)  # it moved
