"""fp8 casts (kernels/fp8.py): bit-identical to clip + ml_dtypes, exhaustively where it matters.

- every positive float32 bit pattern of every binade where the encoder's
  rule changes: those that round to zero or to subnormals (each shifts by
  another amount), the first two normal ones (the carry from subnormal to
  normal), the top two and the one above (the maximum, the 464 / 61440 ties,
  saturation) and the inf/NaN binade (every NaN payload); the binades between
  (one formula, the exponent carried along) on every 61st pattern plus every
  tie and its neighbours; the negative side on every 5th pattern (the encoder
  ORs the sign in);
- all 2^16 float16 and bfloat16 patterns (NaN, inf, subnormals, saturation),
  through the kernels and through ``Tensor.to``;
- both rules: saturating (``np.clip`` to +-max, then ``astype``: Transformer
  Engine's) and non-saturating (plain ``astype``: ml_dtypes');
- the numba path and the NumPy reference path (no numba) agree;
- decode of all 256 codes, amax, and the E8M0 block-exponent rules against a
  float64 ``log2`` definition.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tinyamp as ta
from tinyamp import backend
from tinyamp.kernels import fp8
from tinyamp.kernels.cpu import cpu_path

FORMATS = [pytest.param(fp8.E4M3, id="e4m3"), pytest.param(fp8.E5M2, id="e5m2")]
BINADE = 1 << 23


def _binades(f: fp8.Fp8Format) -> "tuple[list[int], list[int]]":
    """Biased float32 exponents: (enumerated whole, sampled). Whole: from the binade below half the smallest
    subnormal (everything there rounds to 0) to the second normal one, the top two, the one above the maximum
    (everything there saturates) and 255 (inf and NaN)."""
    low, first_normal, top = 127 + (1 - f.bias - f.mbits) - 2, 127 + 1 - f.bias, 127 + f.emax
    whole = list(range(low, first_normal + 2)) + [top - 1, top, top + 1, 255]
    return whole, list(range(first_normal + 2, top - 1))


def _sampled_mantissas(f: fp8.Fp8Format) -> np.ndarray:
    """Every 61st mantissa, and for every kept mantissa value its tie and the patterns next to it."""
    drop = 23 - f.mbits
    kept = np.arange(1 << f.mbits, dtype=np.uint32) << np.uint32(drop)
    ties = (kept[:, None] + np.uint32(1 << (drop - 1)) + np.array([-2, -1, 0, 1, 2], np.int64)[None, :])
    return np.unique(np.concatenate([np.arange(0, BINADE, 61, dtype=np.uint32), kept,
                                     ties.reshape(-1).astype(np.uint32)]))


def _same(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """assert_array_equal's verdict at a tenth of its cost on 8M-element arrays; the first mismatches shown."""
    if not np.array_equal(got, want):
        bad = np.flatnonzero(got != want)[:5]
        raise AssertionError(f"{what}: {np.count_nonzero(got != want)} mismatches, first at {bad}: got "
                             f"{got.reshape(-1)[bad]}, want {want.reshape(-1)[bad]}")


def _binade(e: int, mantissas: np.ndarray, out: np.ndarray) -> np.ndarray:
    """The float32 values (biased exponent ``e``) with these mantissas, written into ``out``."""
    np.bitwise_or(mantissas, np.uint32(e) << np.uint32(23), out=out[:mantissas.size])
    return out[:mantissas.size].view(np.float32)


def _reference(x: np.ndarray, f: fp8.Fp8Format, saturate: bool) -> np.ndarray:
    with np.errstate(all="ignore"):
        return (np.clip(x, -f.max, f.max) if saturate else x).astype(f.dtype).view(np.uint8)


@pytest.mark.parametrize("f", FORMATS)
def test_every_float32_of_the_relevant_binades_saturating(f: fp8.Fp8Format) -> None:
    whole, sampled = _binades(f)
    every, some, buffer = np.arange(BINADE, dtype=np.uint32), _sampled_mantissas(f), np.empty(BINADE, np.uint32)
    checked = 0
    for e in whole + sampled:
        x = _binade(e, every if e in whole else some, buffer)
        _same(fp8.encode(x, f.dtype), _reference(x, f, True), f"binade 2^{e - 127}")
        neg = -x[::5]
        _same(fp8.encode(neg, f.dtype), _reference(neg, f, True), f"binade -2^{e - 127}")
        checked += x.size + neg.size
    assert checked > 9.5e7


