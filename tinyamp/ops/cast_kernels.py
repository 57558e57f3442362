"""Fast, bit-exact CPU conversions between float32, float16 and bfloat16.

Why this module exists
----------------------
On the CPU, NumPy converts float16 <-> float32 with a scalar loop (about
1.7 ns/element up and 2.5 ns/element down on the project's 2-core EPYC), and
its float16 ufuncs cost 6-20 ns/element. In a CPU AMP training step these
conversions and ufuncs, not the float32 GEMMs, take most of the time. This
module gives the rest of tinyamp one entry point, :func:`convert`, that
returns exactly what ``array.astype(dtype)`` returns (same bits, shape and
dtype) but faster, plus fused helpers for the elementwise work AMP does
around a GEMM.

Measured (ns/element, 1024x1024 and 128x1024, medians; the bench script):

=====================  ==================  ==========  ===========
operation              NumPy / ml_dtypes   numpy-bits  numba
=====================  ==================  ==========  ===========
float16 -> float32     1.66-1.89 astype    0.34-0.40   0.09-0.11
float32 -> float16     2.48-2.61 astype    1.38-1.52   0.11-0.13
float32 -> bfloat16    0.42-0.57 astype    (astype)    0.10-0.12
bfloat16 -> float32    0.08 astype         (astype)    0.09 (=)
float16 -> bfloat16    1.44-1.84 astype    0.79-0.83   0.20-0.21
bfloat16 -> float16    0.84-0.87 astype    (astype)    0.08-0.10
relu, float16          5.9-6.7 np.maximum  0.17-0.21   0.05-0.08
relu backward, f16     8.0-8.4 np.where    0.28-0.32   0.07-0.10
bias+relu+downcast     6.2 (float32 ufuncs 2.1-2.7     0.16-0.19
                       + astype); 14.2 in
                       float16 ufuncs
=====================  ==================  ==========  ===========

Backends (``BACKEND``)
----------------------
``"numba"``
    Used when numba is importable (optional extra ``tinyamp[jit]``). Serial
    ``nogil`` loops whose scalar conversion is written in LLVM IR on 32-bit
    integers (numba would widen Python-level integer code to 64 bits and run
    3-4x slower); with F16C (``F16C``) LLVM emits ``vcvtps2ph``/``vcvtph2ps``
    plus a NaN fix-up, otherwise an integer/float recipe. 10-25x faster than
    ``astype``. Kernels compile lazily on first use (0.1-0.5 s each;
    ``cache=True`` keeps them on disk), or all at once with :func:`warmup`.
``"numpy-bits"``
    Without numba. float16 -> float32 is 4 integer/float NumPy passes (5x
    faster than ``astype``); float32 -> float16 is a 13-pass integer/float
    recipe (1.9x); ml_dtypes' bfloat16 casts are already vectorised and are
    kept. ReLU and its backward work on int16 views (25-45x).
``"astype"``
    Plain ``astype`` everywhere (``TINYAMP_CAST_BACKEND=astype``).

``BACKEND`` is decided at import without importing numba (its import costs
about a second). If numba is installed but fails to import or compile, the
module warns once, falls back to ``"numpy-bits"`` and updates ``BACKEND``.
The environment variable ``TINYAMP_CAST_BACKEND`` (``numba``, ``numpy``,
``astype``) overrides the choice; every public function also takes
``backend=`` to force a path (the tests do).

Rejected alternatives (numbers in ``benchmarks/bench_casts.py``): a
65536-entry lookup table for float16 -> float32 (``np.take``: 1.2-1.4 ns);
processing in L2-sized chunks (slower: the per-call ufunc overhead outweighs
the cache gain at these sizes); numba ``parallel=True`` kernels: at best
about 2x faster on 2 idle cores, but 4-5x slower to compile, and when any
other process or OpenBLAS's spinning threads hold a core their barrier waits
make them 20-1000x slower (7.6 ns/element at 1M elements, 60-90 ns at
128K, measured on the shared development machine).

Exactness
---------
``convert(a, dt)`` is bit-identical to ``a.astype(dt)`` for every input of
the supported pairs, including +-0, +-inf, subnormals on both sides,
overflow to inf, halfway ties (round to nearest even) and NaN payloads:

* float32 -> float16 (NumPy): NaN keeps its sign and the top 10 payload
  bits; a payload that would become 0 becomes 1 (so it stays a NaN);
  signalling NaNs are not quieted. |x| >= 65520 gives inf.
* float16 -> float32 (NumPy): exact; NaN payload shifted up, not quieted.
* float32 -> bfloat16 (ml_dtypes): round to nearest even; every NaN becomes
  the canonical quiet NaN with the input's sign (0x7fc0 / 0xffc0).
* bfloat16 -> float32: exact (a 16-bit shift).
* float16 -> bfloat16 (ml_dtypes): via float32; NaN -> sign | 0x7fc0.
* bfloat16 -> float16 (ml_dtypes): float16 rounding of the value; NaN ->
  sign | 0x7e00 (ml_dtypes' rule, not NumPy's float32 -> float16 rule).

The tests check all 65536 16-bit inputs and the float32 rounding boundaries,
ties and a million random float32 patterns; the float32 -> float16 and
float32 -> bfloat16 kernels were also checked against ``astype`` on all 2**32
float32 bit patterns (0 mismatches). The results do not depend on DAZ/FTZ
(no kernel feeds a subnormal into float arithmetic except
``_np_f16_to_f32``, which checks and falls back to ``astype``); like NumPy's
own float ufuncs they assume the default round-to-nearest mode.

Differences from ``astype`` that are not about values: ``astype`` raises
NumPy's ``RuntimeWarning`` for overflow ("overflow encountered in cast") and
for signalling NaNs ("invalid value"); :func:`convert` never warns (AMP finds
overflow with ``isfinite``). C- or F-contiguous inputs keep their layout
(like ``astype``'s ``order='K'``); other inputs are copied to C order first.
Non-NumPy arrays (CuPy), ndarray subclasses and other dtypes go to
``astype``.

Fused helpers (all bit-exact against the unfused NumPy expression)
-----------------------------------------------------------------
:func:`relu_lowp`
    ``np.maximum(x, 0)`` for float16/bfloat16 on the 16-bit integer view.
    NaN propagates with its bits, as with ``np.maximum``; -0.0 gives +0.0
    (NumPy's float16 loop returns -0.0 there, its float32 and bfloat16 loops
    +0.0; the values are equal).
:func:`relu_backward_lowp`
    ``np.where(x > 0, grad, 0)`` for float16/bfloat16 (NaN in ``x`` masks).
:func:`bias_act_convert`
    Forward GEMM epilogue: ``convert(np.maximum(y + bias, 0), dtype)`` (or
    without the ReLU) in one pass over the float32 GEMM output.
:func:`relu_backward_convert`
    Backward epilogue: ``convert(np.where(x > 0, grad32, 0), dtype)``.
:func:`round_to`
    ``x.astype(dtype).astype(float32)`` in one pass: float16-rounded values
    kept in float32 for float32 BLAS (the matmul emulation's weights).
"""

