"""numba loops of the transformer ops (erf, GELU, layer norm, softmax, attention's softmax, embedding backward).

Everything numba compiles for these ops lives in this one file on purpose: numba's on-disk cache
(``cache=True``) is keyed on the file of each kernel, so a scalar function inlined from another file
could stay stale in a kernel's cache after an edit. ``cpu_numba.load`` calls :func:`define` with
numba's tools (nothing here imports numba: its import costs a second); the array-level functions
that call these loops are ``gelu_cpu.py`` and its siblings.

Scalar functions, inlined, written so that LLVM vectorises the loops that call them: no calls into
the C library (numba's ``math.exp`` is a scalar libm call), only arithmetic, selects and bit casts.
The polynomials' Horner steps are ``fma(a, b, c)`` (LLVM's fused multiply-add, rounded once: numba
compiles without fast-math, so LLVM does not contract ``a * b + c`` itself).

- ``widen(a, i)``: element ``i`` of a kernel input as its compute type: float64 for float64 arrays,
  float32 otherwise. A float16 array reaches a kernel as a ``uint16`` view and a bfloat16 array as
  an ``int16`` view (the two 16-bit formats are told apart by the view's type), widened exactly.
- ``narrow(out, i, v)``: ``v`` stored in ``out``'s format: to float32 (or float64) by a cast, to
  float16/bfloat16 through float32 (nearest even, NumPy's and ml_dtypes' NaN rules: the conversions
  of ``cpu_numba``), as a float32 result rounded to 16 bits.
- ``compute(a, v)``: ``v`` in the compute type of ``a``'s elements.
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
``gelu_tanh_backward`` on 1-D views (each widens, computes in float64 and narrows once per element);
``layer_norm``, ``layer_norm_backward``, ``softmax``, ``log_softmax``, ``softmax_backward`` and
``log_softmax_backward`` on rows of a 1-D view; ``embedding_backward`` (a scatter-add into rows);
``attention_softmax``, ``attention_probabilities`` and ``attention_dscores`` on a block of attention
scores (``attention_cpu.py`` runs the products around them through BLAS).
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
    global widen, narrow, compute, fma, exp64, exp32, tanh64, tanh_sech2, erf64, erf64_gauss, bits_to_f64, f32_from_bits, _store
    global _h2f, _f2h, _f2b, _fbits, row_max, row_exp_sum, row_dot, row_sum, row_limit, masked_scores
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

    def compute(a, v):  # noqa: F811
        """v in a's compute type (float64 for float64 arrays, float32 otherwise)."""

    @nb.overload(compute, inline="always")
    def _compute(a, v):
        if a.dtype == types.float64:
            return lambda a, v: np.float64(v)
        return lambda a, v: np.float32(v)

    @nb.intrinsic
    def fma(typingctx, a, b, c):
        """a * b + c rounded once (LLVM's fma: one instruction where the CPU has FMA, as x86-64 since 2013)."""

        def codegen(context, builder, signature, args):
            ty = args[0].type
            fn = builder.module.declare_intrinsic("llvm.fma", [ty], ir.FunctionType(ty, [ty, ty, ty]))
            return builder.call(fn, args)

        return a(a, a, a), codegen

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
        p = fma(p, r, 1.0 / 479001600.0)
        p = fma(p, r, 1.0 / 39916800.0)
        p = fma(p, r, 1.0 / 3628800.0)
        p = fma(p, r, 1.0 / 362880.0)
        p = fma(p, r, 1.0 / 40320.0)
        p = fma(p, r, 1.0 / 5040.0)
        p = fma(p, r, 1.0 / 720.0)
        p = fma(p, r, 1.0 / 120.0)
        p = fma(p, r, 1.0 / 24.0)
        p = fma(p, r, 1.0 / 6.0)
        p = fma(p, r, 0.5)
        p = fma(p, r, 1.0)
        p = fma(p, r, 1.0)
        # 2^k as two normal powers of two, so subnormal results and overflow round as they should.
        k1 = np.int64(k) >> 1
        k2 = np.int64(k) - k1
        e = (p * bits_to_f64((k1 + 1023) << 52)) * bits_to_f64((k2 + 1023) << 52)
        return z if z != z else e  # one expression, no reassignment: numba's inliner needs that

    @inline
    def exp32(z):
        return np.float32(exp64(np.float64(z)))

    @inline
    def tanh_sech2(u):
        e = exp64(-2.0 * abs(u))
        t = u if u != u else (1.0 - e) / (1.0 + e)
        return math.copysign(t, u), 4.0 * e / ((1.0 + e) * (1.0 + e))

    @inline
    def tanh64(u):
        return tanh_sech2(u)[0]

    @inline
    def erf64_gauss(x):
        a = min(abs(x), ERF_ONE)
        t = a * a
        c = ERF_SMALL
        s = fma(c[10], t, c[9])
        s = fma(s, t, c[8])
        s = fma(s, t, c[7])
        s = fma(s, t, c[6])
        s = fma(s, t, c[5])
        s = fma(s, t, c[4])
        s = fma(s, t, c[3])
        s = fma(s, t, c[2])
        s = fma(s, t, c[1])
        s = fma(s, t, c[0]) * a
        u = (2.0 * a - (ERF_SPLIT + ERF_ONE)) * (1.0 / (ERF_ONE - ERF_SPLIT))
        d = ERF_LARGE
        q = d[17]
        q = fma(q, u, d[16])
        q = fma(q, u, d[15])
        q = fma(q, u, d[14])
        q = fma(q, u, d[13])
        q = fma(q, u, d[12])
        q = fma(q, u, d[11])
        q = fma(q, u, d[10])
        q = fma(q, u, d[9])
        q = fma(q, u, d[8])
        q = fma(q, u, d[7])
        q = fma(q, u, d[6])
        q = fma(q, u, d[5])
        q = fma(q, u, d[4])
        q = fma(q, u, d[3])
        q = fma(q, u, d[2])
        q = fma(q, u, d[1])
        q = fma(q, u, d[0])
        gauss = exp64(-(x * x))
        r = x if x != x else (s if a < ERF_SPLIT else 1.0 - gauss * q)
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

    # -- layer norm: rows of n values; statistics summed in float64 by 4 interleaved partial sums (an
    # order fixed by the source, so the same on every machine), stored in the compute type.

    @jit
    def layer_norm(x, w, b, has_w, has_b, rows, n, eps, y, mean, rstd):
        n4 = n - n % 4
        for r in range(rows):
            base = r * n
            s0 = s1 = s2 = s3 = 0.0
            for j in range(0, n4, 4):
                s0 += widen(x, base + j)
                s1 += widen(x, base + j + 1)
                s2 += widen(x, base + j + 2)
                s3 += widen(x, base + j + 3)
            for j in range(n4, n):
                s0 += widen(x, base + j)
            m = ((s0 + s1) + (s2 + s3)) / n
            s0 = s1 = s2 = s3 = 0.0
            for j in range(0, n4, 4):
                d0 = widen(x, base + j) - m
                d1 = widen(x, base + j + 1) - m
                d2 = widen(x, base + j + 2) - m
                d3 = widen(x, base + j + 3) - m
                s0 += d0 * d0
                s1 += d1 * d1
                s2 += d2 * d2
                s3 += d3 * d3
            for j in range(n4, n):
                d0 = widen(x, base + j) - m
                s0 += d0 * d0
            mc = compute(x, m)
            rc = compute(x, 1.0 / np.sqrt(((s0 + s1) + (s2 + s3)) / n + eps))
            mean[r] = mc
            rstd[r] = rc
            for j in range(n):
                v = (widen(x, base + j) - mc) * rc
                if has_w:
                    v = v * widen(w, j)
                if has_b:
                    v = v + widen(b, j)
                narrow(y, base + j, v)

    @jit
    def layer_norm_backward(gy, x, mean, rstd, w, has_w, rows, n, dx, need_dx, dw, db):
        # dx = rstd (g - mean(g) - xhat mean(g xhat)), g = gy w; dw += gy xhat and db += gy (float64)
        n4 = n - n % 4
        for r in range(rows):
            base = r * n
            mc = mean[r]
            rc = rstd[r]
            if need_dx:
                s0 = s1 = s2 = s3 = 0.0
                t0 = t1 = t2 = t3 = 0.0
                for j in range(0, n4, 4):
                    g0 = widen(gy, base + j)
                    g1 = widen(gy, base + j + 1)
                    g2 = widen(gy, base + j + 2)
                    g3 = widen(gy, base + j + 3)
                    if has_w:
                        g0 = g0 * widen(w, j)
                        g1 = g1 * widen(w, j + 1)
                        g2 = g2 * widen(w, j + 2)
                        g3 = g3 * widen(w, j + 3)
                    s0 += g0
                    s1 += g1
                    s2 += g2
                    s3 += g3
                    t0 += g0 * ((widen(x, base + j) - mc) * rc)
                    t1 += g1 * ((widen(x, base + j + 1) - mc) * rc)
                    t2 += g2 * ((widen(x, base + j + 2) - mc) * rc)
                    t3 += g3 * ((widen(x, base + j + 3) - mc) * rc)
                for j in range(n4, n):
                    g0 = widen(gy, base + j)
                    if has_w:
                        g0 = g0 * widen(w, j)
                    s0 += g0
                    t0 += g0 * ((widen(x, base + j) - mc) * rc)
                mg = compute(x, ((s0 + s1) + (s2 + s3)) / n)
                mgx = compute(x, ((t0 + t1) + (t2 + t3)) / n)
                for j in range(n):
                    xh = (widen(x, base + j) - mc) * rc
                    g = widen(gy, base + j)
                    if has_w:
                        g = g * widen(w, j)
                    narrow(dx, base + j, rc * (g - mg - xh * mgx))
            if dw.size:
                for j in range(n):
                    dw[j] += widen(gy, base + j) * ((widen(x, base + j) - mc) * rc)
            if db.size:
                for j in range(n):
                    db[j] += widen(gy, base + j)

    # -- softmax and log_softmax: rows of n values, in the compute type; sums in float64 (4 partials).

    @inline
    def row_max(x, base, n):
        m0 = m1 = m2 = m3 = -np.inf
        n4 = n - n % 4
        for j in range(0, n4, 4):
            v0, v1, v2, v3 = widen(x, base + j), widen(x, base + j + 1), widen(x, base + j + 2), widen(x, base + j + 3)
            m0 = v0 if v0 > m0 else m0
            m1 = v1 if v1 > m1 else m1
            m2 = v2 if v2 > m2 else m2
            m3 = v3 if v3 > m3 else m3
        for j in range(n4, n):
            v0 = widen(x, base + j)
            m0 = v0 if v0 > m0 else m0
        m = max(max(m0, m1), max(m2, m3))
        return compute(x, 0.0) if m == -np.inf else compute(x, m)  # a row of -inf is shifted by 0

    @inline
    def row_exp_sum(x, base, n, m, e):
        """e[j] = exp(x[base + j] - m) in the compute type; returns their sum (float64)."""
        for j in range(n):  # elementwise: LLVM vectorises it (a sum in the same loop would not be)
            e[j] = compute(x, exp64(np.float64(widen(x, base + j) - m)))
        s0 = s1 = s2 = s3 = 0.0
        n4 = n - n % 4
        for j in range(0, n4, 4):
            s0 += e[j]
            s1 += e[j + 1]
            s2 += e[j + 2]
            s3 += e[j + 3]
        for j in range(n4, n):
            s0 += e[j]
        return (s0 + s1) + (s2 + s3)

    @inline
    def row_dot(a, b, base, n):
        s0 = s1 = s2 = s3 = 0.0
        n4 = n - n % 4
        for j in range(0, n4, 4):
            s0 += widen(a, base + j) * widen(b, base + j)
            s1 += widen(a, base + j + 1) * widen(b, base + j + 1)
            s2 += widen(a, base + j + 2) * widen(b, base + j + 2)
            s3 += widen(a, base + j + 3) * widen(b, base + j + 3)
        for j in range(n4, n):
            s0 += widen(a, base + j) * widen(b, base + j)
        return (s0 + s1) + (s2 + s3)

    @inline
    def row_sum(a, base, n):
        s0 = s1 = s2 = s3 = 0.0
        n4 = n - n % 4
        for j in range(0, n4, 4):
            s0 += widen(a, base + j)
            s1 += widen(a, base + j + 1)
            s2 += widen(a, base + j + 2)
            s3 += widen(a, base + j + 3)
        for j in range(n4, n):
            s0 += widen(a, base + j)
        return (s0 + s1) + (s2 + s3)

    @jit
    def softmax(x, rows, n, e, y):  # e: a scratch row in the compute type
        for r in range(rows):
            base = r * n
            total = compute(x, row_exp_sum(x, base, n, row_max(x, base, n), e))
            for j in range(n):
                narrow(y, base + j, e[j] / total)

    @jit
    def log_softmax(x, rows, n, e, y):
        for r in range(rows):
            base = r * n
            m = row_max(x, base, n)
            lse = compute(x, np.log(compute(x, row_exp_sum(x, base, n, m, e))))
            for j in range(n):
                narrow(y, base + j, (widen(x, base + j) - m) - lse)

    @jit
    def softmax_backward(gy, y, rows, n, dx):  # dx = y (gy - sum(gy y))
        for r in range(rows):
            base = r * n
            d = compute(y, row_dot(gy, y, base, n))
            for j in range(n):
                narrow(dx, base + j, widen(y, base + j) * (widen(gy, base + j) - d))

    @jit
    def log_softmax_backward(gy, y, rows, n, dx):  # dx = gy - exp(y) sum(gy)
        for r in range(rows):
            base = r * n
            total = compute(y, row_sum(gy, base, n))
            for j in range(n):
                narrow(dx, base + j, widen(gy, base + j) - compute(y, exp64(np.float64(widen(y, base + j)))) * total)

    # -- embedding backward: acc[idx[i]] += gy[i] (rows of dim values), accumulated in the compute type.

    @jit
    def embedding_backward(gy, idx, dim, acc):
        for i in range(idx.size):
            base = i * dim
            row = idx[i]
            for j in range(dim):
                acc[row, j] += widen(gy, base + j)

    KERNELS.update(embedding_backward=embedding_backward)

    # -- attention's softmax on a block of scores s (N, Lb, Sb): rows are queries l0 + i, columns keys.
    # mask_kind: 0 none, 1 bool (True = attend), 2 float (added), the mask (N, Lb, Sb), or (1, 1, 1)
    # unread without one (keep likewise); causal: key j visible to query l0 + i when j <= l0 + i.
    # Each pass over a row is its own loop so LLVM vectorises it.

    @inline
    def row_limit(i, l0, sb, causal):
        return min(sb, l0 + i + 1) if causal else sb

    @inline
    def masked_scores(row, maskrow, mask_kind, limit, scale):
        """row[j] = row[j] * scale (+ mask), -inf where masked; returns the row's maximum."""
        for j in range(limit):
            v = row[j] * scale
            if mask_kind == 2:
                v = v + maskrow[j]
            elif mask_kind == 1:
                v = v if maskrow[j] else -np.inf
            row[j] = v
        m = -np.inf
        for j in range(limit):
            v = row[j]
            m = v if v > m else m
        return m

    @jit
    def attention_softmax(s, lse, l0, scale, causal, mask, mask_kind, keep, has_keep, keep_scale):
        nb_, lb, sb = s.shape
        for b in range(nb_):
            for i in range(lb):
                row = s[b, i]
                limit = row_limit(i, l0, sb, causal)
                m = masked_scores(row, mask[min(b, mask.shape[0] - 1), min(i, mask.shape[1] - 1)], mask_kind, limit,
                                  compute(s, scale))
                if m == -np.inf:  # a row of -inf is shifted by 0, not made nan
                    m = compute(s, 0.0)
                for j in range(limit):
                    row[j] = compute(s, exp64(np.float64(row[j] - m)))
                total = 0.0
                for j in range(limit):
                    total += row[j]
                if total == 0.0:  # nothing to attend to: p = 0 (PyTorch's safe softmax), lse = -inf
                    inv = compute(s, 0.0)
                    lse[b, i] = -np.inf
                else:  # (a nan or +inf score gives nan, as PyTorch)
                    inv = compute(s, 1.0 / total)
                    lse[b, i] = compute(s, m + np.log(total))
                for j in range(limit):
                    row[j] = row[j] * inv
                if has_keep:
                    ks = compute(s, keep_scale)
                    for j in range(limit):
                        row[j] = row[j] * ks if keep[b, i, j] else compute(s, 0.0)
                for j in range(limit, sb):
                    row[j] = compute(s, 0.0)

    @jit
    def attention_probabilities(s, lse, l0, scale, causal, mask, mask_kind):
        """s (scores) -> p = exp(s scale + mask - lse), 0 where masked, beyond the diagonal or on a dead row."""
        nb_, lb, sb = s.shape
        for b in range(nb_):
            for i in range(lb):
                row = s[b, i]
                limit = row_limit(i, l0, sb, causal)
                masked_scores(row, mask[min(b, mask.shape[0] - 1), min(i, mask.shape[1] - 1)], mask_kind, limit,
                              compute(s, scale))
                shift = lse[b, i]
                if shift == -np.inf:
                    limit = 0
                for j in range(limit):
                    row[j] = compute(s, exp64(np.float64(row[j] - shift)))
                for j in range(limit, sb):
                    row[j] = compute(s, 0.0)

    @jit
    def attention_dscores(p, dp, l0, causal, keep, has_keep, keep_scale):
        """dp (gy v^T) -> ds = p (dp' - sum(dp' p)), dp' = dp * dropout's factor; in place."""
        nb_, lb, sb = p.shape
        for b in range(nb_):
            for i in range(lb):
                prow = p[b, i]
                drow = dp[b, i]
                limit = row_limit(i, l0, sb, causal)
                if has_keep:
                    ks = compute(p, keep_scale)
                    for j in range(limit):
                        drow[j] = drow[j] * ks if keep[b, i, j] else compute(p, 0.0)
                r = 0.0
                for j in range(limit):
                    r += prow[j] * drow[j]
                rc = compute(p, r)
                for j in range(limit):
                    drow[j] = prow[j] * (drow[j] - rc)
                for j in range(limit, sb):
                    drow[j] = compute(p, 0.0)

    KERNELS.update(attention_softmax=attention_softmax, attention_probabilities=attention_probabilities,
                   attention_dscores=attention_dscores)
    KERNELS.update(softmax=softmax, log_softmax=log_softmax, softmax_backward=softmax_backward,
                   log_softmax_backward=log_softmax_backward)
    KERNELS.update(erf=erf, gelu=gelu, gelu_tanh=gelu_tanh, gelu_backward=gelu_backward,
                   gelu_tanh_backward=gelu_tanh_backward, layer_norm=layer_norm,
                   layer_norm_backward=layer_norm_backward)