@pytest.mark.parametrize("f", FORMATS)
def test_non_saturating_rule_beyond_the_maximum(f: fp8.Fp8Format) -> None:
    """Below the maximum both rules are the same computation; above it ml_dtypes' NaN (E4M3) or inf (E5M2)."""
    every, buffer = np.arange(BINADE, dtype=np.uint32), np.empty(BINADE, np.uint32)
    for e in (127 + f.emax, 127 + f.emax + 1, 127 + f.emax + 2, 0xFF):
        x = _binade(e, every, buffer)
        for values in (x, -x[::3]):
            _same(fp8.encode(values, f.dtype, saturate=False), _reference(values, f, False), f"exponent {e}")


@pytest.mark.parametrize("f", FORMATS)
def test_scaled_encode_is_the_float32_product_then_the_cast(f: fp8.Fp8Format) -> None:
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(1 << 20) * np.exp(rng.uniform(-20, 20, 1 << 20))).astype(np.float32)
    for scale in (np.float32(1.0), np.float32(448 / 3.7), np.float32(2.0 ** -20), np.float32(3e38)):
        with np.errstate(all="ignore"):
            product = x * scale
        for saturate in (True, False):
            np.testing.assert_array_equal(fp8.encode(x, f.dtype, np.array([scale]), saturate=saturate),
                                          _reference(product, f, saturate))


@pytest.mark.parametrize("f", FORMATS)
@pytest.mark.parametrize("source", [np.float16, ml_dtypes.bfloat16], ids=["float16", "bfloat16"])
def test_all_16_bit_patterns(f: fp8.Fp8Format, source: type) -> None:
    x = np.arange(1 << 16, dtype=np.uint16).view(source)
    x32 = x.astype(np.float32)
    for saturate in (True, False):
        np.testing.assert_array_equal(fp8.encode(x, f.dtype, saturate=saturate), _reference(x32, f, saturate))
    # What Tensor.to runs: saturating, then decoded back exactly (and rounded once to float16).
    t8 = ta.from_numpy(x).to(f.dtype)
    assert t8.dtype == f.dtype
    np.testing.assert_array_equal(t8.numpy().view(np.uint8), _reference(x32, f, True))
    back = t8.to(ta.float32).numpy()
    np.testing.assert_array_equal(back.view(np.uint32), _reference(x32, f, True).view(f.dtype).astype(
        np.float32).view(np.uint32))
    np.testing.assert_array_equal(t8.to(ta.float16).numpy().view(np.uint16),
                                  _reference(x32, f, True).view(f.dtype).astype(np.float16).view(np.uint16))