from __future__ import annotations

import importlib.util
import os
import threading
import warnings

import ml_dtypes
import numpy as np

__all__ = [
    "BACKEND",
    "F16C",
    "convert",
    "relu_lowp",
    "relu_backward_lowp",
    "bias_act_convert",
    "relu_backward_convert",
    "round_to",
    "warmup",
    "numba_available",
]

F32 = np.dtype(np.float32)
F16 = np.dtype(np.float16)
BF16 = np.dtype(ml_dtypes.bfloat16)
_U16 = np.dtype(np.uint16)
_U32 = np.dtype(np.uint32)
_I16 = np.dtype(np.int16)
_I32 = np.dtype(np.int32)

# Bits of +inf for the 16-bit formats; a 16-bit pattern p is NaN when
# (p & 0x7fff) > _INF16[dtype].
_INF16 = {F16: 0x7C00, BF16: 0x7F80}

# Below this many elements the fixed cost of a fast path is larger than what it
# saves, so ``convert`` uses ``astype``; forcing a backend with ``backend=``
# ignores the thresholds. numba costs ~2-3 us a call (break-even with astype
# at ~1024 elements); the NumPy recipes cost 10-20 us of ufunc calls
# (break-even ~4-8K elements up, ~32-64K down). See the "small" groups of
# benchmarks/bench_casts.py.
SMALL = 1024
SMALL_NUMPY = {(F16, F32): 8192, (F16, BF16): 8192, (F32, F16): 65536}


def _numba_installed():
    try:
        return importlib.util.find_spec("numba") is not None
    except (ImportError, ValueError):  # e.g. sys.modules["numba"] = None
        return False


_ENV = os.environ.get("TINYAMP_CAST_BACKEND", "").strip().lower()
if _ENV in ("astype",):
    BACKEND = "astype"
elif _ENV in ("numpy", "numpy-bits"):
    BACKEND = "numpy-bits"
elif _numba_installed():
    BACKEND = "numba"
else:
    BACKEND = "numpy-bits"

#: Whether the numba float32 -> float16 kernels use the hardware conversion
#: (F16C on x86). ``None`` until numba has been loaded.
F16C = None

# ---------------------------------------------------------------------------
# numba kernels (loaded lazily)
# ---------------------------------------------------------------------------

_nb_lock = threading.Lock()
_nb_state = None  # None: not tried; True: loaded; False: failed
_K = {}  # name -> compiled numba function


def numba_available():
    """Load the numba kernels if possible; return whether they are usable."""
    global _nb_state
    if _nb_state is None:
        with _nb_lock:
            if _nb_state is None:
                try:
                    _load_numba()
                    _nb_state = True
                except Exception as exc:  # ImportError, or numba/LLVM trouble
                    _nb_state = False
                    _numba_failed(exc)
    return _nb_state


def _numba_failed(exc):
    global BACKEND
    if BACKEND == "numba":
        BACKEND = "numpy-bits"
        warnings.warn(
            f"tinyamp: numba cast kernels unavailable ({type(exc).__name__}: "
            f"{exc}); using the NumPy conversions",
            RuntimeWarning,
            stacklevel=3,
        )


