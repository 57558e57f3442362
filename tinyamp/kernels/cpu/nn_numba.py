"""numba loops of the transformer ops (erf, GELU, layer norm, softmax, attention's softmax, embedding backward).

Everything numba compiles for these ops lives in this one file on purpose: numba's on-disk cache
(``cache=True``) is keyed on the file of each kernel, so a scalar function inlined from another file
could stay stale in a kernel's cache after an edit. ``cpu_numba.load`` calls :func:`define` with
numba's tools (nothing here imports numba: its import costs a second); the array-level functions
that call these loops are ``gelu_cpu.py`` and its siblings.

Scalar functions, inlined, written so that LLVM vectorises the loops that call them: no calls into
the C library (numba's ``math.exp`` is a scalar libm call), only arithmetic, selects and bit casts.

- ``widen(a, i)``: element ``i`` of a kernel input as its compute type: float64 for float64 arrays,
  float32 otherwise. A float16 array reaches a kernel as a ``uint16`` view and a bfloat16 array as
  an ``int16`` view (the two 16-bit formats are told apart by the view's type), widened exactly.
- ``narrow(out, i, v)``: ``v`` stored in ``out``'s format: to float32 (or float64) by a cast, to
  float16/bfloat16 through float32 (nearest even, NumPy's and ml_dtypes' NaN rules: the conversions
  of ``cpu_numba``), as a float32 result rounded to 16 bits.
- ``exp64(z)``: float64 exp to about 1 ulp, subnormal results and overflow included (Cody-Waite
  reduction, a degree-13 Taylor polynomial, the power of two applied in two halves).
- ``exp32(z)``: float32 exp, evaluated as ``exp64`` and rounded.
- ``tanh_sech2(u)``: ``tanh(u) = (1 - e) / (1 + e)`` with ``e = exp(-2|u|)`` and the sign of ``u``
  (absolute error about 1e-16), and ``1 - tanh(u)^2 = 4e / (1 + e)^2`` (relative error about 1e-16:
  not ``1 - t * t``, which cancels); ``tanh64(u)``, the first alone.
- ``erf64(x)``: THE erf of tinyamp (``ta.erf``, exact GELU and its backward): float64 arithmetic,
  absolute error below 2e-15 on every input (relative below 2e-15 where ``|x| < 1``), measured
  against mpmath in tests/kernels. A float32 result rounded from it is correctly rounded except for
  ties within 2e-15. ``|x| < 1``: ``x P(x^2)`` (degree 10); ``1 <= |x| < 6``: ``1 - exp(-x^2) Q(x)``
  (degree 17, ``Q ~ erfcx``); beyond, 1. Both pieces are evaluated and one is selected, so the loop
  vectorises. ``erf64_gauss(x)`` also returns ``exp(-x^2)`` (GELU's backward needs both).

The coefficients were fitted once in mpmath (tests/kernels/make_erf_coefficients.py): ``ERF_SMALL``
by least squares of ``erf(x)/x`` in ``x^2`` on Chebyshev nodes of [0, 1], ``ERF_LARGE`` by least
squares of ``erfcx(x)`` weighted by ``exp(-x^2)`` (the error of ``erf``) in ``u = (2x - 7) / 5`` on
[1, 6].

Kernels (``KERNELS``, name -> compiled loop): ``erf``, ``gelu``, ``gelu_tanh``, ``gelu_backward``,
``gelu_tanh_backward`` on 1-D views; each widens, computes in float64 and narrows once per element.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

ERF_SMALL = (
    1.1283791670955123, -0.3761263890317745, 0.11283791670663261, -0.02686617059592347, 0.005223977210540409,
    -0.0008548306852471931, 0.00012054724801146779, -1.4913880818054342e-05, 1.6315127389495083e-06,
    -1.5210121269582504e-07, 9.471255279258239e-09,
)
ERF_LARGE = (
    0.1552936556447429, -0.1033089391900602, 0.0666321588947264, -0.04176665943028678, 0.02549176349183915,
    -0.015211736809015042, 0.00876343799208647, -0.00490430540654905, 0.004005126285344383,
    0.0015768983376848091, 0.0035295168720282993, -0.005652730900002301, -0.020043784574966243,
    -0.03207552548113841, -0.030034898490756773, -0.01768762454187614, -0.006042355867264192,
    -0.0009583324867801236,
)
ERF_SPLIT = 1.0   # where the two pieces meet
ERF_ONE = 6.0     # erf(x) rounds to 1 in float64 from about 5.93

_INV_SQRT_2 = 0.7071067811865476
_INV_SQRT_2PI = 0.3989422804014327
_TANH_K = 0.7978845608028654  # sqrt(2 / pi): gelu's tanh approximation is tanh(k (x + c x^3))
_TANH_C = 0.044715

_LOG2E = 1.4426950408889634
_LN2_HI = 0.6931471803691238   # ln 2 split so that k * _LN2_HI is exact for |k| < 2**11
_LN2_LO = 1.9082149292705877e-10


KERNELS: dict = {}  # name -> compiled kernel, filled by define()


def define(nb: Any) -> None:
    """Define the scalar functions (module globals) and the kernels (``KERNELS``); ``nb``: numba's tools."""
    # Module globals, not closure cells: numba's on-disk cache misses for kernels whose closures hold
    # functions (see cpu_numba.load).
    global widen, narrow, exp64, exp32, tanh64, tanh_sech2, erf64, erf64_gauss, bits_to_f64, f32_from_bits, _store
    global _h2f, _f2h, _f2b, _fbits
    types, ir = nb.types, nb.ir
    _h2f, _f2h, _f2b, _fbits = nb.h2f, nb.f2h, nb.f2b, nb.fbits
    inline = nb.njit(inline="always", nogil=True, cache=True, error_model="numpy")

    @nb.intrinsic
    def bits_to_f64(typingctx, i):
        """Reinterpret an int64 as float64."""

        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], ir.DoubleType())

        return types.float64(types.int64), codegen

    def widen(a, i):  # noqa: F811 - the stub numba's overload replaces
        """a[i] in its compute type (float64 stays float64; float32, float16, bfloat16 give float32)."""

    @nb.overload(widen, inline="always")
    def _widen(a, i):
        if a.dtype == types.uint16:  # float16 bits
            return lambda a, i: f32_from_bits(_h2f(np.uint32(a[i])))
        if a.dtype == types.int16:   # bfloat16 bits
            return lambda a, i: f32_from_bits(np.uint32(np.uint16(a[i])) << np.uint32(16))
        if a.dtype == types.float64:
            return lambda a, i: a[i]
        return lambda a, i: np.float32(a[i])

    def narrow(out, i, v):  # noqa: F811
        """out[i] = v rounded once to out's format."""

    @nb.overload(narrow, inline="always")
    def _narrow(out, i, v):
        if out.dtype == types.uint16:
            return lambda out, i, v: _store(out, i, np.uint16(_f2h(_fbits(np.float32(v)))))
        if out.dtype == types.int16:
            return lambda out, i, v: _store(out, i, np.int16(np.uint16(_f2b(_fbits(np.float32(v))))))
        return lambda out, i, v: _store(out, i, v)

    @nb.intrinsic
    def f32_from_bits(typingctx, u):
        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], ir.FloatType())

        return types.float32(types.uint32), codegen

    @inline
    def _store(out, i, v):
        out[i] = v

    @inline
    def exp64(z):
        zc = min(max(z, -746.0), 710.0)  # beyond, the result is 0 or inf (the products below round there)
        k = np.floor(zc * _LOG2E + 0.5)
        r = (zc - k * _LN2_HI) - k * _LN2_LO
        p = 1.0 / 6227020800.0
        p = p * r + 1.0 / 479001600.0
        p = p * r + 1.0 / 39916800.0
        p = p * r + 1.0 / 3628800.0
        p = p * r + 1.0 / 362880.0
        p = p * r + 1.0 / 40320.0
        p = p * r + 1.0 / 5040.0
        p = p * r + 1.0 / 720.0
        p = p * r + 1.0 / 120.0
        p = p * r + 1.0 / 24.0
        p = p * r + 1.0 / 6.0
        p = p * r + 0.5
        p = p * r + 1.0
        p = p * r + 1.0
        # 2^k as two normal powers of two, so subnormal results and overflow round as they should.
        k1 = np.int64(k) >> 1
        k2 = np.int64(k) - k1
        e = (p * bits_to_f64((k1 + 1023) << 52)) * bits_to_f64((k2 + 1023) << 52)
        if z != z:
            e = z
        return e

    @inline
    def exp32(z):
        return np.float32(exp64(np.float64(z)))

    @inline
    def tanh_sech2(u):
        e = exp64(-2.0 * abs(u))
        t = (1.0 - e) / (1.0 + e)
        if u != u:
            t = u
        return math.copysign(t, u), 4.0 * e / ((1.0 + e) * (1.0 + e))

    @inline
    def tanh64(u):
        return tanh_sech2(u)[0]

    @inline
    def erf64_gauss(x):
        a = min(abs(x), ERF_ONE)
        t = a * a
        c = ERF_SMALL
        s = ((((((((((c[10] * t + c[9]) * t + c[8]) * t + c[7]) * t + c[6]) * t + c[5]) * t + c[4]) * t
                  + c[3]) * t + c[2]) * t + c[1]) * t + c[0]) * a
        u = (2.0 * a - (ERF_SPLIT + ERF_ONE)) / (ERF_ONE - ERF_SPLIT)
        d = ERF_LARGE
        q = d[17]
        q = q * u + d[16]
        q = q * u + d[15]
        q = q * u + d[14]
        q = q * u + d[13]
        q = q * u + d[12]
        q = q * u + d[11]
        q = q * u + d[10]
        q = q * u + d[9]
        q = q * u + d[8]
        q = q * u + d[7]
        q = q * u + d[6]
        q = q * u + d[5]
        q = q * u + d[4]
        q = q * u + d[3]
        q = q * u + d[2]
        q = q * u + d[1]
        q = q * u + d[0]
        gauss = exp64(-(x * x))
        r = s if a < ERF_SPLIT else 1.0 - gauss * q
        if x != x:
            r = x
        return math.copysign(r, x), gauss

    @inline
    def erf64(x):
        return erf64_gauss(x)[0]

    jit = nb.jit

    @jit
    def erf(src, dst):
        for i in range(src.size):
            narrow(dst, i, erf64(np.float64(widen(src, i))))

    @jit
    def gelu(src, dst):
        for i in range(src.size):
            v = np.float64(widen(src, i))
            narrow(dst, i, 0.5 * v * (1.0 + erf64(v * _INV_SQRT_2)))

    @jit
    def gelu_tanh(src, dst):
        for i in range(src.size):
            v = np.float64(widen(src, i))
            narrow(dst, i, 0.5 * v * (1.0 + tanh64(_TANH_K * (v + _TANH_C * v * v * v))))

    @jit
    def gelu_backward(gy, x, dst):
        for i in range(x.size):
            v = np.float64(widen(x, i))
            e, gauss = erf64_gauss(v * _INV_SQRT_2)  # gauss = exp(-v^2 / 2)
            slope = 0.5 * (1.0 + e) + v * gauss * _INV_SQRT_2PI
            narrow(dst, i, np.float64(widen(gy, i)) * slope)

    @jit
    def gelu_tanh_backward(gy, x, dst):
        for i in range(x.size):
            v = np.float64(widen(x, i))
            t, sech2 = tanh_sech2(_TANH_K * (v + _TANH_C * v * v * v))  # sech2 = 1 - t^2, without cancelling
            slope = 0.5 * (1.0 + t) + 0.5 * v * sech2 * _TANH_K * (1.0 + 3.0 * _TANH_C * v * v)
            narrow(dst, i, np.float64(widen(gy, i)) * slope)

    KERNELS.update(erf=erf, gelu=gelu, gelu_tanh=gelu_tanh, gelu_backward=gelu_backward,
                    gelu_tanh_backward=gelu_tanh_backward)