@pytest.mark.parametrize("f", FORMATS)
def test_numpy_path_equals_numba_path(f: fp8.Fp8Format, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(2)
    bits = rng.integers(0, 2**32, 1 << 18, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32)
    codes = np.arange(256, dtype=np.uint8)
    fast = (fp8.encode(x, f.dtype), fp8.encode(x, f.dtype, np.float32(0.25), saturate=False),
            fp8.decode(codes, f.dtype, np.float32(3.0)), fp8.amax(x[np.isfinite(x)]))
    monkeypatch.setattr(cpu_path, "BACKEND", "astype")  # numba off: the NumPy path
    slow = (fp8.encode(x, f.dtype), fp8.encode(x, f.dtype, np.float32(0.25), saturate=False),
            fp8.decode(codes, f.dtype, np.float32(3.0)), fp8.amax(x[np.isfinite(x)]))
    for a, b in zip(fast, slow):
        np.testing.assert_array_equal(np.atleast_1d(a).view(np.uint8), np.atleast_1d(b).view(np.uint8))


@pytest.mark.parametrize("f", FORMATS)
def test_decode_all_codes(f: fp8.Fp8Format) -> None:
    codes = np.arange(256, dtype=np.uint8)
    exact = codes.view(f.dtype).astype(np.float32)
    np.testing.assert_array_equal(fp8.decode(codes, f.dtype).view(np.uint32), exact.view(np.uint32))
    scaled = fp8.decode(codes, f.dtype, np.float32(1 / 3))
    np.testing.assert_array_equal(scaled.view(np.uint32), (exact * np.float32(1 / 3)).view(np.uint32))
    with pytest.raises(TypeError, match="uint8 codes"):
        fp8.decode(codes.astype(np.int32), f.dtype)


def test_amax_propagates_nan_and_sees_inf() -> None:
    x = np.array([1.0, -3.5, 2.0], np.float32)
    assert fp8.amax(x) == np.float32(3.5) and fp8.amax(x).shape == ()
    assert fp8.amax(np.array([1.0, -np.inf], np.float32)) == np.inf
    assert np.isnan(fp8.amax(np.array([np.nan, -np.inf, 5.0], np.float32)))
    assert fp8.amax(np.zeros(0, np.float32)) == 0
    assert fp8.amax(np.array([-0.0, 1e-45], np.float32)) == np.float32(1e-45)
    assert fp8.amax(np.array([2.5, -7.0], ml_dtypes.bfloat16)) == 7.0


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="float8_e4m3fn or float8_e5m2"):
        fp8.encode(np.zeros(3, np.float32), np.float16)
    with pytest.raises(TypeError, match="fp8 encode: expected a float32"):
        fp8.encode(np.zeros(3, np.int32), ta.float8_e4m3fn)


def _e8m0_reference(amax: np.ndarray, f: fp8.Fp8Format, rule: str) -> np.ndarray:
    """The rules as written in the OCP MX spec / cuBLAS, in float64 arithmetic (exact for these inputs)."""
    out = np.empty(amax.shape, np.int64)
    for i, a in enumerate(amax.astype(np.float64)):
        if not np.isfinite(a):
            out[i] = 255
            continue
        if a == 0:
            out[i] = 0
            continue
        if rule == "floor":
            e = np.floor(np.log2(a)) - f.emax if a >= 2.0 ** -126 else -200  # a float32 subnormal: below code 0
        else:
            v = float(np.float32(np.float32(a) / np.float32(f.max)))
            e = np.ceil(np.log2(v)) if v > 0 else -127
        out[i] = int(np.clip(e + 127, 0, 254))
    return out


@pytest.mark.parametrize("rule", ["floor", "rceil"])
@pytest.mark.parametrize("f", FORMATS)
def test_e8m0_block_exponent_rules(rule: str, f: fp8.Fp8Format) -> None:
    rng = np.random.default_rng(3)
    edges = np.concatenate([[2.0 ** k * m for m in (1.0, 1.0 + 2 ** -23, 1.5, 2.0 - 2 ** -22)]
                            for k in range(-149, 128)]).astype(np.float32)
    edges = edges[edges > 0]
    with np.errstate(over="ignore"):  # edges * max overflows to inf at the top: inf is a probe too
        probes = np.concatenate([edges, edges * np.float32(f.max), rng.uniform(0, 1, 2000).astype(np.float32)
                                 * np.exp2(rng.integers(-140, 120, 2000)).astype(np.float32),
                                 np.array([0.0, np.inf, np.nan, 3e38, 1e-45], np.float32)])
    got = fp8.e8m0_exponent(probes, f.dtype, rule)
    assert got.dtype == np.uint8
    np.testing.assert_array_equal(got.astype(np.int64), _e8m0_reference(probes, f, rule))


def test_e8m0_rules_on_a_block_maximum() -> None:
    """RCEIL never saturates the block maximum; the floor rule can (the OCP rule's known cost)."""
    amax = np.array([500.0, 448.0, 449.0, 1.0], np.float32)
    for rule, saturated in (("rceil", [False] * 4), ("floor", [True, False, True, False])):
        scale = fp8.e8m0_value(fp8.e8m0_exponent(amax, ta.float8_e4m3fn, rule))
        assert list(amax / scale > 448) == saturated
    codes = np.arange(255, dtype=np.uint8)
    np.testing.assert_array_equal(fp8.e8m0_value(codes), codes.view(ml_dtypes.float8_e8m0fnu).astype(np.float32))
    assert np.isnan(fp8.e8m0_value(np.array([255], np.uint8))[0])