def _load_numba():  # noqa: C901 - one place that defines every kernel
    # Names are declared global so that the jitted functions below see them as
    # module globals (not closure cells), which keeps numba's cache=True usable.
    global _nb_fbits, _h2f_int, _h2f_hw, _f2h_int, _f2h_hw, _f2b_bits, _b2h_int, _b2h_hw
    global F16C

    from llvmlite import ir
    from numba import njit, types
    from numba.extending import intrinsic

    jit = njit(cache=True, nogil=True, fastmath=False, boundscheck=False)

    # The scalar conversions are written directly in LLVM IR on i32 values:
    # numba widens every integer expression to 64 bits, which halves the SIMD
    # width and made the same code written in Python 3-4x slower.
    i16, i32, f32t, f16t = ir.IntType(16), ir.IntType(32), ir.FloatType(), ir.HalfType()

    def k(v):
        return ir.Constant(i32, v)

    def sel_gt(b, x, limit, then, other):  # x > limit (unsigned) ? then : other
        return b.select(b.icmp_unsigned(">", x, k(limit)), then, other)

    def ir_h2f_hw(b, u):  # float16 bits (in an i32) -> float32 bits
        f = b.fpext(b.bitcast(b.trunc(u, i16), f16t), f32t)
        # inf/nan rebuilt by hand: the hardware quiets signalling NaNs, NumPy
        # keeps the payload as is.
        spec = b.or_(b.or_(b.shl(b.and_(u, k(0x8000)), k(16)), k(0x7F800000)),
                     b.shl(b.and_(u, k(0x3FF)), k(13)))
        return sel_gt(b, b.and_(u, k(0x7FFF)), 0x7BFF, spec, b.bitcast(f, i32))

    def ir_h2f_int(b, u):
        em = b.and_(u, k(0x7FFF))
        normal = b.add(b.shl(em, k(13)), k(0x38000000))
        normal = sel_gt(b, em, 0x7BFF, b.add(normal, k(0x38000000)), normal)
        # subnormal m * 2**-24 = (0.5 + m * 2**-24) - 0.5: only normal float32
        # operands and results, so DAZ/FTZ modes cannot change it.
        half_plus = b.bitcast(b.or_(em, k(0x3F000000)), f32t)
        sub = b.bitcast(b.fsub(half_plus, ir.Constant(f32t, 0.5)), i32)
        r = sel_gt(b, em, 0x3FF, normal, sub)
        return b.or_(r, b.shl(b.and_(u, k(0x8000)), k(16)))

    def ir_f2h_nan(b, u):  # NumPy: sign | 0x7c00 | max(payload >> 13, 1)
        m = b.and_(b.lshr(u, k(13)), k(0x3FF))
        m = b.select(b.icmp_unsigned("==", m, k(0)), k(1), m)
        return b.or_(b.or_(b.and_(b.lshr(u, k(16)), k(0x8000)), k(0x7C00)), m)

    def ir_f2h_hw(b, u):  # float32 bits -> float16 bits (vcvtps2ph, RNE)
        h = b.zext(b.bitcast(b.fptrunc(b.bitcast(u, f32t), f16t), i16), i32)
        return sel_gt(b, b.and_(u, k(0x7FFFFFFF)), 0x7F800000, ir_f2h_nan(b, u), h)

    def ir_f2h_int(b, u):
        a = b.and_(u, k(0x7FFFFFFF))
        e = b.and_(a, k(0x7F800000))
        e = sel_gt(b, e, 113 << 23, e, k(113 << 23))
        e = b.select(b.icmp_unsigned("<", e, k(143 << 23)), e, k(143 << 23))
        c = b.add(e, k(13 << 23))
        # Adding c (2**13 float16 ulps above |x|) makes the FPU round |x| to
        # float16 precision (ties to even); subnormals share the c = 0.5 case.
        s = b.bitcast(b.fadd(b.bitcast(a, f32t), b.bitcast(c, f32t)), i32)
        h = b.sub(b.add(b.sub(s, c), b.lshr(c, k(13))), k(126 << 10))
        h = b.select(b.icmp_unsigned("<", h, k(0x7C00)), h, k(0x7C00))
        h = b.or_(h, b.and_(b.lshr(u, k(16)), k(0x8000)))
        return sel_gt(b, a, 0x7F800000, ir_f2h_nan(b, u), h)

    def ir_f2b(b, u):  # float32 bits -> bfloat16 bits (RNE; NaN -> sign | 0x7fc0)
        r = b.lshr(b.add(b.add(u, k(0x7FFF)), b.and_(b.lshr(u, k(16)), k(1))), k(16))
        nan = b.or_(b.and_(b.lshr(u, k(16)), k(0x8000)), k(0x7FC0))
        return sel_gt(b, b.and_(u, k(0x7FFFFFFF)), 0x7F800000, nan, r)

    def ir_b2h(f2h):  # bfloat16 bits -> float16 bits (ml_dtypes: NaN -> sign | 0x7e00)
        def gen(b, u):
            nan = b.or_(b.and_(u, k(0x8000)), k(0x7E00))
            return sel_gt(b, b.and_(u, k(0x7FFF)), 0x7F80, nan, f2h(b, b.shl(u, k(16))))

        return gen

    def u32_intrinsic(gen, doc):
        def typer(typingctx, u):
            def codegen(context, builder, signature, args):
                return gen(builder, args[0])

            return types.uint32(types.uint32), codegen

        typer.__doc__ = doc
        return intrinsic(typer)

    _h2f_hw = u32_intrinsic(ir_h2f_hw, "float16 -> float32 bits (F16C)")
    _h2f_int = u32_intrinsic(ir_h2f_int, "float16 -> float32 bits (integer)")
    _f2h_hw = u32_intrinsic(ir_f2h_hw, "float32 -> float16 bits (F16C)")
    _f2h_int = u32_intrinsic(ir_f2h_int, "float32 -> float16 bits (integer)")
    _f2b_bits = u32_intrinsic(ir_f2b, "float32 -> bfloat16 bits")
    _b2h_hw = u32_intrinsic(ir_b2h(ir_f2h_hw), "bfloat16 -> float16 bits (F16C)")
    _b2h_int = u32_intrinsic(ir_b2h(ir_f2h_int), "bfloat16 -> float16 bits (integer)")

    @intrinsic
    def _nb_fbits(typingctx, f):
        """Reinterpret a float32 as uint32 bits."""

        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], i32)

        return types.uint32(types.float32), codegen

    # -- array kernels: 1-D contiguous bit views ----------------------------

    @jit
    def f16_to_f32_int(src, dst):  # uint16[::1] -> uint32[::1]
        for i in range(src.size):
            dst[i] = _h2f_int(np.uint32(src[i]))

    @jit
    def f16_to_f32_hw(src, dst):
        for i in range(src.size):
            dst[i] = _h2f_hw(np.uint32(src[i]))

    @jit
    def f32_to_f16_int(src, dst):  # uint32 -> uint16
        for i in range(src.size):
            dst[i] = np.uint16(_f2h_int(src[i]))

    @jit
    def f32_to_f16_hw(src, dst):
        for i in range(src.size):
            dst[i] = np.uint16(_f2h_hw(src[i]))

    @jit
    def f32_to_bf16(src, dst):  # uint32 -> uint16
        for i in range(src.size):
            dst[i] = np.uint16(_f2b_bits(src[i]))

    @jit
    def bf16_to_f32(src, dst):  # uint16 -> uint32
        for i in range(src.size):
            dst[i] = np.uint32(src[i]) << np.uint32(16)

    @jit
    def f16_to_bf16_int(src, dst):  # uint16 -> uint16
        for i in range(src.size):
            dst[i] = np.uint16(_f2b_bits(_h2f_int(np.uint32(src[i]))))

    @jit
    def f16_to_bf16_hw(src, dst):
        for i in range(src.size):
            dst[i] = np.uint16(_f2b_bits(_h2f_hw(np.uint32(src[i]))))

    @jit
    def bf16_to_f16_int(src, dst):
        for i in range(src.size):
            dst[i] = np.uint16(_b2h_int(np.uint32(src[i])))

    @jit
    def bf16_to_f16_hw(src, dst):
        for i in range(src.size):
            dst[i] = np.uint16(_b2h_hw(np.uint32(src[i])))

    @jit
    def relu16(src, dst, inf):  # int16 views; inf = +inf bits of the format
        for i in range(src.size):
            v = src[i]
            # zero when the sign is set and the value is not NaN
            zero = (v < 0) and ((v & np.int16(0x7FFF)) <= inf)
            dst[i] = np.int16(0) if zero else v

    @jit
    def relu_bwd16(grad, x, dst, inf):  # int16 views: where(x > 0, grad, 0)
        for i in range(x.size):
            v = x[i]
            dst[i] = grad[i] if (v > 0 and v <= inf) else np.int16(0)

    @jit
    def epi_f16_int(y, bias, dst, relu, has_bias):
        rows, cols = y.shape
        for r in range(rows):
            for c in range(cols):
                v = y[r, c] + bias[c] if has_bias else y[r, c]
                if relu and not (v > np.float32(0.0) or v != v):
                    v = np.float32(0.0)
                dst[r, c] = np.uint16(_f2h_int(_nb_fbits(v)))

    @jit
    def epi_f16_hw(y, bias, dst, relu, has_bias):
        rows, cols = y.shape
        for r in range(rows):
            for c in range(cols):
                v = y[r, c] + bias[c] if has_bias else y[r, c]
                if relu and not (v > np.float32(0.0) or v != v):
                    v = np.float32(0.0)
                dst[r, c] = np.uint16(_f2h_hw(_nb_fbits(v)))

    @jit
    def epi_bf16(y, bias, dst, relu, has_bias):
        rows, cols = y.shape
        for r in range(rows):
            for c in range(cols):
                v = y[r, c] + bias[c] if has_bias else y[r, c]
                if relu and not (v > np.float32(0.0) or v != v):
                    v = np.float32(0.0)
                dst[r, c] = np.uint16(_f2b_bits(_nb_fbits(v)))

    @jit
    def rt_f16_int(src, dst):  # uint32 -> uint32: float16-rounded float32
        for i in range(src.size):
            dst[i] = _h2f_int(_f2h_int(src[i]))

    @jit
    def rt_f16_hw(src, dst):
        for i in range(src.size):
            dst[i] = _h2f_hw(_f2h_hw(src[i]))

    @jit
    def rt_bf16(src, dst):
        for i in range(src.size):
            dst[i] = _f2b_bits(src[i]) << np.uint32(16)

    @jit
    def rbc_f16_int(grad, x, dst, inf):  # grad uint32 (float32 bits), x int16
        for i in range(x.size):
            v = x[i]
            dst[i] = np.uint16(_f2h_int(grad[i])) if (v > 0 and v <= inf) else np.uint16(0)

    @jit
    def rbc_f16_hw(grad, x, dst, inf):
        for i in range(x.size):
            v = x[i]
            dst[i] = np.uint16(_f2h_hw(grad[i])) if (v > 0 and v <= inf) else np.uint16(0)

    @jit
    def rbc_bf16(grad, x, dst, inf):
        for i in range(x.size):
            v = x[i]
            dst[i] = np.uint16(_f2b_bits(grad[i])) if (v > 0 and v <= inf) else np.uint16(0)

    kernels = dict(
        rt_f16_int=rt_f16_int,
        rt_f16_hw=rt_f16_hw,
        rt_bf16=rt_bf16,
        rbc_f16_int=rbc_f16_int,
        rbc_f16_hw=rbc_f16_hw,
        rbc_bf16=rbc_bf16,
        f16_to_f32_int=f16_to_f32_int,
        f16_to_f32_hw=f16_to_f32_hw,
        f32_to_f16_int=f32_to_f16_int,
        f32_to_f16_hw=f32_to_f16_hw,
        f32_to_bf16=f32_to_bf16,
        bf16_to_f32=bf16_to_f32,
        f16_to_bf16_int=f16_to_bf16_int,
        f16_to_bf16_hw=f16_to_bf16_hw,
        bf16_to_f16_int=bf16_to_f16_int,
        bf16_to_f16_hw=bf16_to_f16_hw,
        relu16=relu16,
        relu_bwd16=relu_bwd16,
        epi_f16_int=epi_f16_int,
        epi_f16_hw=epi_f16_hw,
        epi_bf16=epi_bf16,
    )
    _K.clear()
    _K.update(kernels)
    F16C = _probe_hw()
    _select_f16_impl("hw" if F16C else "int")


def _probe_hw():
    """Whether the hardware float16 conversion kernels compile and are exact.

    LLVM lowers fptrunc-to-half to F16C's vcvtps2ph (x86) or fcvt (ARM);
    without hardware support it may emit a runtime-library call that numba
    cannot link. Compile it once on values that exercise rounding, overflow,
    subnormals and NaN, and fall back to the integer kernel on any failure.
    """
    if os.environ.get("TINYAMP_CAST_NO_F16C"):
        return False
    try:
        probe = np.array(
            [0, 0x80000000, 0x3F800000, 0x33000000, 0x33000001, 0x387FE000,
             0x387FF000, 0x477FEFFF, 0x477FF000, 0x7F800000, 0x7F800001,
             0xFFC00000, 0x3F801000, 0x3F803000, 0x00000001, 0xC77FF000],
            dtype=np.uint32)
        got = np.empty(probe.size, np.uint16)
        _K["f32_to_f16_hw"](probe, got)
        with np.errstate(all="ignore"):
            ref = probe.view(np.float32).astype(np.float16).view(np.uint16)
        h = np.arange(65536, dtype=np.uint16)
        up = np.empty(h.size, np.uint32)
        _K["f16_to_f32_hw"](h, up)
        ref_up = h.view(np.float16).astype(np.float32).view(np.uint32)
        return bool(np.array_equal(got, ref) and np.array_equal(up, ref_up))
    except Exception:
        return False