@pytest.mark.parametrize("f", FORMATS)
def test_the_cuda_kernels_give_the_cpus_codes_and_values(f: fp8.Fp8Format) -> None:
    """The CUDA encoder/decoder (``cuda/cuda_fp8.py``, run by the stand-in's g++ build of the same source)."""
    rng = np.random.default_rng(4)
    x = np.concatenate([rng.integers(0, 2**32, 1 << 17, dtype=np.uint64).astype(np.uint32).view(np.float32),
                        (rng.standard_normal(1 << 15) * 100).astype(np.float32),
                        np.array([np.inf, -np.inf, np.nan, 464.0, 61440.0, 1e-45], np.float32)])
    codes = np.arange(256, dtype=np.uint8)
    scale = np.array([np.float32(0.37)])
    with backend.use_cuda_standin():
        cp = backend.cupy()
        xd, cd, sd = cp.asarray(x), cp.asarray(codes), cp.asarray(scale)
        for saturate in (True, False):
            for s in (None, scale):
                got = cp.asnumpy(fp8.encode(xd, f.dtype, None if s is None else sd, saturate=saturate))
                _same(got, fp8.encode(x, f.dtype, s, saturate=saturate), f"encode saturate={saturate} scale={s}")
        with np.errstate(invalid="ignore"):  # ml_dtypes warns about the NaN patterns it converts
            x16 = x.astype(ml_dtypes.bfloat16)
        _same(cp.asnumpy(fp8.encode(cp.asarray(x16), f.dtype)), fp8.encode(x16, f.dtype), "encode from bfloat16")
        decoded = cp.asnumpy(fp8.decode(cd, f.dtype, sd))
        _same(decoded.view(np.uint32), fp8.decode(codes, f.dtype, scale).view(np.uint32), "decode")
        assert float(cp.asnumpy(fp8.amax(xd[-2000:-6]))) == float(fp8.amax(x[-2000:-6]))
        assert np.isnan(cp.asnumpy(fp8.amax(xd)))


@pytest.mark.parametrize("tile", [(1, 32), (1, 128), (128, 128), (3, 5)], ids=str)
def test_tile_kernels_equal_the_array_expressions(tile: "tuple[int, int]", monkeypatch: pytest.MonkeyPatch) -> None:
    """block_amax / encode_tiles / decode_tiles (numba, C-contiguous and transposed) against the NumPy expressions
    (numba off), on partial tiles and every kind of value (NaN, inf, subnormal, saturating products)."""
    rng = np.random.default_rng(5)
    rows, cols = tile
    x = (rng.standard_normal((261, 300)) * np.exp2(rng.integers(-30, 30, (261, 300)))).astype(np.float32)
    x[:128, :128] = 0  # whole zero tiles
    x[128:].reshape(-1)[rng.choice(133 * 300, 40, replace=False)] = [np.nan, np.inf, -np.inf, 1e-45] * 10
    shape = (-(-261 // rows), -(-300 // cols))
    scales = (np.exp2(rng.integers(-10, 10, shape)) * 1.375).astype(np.float32)
    scales.reshape(-1)[::7] = 3e38  # products beyond the range: saturation
    for name, v in {"C": x, "transposed": np.ascontiguousarray(x.T).T}.items():
        for f in (fp8.E4M3, fp8.E5M2):
            got = []
            for path in ("numba", "astype"):
                monkeypatch.setattr(cpu_path, "BACKEND", path)
                codes = fp8.encode_tiles(v, f.dtype, scales, rows, cols)
                got.append((fp8.block_amax(v, rows, cols).view(np.uint32), codes,
                            fp8.decode_tiles(codes, f.dtype, scales, rows, cols).view(np.uint32)))
            for what, a, b in zip(("block_amax", "encode_tiles", "decode_tiles"), *got):
                _same(a, b, f"{what} {name} {f.name}")
            peak = got[0][0].view(np.float32)
            assert peak.shape == shape and np.isnan(peak).any() and (peak == 0).any()