def _select_f16_impl(which):
    """Choose the numba float32/bfloat16 -> float16 kernels: "hw" or "int".

    Private; the tests use it to check both implementations.
    """
    if which not in ("hw", "int"):
        raise ValueError(which)
    _K["f16_to_f32"] = _K["f16_to_f32_" + which]
    _K["f16_to_bf16"] = _K["f16_to_bf16_" + which]
    _K["f32_to_f16"] = _K["f32_to_f16_" + which]
    _K["bf16_to_f16"] = _K["bf16_to_f16_" + which]
    _K["epi_f16"] = _K["epi_f16_" + which]
    _K["rt_f16"] = _K["rt_f16_" + which]
    _K["rbc_f16"] = _K["rbc_f16_" + which]


# ---------------------------------------------------------------------------
# NumPy bit-manipulation paths
# ---------------------------------------------------------------------------

_TWO112 = np.float32(2.0**112)
_SIGN_EM_MASK = np.int32(-0x70002000)  # 0x8fffe000: sign + 15 exponent/mantissa bits << 13
_DAZ_IN = np.array([1e-40], dtype=np.float32)  # a float32 subnormal
_DAZ_OUT = np.empty(1, dtype=np.float32)
_U = np.uint32

# Whether the NumPy float32 -> float16 bit recipe beats astype on this machine
# (benchmarks/bench_casts.py measures both; see the module docstring).
_NUMPY_F32_TO_F16 = "bits"


def _denormals_flushed():
    """True when the FPU runs with DAZ/FTZ (set by some -ffast-math libraries)."""
    np.multiply(_DAZ_IN, np.float32(1.0), out=_DAZ_OUT)
    return _DAZ_OUT[0] == 0


def _np_f16_to_f32(src, dst):
    """float16 bits (1-D) -> float32 (1-D), NumPy's exact rule.

    int16 -> int32 sign-extends, so ``(h << 13) & 0x8fffe000`` is the sign plus
    the 15 exponent/mantissa bits in float32 position; multiplying by 2**112
    rebiases the exponent exactly (float16 subnormals become float32
    subnormals on the way, which is why DAZ/FTZ mode falls back to astype).
    """
    if _denormals_flushed():
        np.copyto(dst, src.view(F16))
        return
    h = src.view(_I16)
    t = h.astype(_I32)
    np.left_shift(t, 13, out=t)
    np.bitwise_and(t, _SIGN_EM_MASK, out=t)
    np.multiply(t.view(F32), _TWO112, out=dst)
    # inf/nan: positive ones are >= 0x7c00 as int16, negative ones >= 0xfc00
    # as uint16.
    if h.max() >= 0x7C00 or src.max() >= 0xFC00:
        idx = np.flatnonzero((src & 0x7C00) == 0x7C00)
        hv = src[idx].astype(_U32)
        dst.view(_U32)[idx] = ((hv & 0x8000) << 16) | 0x7F800000 | ((hv & 0x3FF) << 13)


def _np_f32_to_f16(src, dst):
    """float32 (1-D) -> float16 bits (1-D), NumPy's exact rule (see _f2h_int)."""
    u = src.view(_U32)
    a = np.bitwise_and(u, _U(0x7FFFFFFF))
    c = np.bitwise_and(a, _U(0x7F800000))
    np.clip(c, _U(113 << 23), _U(143 << 23), out=c)
    np.add(c, _U(13 << 23), out=c)
    s = np.empty_like(a)
    with np.errstate(all="ignore"):
        np.add(a.view(F32), c.view(F32), out=s.view(F32))
    np.subtract(s, c, out=s)
    np.right_shift(c, _U(13), out=c)
    np.add(s, c, out=s)
    np.subtract(s, _U(126 << 10), out=s)
    np.clip(s, _U(0), _U(0x7C00), out=s)
    np.right_shift(u, _U(16), out=c)
    np.bitwise_and(c, _U(0x8000), out=c)
    np.bitwise_or(s, c, out=s)
    np.copyto(dst, s, casting="unsafe")
    if a.max() > 0x7F800000:  # NaNs: sign | 0x7c00 | max(payload >> 13, 1)
        idx = np.flatnonzero(a > 0x7F800000)
        av = u[idx]
        m = (av >> 13) & 0x3FF
        m[m == 0] = 1
        dst[idx] = ((av >> 16) & 0x8000) | 0x7C00 | m


def _np_convert(src_dt, dst_dt, x, y):
    """NumPy path on 1-D contiguous x (src_dt) into y (dst_dt)."""
    if src_dt == F16 and dst_dt == F32:
        _np_f16_to_f32(x.view(_U16), y)
    elif src_dt == F32 and dst_dt == F16:
        if _NUMPY_F32_TO_F16 == "bits":
            _np_f32_to_f16(x, y.view(_U16))
        else:
            with np.errstate(all="ignore"):
                np.copyto(y, x, casting="unsafe")
    elif src_dt == F16 and dst_dt == BF16:
        # exact upcast, then ml_dtypes' vectorised float32 -> bfloat16
        t = np.empty(x.size, F32)
        _np_f16_to_f32(x.view(_U16), t)
        with np.errstate(all="ignore"):
            np.copyto(y, t, casting="unsafe")
    else:  # bfloat16 pairs: ml_dtypes' casts are already fast
        with np.errstate(all="ignore"):
            np.copyto(y, x, casting="unsafe")


# name of the numba kernel and the (input, output) integer views it takes
_NB_PAIRS = {
    (F16, F32): ("f16_to_f32", _U16, _U32),
    (F32, F16): ("f32_to_f16", _U32, _U16),
    (F32, BF16): ("f32_to_bf16", _U32, _U16),
    (BF16, F32): ("bf16_to_f32", _U16, _U32),
    (F16, BF16): ("f16_to_bf16", _U16, _U16),
    (BF16, F16): ("bf16_to_f16", _U16, _U16),
}


def _resolve(backend):
    b = BACKEND if backend is None else backend
    if b in ("numpy", "numpy-bits"):
        return "numpy-bits"
    if b == "astype":
        return "astype"
    if b == "numba":
        if numba_available():
            return "numba"
        if backend is not None:
            raise RuntimeError("backend='numba' requested but numba kernels are unavailable")
        return "numpy-bits"
    raise ValueError(f"unknown backend {backend!r}; expected 'numba', 'numpy' or 'astype'")


def _flat(a):
    """1-D view of a C- or F-contiguous array in memory order."""
    return a.reshape(-1) if a.flags.c_contiguous else a.ravel(order="K")


def _astype_into(array, dtype, out):
    if out is None:
        return array.astype(dtype)
    out[...] = array
    return out


def convert(array, dtype, out=None, backend=None):
    """Return ``array.astype(dtype)``, bit for bit, computed faster.

    Fast paths cover NumPy arrays among float32, float16 and
    ml_dtypes.bfloat16 (all six directions); everything else (same dtype,
    other dtypes, CuPy or other array types, subclasses, arrays smaller than
    ``SMALL`` (numba) or ``SMALL_NUMPY`` (NumPy recipes) elements unless
    ``backend`` is given, bfloat16 pairs on the NumPy path) uses ``astype``.

    ``out``: optional destination of ``dtype`` and ``array.shape``; it is
    filled and returned (avoids allocating, and the page faults of a fresh
    large buffer). Overlapping ``array`` is allowed.

    ``backend``: ``None`` (use ``BACKEND``), ``"numba"``, ``"numpy"`` or
    ``"astype"``.
    """
    dt = np.dtype(dtype)
    if type(array) is not np.ndarray:
        if out is None:
            return array.astype(dt)
        out[...] = array
        return out
    key = (array.dtype, dt)
    pair = _NB_PAIRS.get(key)
    if pair is None:
        return _astype_into(array, dt, out)
    path = _resolve(backend)
    if backend is None and array.size < (SMALL if path == "numba" else SMALL_NUMPY.get(key, 1 << 62)):
        path = "astype"
    if path == "astype" or array.size == 0:
        with np.errstate(all="ignore"):  # never warn, whichever path runs
            return _astype_into(array, dt, out)

    if out is not None:
        if type(out) is not np.ndarray or out.dtype != dt or out.shape != array.shape:
            raise ValueError(
                f"out must be a numpy array of dtype {dt} and shape {array.shape}, "
                f"got {type(out).__name__} {getattr(out, 'dtype', None)} "
                f"{getattr(out, 'shape', None)}"
            )
        same_order = (array.flags.c_contiguous and out.flags.c_contiguous) or (
            array.flags.f_contiguous and out.flags.f_contiguous
        )
        if not same_order or np.may_share_memory(array, out):
            np.copyto(out, convert(array, dt, backend=path if backend else None))
            return out
        res = out
    else:
        if not (array.flags.c_contiguous or array.flags.f_contiguous):
            array = np.ascontiguousarray(array)
        res = np.empty_like(array, dtype=dt)

    x = _flat(array)
    y = _flat(res)
    if path == "numba":
        name, vin, vout = pair
        _K[name](x.view(vin), y.view(vout))
    else:
        _np_convert(key[0], dt, x, y)
    return res


# ---------------------------------------------------------------------------
# ReLU forward / backward on 16-bit float bit patterns
# ---------------------------------------------------------------------------


def _np_relu16(v, out, inf):
    """v, out: int16 views. out = v with every negative non-NaN set to +0."""
    # Negative NaNs are the uint16 patterns above the -inf pattern; the
    # shift trick below zeroes them, so note them first (out may be v) and put
    # them back afterwards (rare: one cheap reduction to check).
    u = v.view(_U16)
    idx = None
    if u.max() > (0x8000 | inf):
        idx = np.flatnonzero(u > (0x8000 | inf))
        nans = v[idx]
    t = np.right_shift(v, 15)  # -1 where the sign bit is set
    np.invert(t, out=t)
    np.bitwise_and(v, t, out=out)
    if idx is not None:
        out[idx] = nans


def _np_relu_mask16(x, inf):
    """int16 -1 where x > 0 (1 <= x <= inf as int16), 0 elsewhere (NaN, <= 0)."""
    s = np.subtract(x, np.int16(1))  # -0.0 (-32768) wraps to 32767: excluded
    t = np.subtract(s, np.int16(inf))  # < 0 exactly when s < inf
    np.invert(s, out=s)  # sign set exactly when s >= 0
    np.bitwise_and(t, s, out=t)
    np.right_shift(t, 15, out=t)  # -1: keep, 0: drop
    return t


def _np_relu_bwd16(g, x, out, inf):
    """out = where(x > 0, g, 0) on int16 views."""
    np.bitwise_and(g, _np_relu_mask16(x, inf), out=out)


def relu_lowp(x, out=None, backend=None):
    """ReLU of a float16/bfloat16 array: ``np.maximum(x, 0)`` on bit patterns.

    Bit-identical to ``np.maximum(x, 0)`` except that -0.0 gives +0.0 (NumPy's
    float16 loop returns -0.0 there; its float32/bfloat16 loops return +0.0).
    NaNs propagate unchanged (sign and payload), as with ``np.maximum``.
    Other dtypes and non-NumPy arrays use ``np.maximum(x, 0)``.
    """
    if type(x) is not np.ndarray or x.dtype not in _INF16 or x.size == 0:
        return np.maximum(x, 0, out=out) if out is not None else np.maximum(x, 0)
    path = _resolve(backend)
    if path == "astype":
        return np.maximum(x, 0, out=out) if out is not None else np.maximum(x, 0)
    inf = _INF16[x.dtype]
    if not (x.flags.c_contiguous or x.flags.f_contiguous):
        x = np.ascontiguousarray(x)
    res = _prepare_out(out, x, x.dtype, (x,))
    xv, rv = _flat(x).view(_I16), _flat(res).view(_I16)
    if path == "numba":
        _K["relu16"](xv, rv, np.int16(inf))
    else:
        _np_relu16(xv, rv, inf)
    if res is not out and out is not None:
        np.copyto(out, res)
        return out
    return res


def relu_backward_lowp(grad, x, out=None, backend=None):
    """``np.where(x > 0, grad, 0)`` for float16/bfloat16, bit-exact.

    ``x`` is the ReLU input or output (both give the same mask), ``grad`` the
    incoming gradient, both of the same 16-bit dtype and shape. A NaN or
    -0.0 in ``x`` masks to +0.0; NaNs in ``grad`` pass where ``x > 0``.
    Anything else (mixed dtypes, broadcasting, non-NumPy arrays) uses
    ``np.where(x > 0, grad, 0)``.
    """
    if (
        type(x) is not np.ndarray
        or type(grad) is not np.ndarray
        or x.dtype not in _INF16
        or grad.dtype != x.dtype
        or grad.shape != x.shape
        or x.size == 0
    ):
        return _where_fallback(grad, x, out)
    path = _resolve(backend)
    if path == "astype":
        return _where_fallback(grad, x, out)
    inf = _INF16[x.dtype]
    # Both must be flattened in the same element order.
    if not (x.flags.c_contiguous and grad.flags.c_contiguous):
        if x.flags.f_contiguous and grad.flags.f_contiguous:
            pass
        else:
            x = np.ascontiguousarray(x)
            grad = np.ascontiguousarray(grad)
    res = _prepare_out(out, x, x.dtype, (x, grad))
    xv, gv, rv = _flat(x).view(_I16), _flat(grad).view(_I16), _flat(res).view(_I16)
    if path == "numba":
        _K["relu_bwd16"](gv, xv, rv, np.int16(inf))
    else:
        _np_relu_bwd16(gv, xv, rv, inf)
    if res is not out and out is not None:
        np.copyto(out, res)
        return out
    return res


def _where_fallback(grad, x, out):
    r = np.where(x > 0, grad, 0)
    if out is None:
        return r
    out[...] = r
    return out


def _prepare_out(out, like, dtype, inputs):
    """A destination with the memory order of ``like``; ``out`` if usable."""
    if out is not None:
        if type(out) is not np.ndarray or out.dtype != dtype or out.shape != like.shape:
            raise ValueError(f"out must be a numpy array of dtype {dtype} and shape {like.shape}")
        order_ok = (like.flags.c_contiguous and out.flags.c_contiguous) or (
            like.flags.f_contiguous and out.flags.f_contiguous and not like.flags.c_contiguous
        )
        # Elementwise in-place (out is exactly an input) is safe; any other
        # overlap goes through a temporary.
        overlap = any(np.may_share_memory(out, a) and not _same_buffer(out, a) for a in inputs)
        if order_ok and not overlap:
            return out
    return np.empty_like(like, dtype=dtype)


def _same_buffer(a, b):
    return (
        a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
        and a.strides == b.strides
        and a.itemsize == b.itemsize
    )


# ---------------------------------------------------------------------------
# GEMM epilogue: bias add (+ ReLU) + downcast in one pass
# ---------------------------------------------------------------------------


def bias_act_convert(y, bias=None, dtype=F16, relu=False, out=None, backend=None):
    """``convert(np.maximum(y + bias, 0) if relu else y + bias, dtype)``, fused.

    ``y``: float32 GEMM output of shape (..., N); ``bias``: float32 of shape
    (N,) or None; ``dtype``: float16 or bfloat16. Bit-identical to the
    unfused NumPy expression (float32 add, float32 ``np.maximum``, then
    ``astype``). With numba this is one pass over ``y``; the NumPy path works
    in place on a float32 temporary and then converts. ``y`` is not modified.
    Note ReLU before the downcast equals ReLU after it: rounding is monotone.
    """
    dt = np.dtype(dtype)
    if (
        type(y) is not np.ndarray
        or y.dtype != F32
        or dt not in _INF16
        or y.ndim == 0
        or (bias is not None and (type(bias) is not np.ndarray or bias.dtype != F32
                                  or bias.shape != (y.shape[-1],)))
    ):
        t = y + bias if bias is not None else y
        if relu:
            t = np.maximum(t, 0)
        return convert(t, dt, out=out)
    path = _resolve(backend)
    if path == "numba" and y.size > 0:
        y2 = np.ascontiguousarray(y).reshape(-1, y.shape[-1])
        b = np.zeros(y.shape[-1], F32) if bias is None else np.ascontiguousarray(bias)
        has_bias = bias is not None  # adding a zero bias would change -0.0 and sNaNs
        res = out
        if (
            res is None
            or type(res) is not np.ndarray
            or res.dtype != dt
            or res.shape != y.shape
            or not res.flags.c_contiguous
        ):
            if res is not None:
                raise ValueError(f"out must be a C-contiguous {dt} array of shape {y.shape}")
            res = np.empty(y.shape, dt)
        name = "epi_f16" if dt == F16 else "epi_bf16"
        r2 = res.reshape(-1, y.shape[-1])
        if np.may_share_memory(r2, y2) or np.may_share_memory(r2, b):
            tmp = np.empty(r2.shape, dt)
            _K[name](y2, b, tmp.view(_U16), bool(relu), has_bias)
            r2[...] = tmp
        else:
            _K[name](y2, b, r2.view(_U16), bool(relu), has_bias)
        return res
    with np.errstate(all="ignore"):
        t = np.add(y, bias) if bias is not None else y.copy()
        if relu:
            np.maximum(t, np.float32(0), out=t)
    return convert(t, dt, out=out, backend=backend)


def relu_backward_convert(grad, x, dtype=None, out=None, backend=None):
    """``convert(np.where(x > 0, grad, 0), dtype)`` in one pass, bit-exact.

    The backward epilogue of a ReLU layer in AMP: ``grad`` is the float32
    GEMM output (dL/d relu-output), ``x`` the saved float16/bfloat16 ReLU
    input or output (same shape), ``dtype`` the gradient's low-precision dtype
    (default ``x.dtype``). Masking before or after the downcast gives the
    same bits (the masked value is +0.0 either way), so this equals
    ``relu_backward_lowp(convert(grad, dtype), x)``.
    """
    dt = np.dtype(x.dtype if dtype is None else dtype)
    if (
        type(grad) is not np.ndarray
        or type(x) is not np.ndarray
        or grad.dtype != F32
        or x.dtype not in _INF16
        or dt not in _INF16
        or grad.shape != x.shape
        or grad.size == 0
    ):
        with np.errstate(all="ignore"):
            r = np.where(x > 0, grad, 0)
        return convert(r, dt, out=out)
    path = _resolve(backend)
    inf = _INF16[x.dtype]
    if path == "numba":
        g = np.ascontiguousarray(grad)
        xc = np.ascontiguousarray(x)
        res = out
        if res is None or type(res) is not np.ndarray or res.dtype != dt or res.shape != x.shape \
                or not res.flags.c_contiguous or np.may_share_memory(res, g):
            if res is not None and (type(res) is not np.ndarray or res.dtype != dt or res.shape != x.shape):
                raise ValueError(f"out must be a numpy array of dtype {dt} and shape {x.shape}")
            res = np.empty(x.shape, dt)
        name = "rbc_f16" if dt == F16 else "rbc_bf16"
        _K[name](g.reshape(-1).view(_U32), xc.reshape(-1).view(_I16), res.reshape(-1).view(_U16), np.int16(inf))
        if out is not None and res is not out:
            np.copyto(out, res)
            return out
        return res
    if path == "astype":
        with np.errstate(all="ignore"):
            return convert(np.where(x > 0, grad, 0), dt, out=out, backend="astype")
    xc = np.ascontiguousarray(x)
    m = _np_relu_mask16(xc.reshape(-1).view(_I16), inf).astype(_I32)  # sign-extends -1
    g = np.ascontiguousarray(grad).reshape(-1).view(_I32)
    np.bitwise_and(g, m, out=m)
    return convert(m.view(F32).reshape(x.shape), dt, out=out, backend=backend)


def round_to(x, dtype, out=None, backend=None):
    """``x.astype(dtype).astype(float32)`` for a float32 ``x``, in one pass.

    The values a float16/bfloat16 copy of ``x`` holds, kept in float32 so
    that float32 BLAS can use them: how the AMP matmul emulation feeds
    float16-rounded weights (or rounds float32 weight gradients to what a
    float16 gradient would hold) without a 16-bit intermediate. Bit-exact
    (overflow gives inf, NaNs follow the two casts' rules). ``out`` may be
    ``x`` itself (in place).
    """
    dt = np.dtype(dtype)
    if type(x) is not np.ndarray or x.dtype != F32 or dt not in _INF16 or x.size == 0:
        with np.errstate(all="ignore"):
            r = x.astype(dt).astype(x.dtype)
        if out is None:
            return r
        out[...] = r
        return out
    path = _resolve(backend)
    if path == "numba":
        xc = x if (x.flags.c_contiguous or x.flags.f_contiguous) else np.ascontiguousarray(x)
        res = _prepare_out(out, xc, F32, (xc,))
        name = "rt_f16" if dt == F16 else "rt_bf16"
        _K[name](_flat(xc).view(_U32), _flat(res).view(_U32))
        if out is not None and res is not out:
            np.copyto(out, res)
            return out
        return res
    b = "numpy" if path == "numpy-bits" else path
    return convert(convert(x, dt, backend=b), F32, out=out, backend=b)


# ---------------------------------------------------------------------------


def warmup():
    """Load and compile every kernel of the chosen backend now; return BACKEND.

    With numba the first call of each kernel otherwise compiles it (about
    0.3-0.5 s, or a few ms from numba's on-disk cache).
    """
    if BACKEND == "numba" and numba_available():
        a32 = np.zeros(4, np.float32)
        a16 = np.zeros(4, np.float16)
        ab = np.zeros(4, BF16)
        for src in (a32, a16, ab):
            for dt in (F32, F16, BF16):
                if src.dtype != dt:
                    convert(src, dt, backend="numba")
        relu_lowp(a16, backend="numba")
        relu_backward_lowp(a16, a16, backend="numba")
        y = np.zeros((2, 2), np.float32)
        b = np.zeros(2, np.float32)
        bias_act_convert(y, b, F16, relu=True, backend="numba")
        bias_act_convert(y, b, BF16, relu=True, backend="numba")
        for dt in (F16, BF16):
            round_to(a32, dt, backend="numba")
            relu_backward_convert(a32, a16, dt, backend="numba")
    return BACKEND
