"""numba kernels of the 16-bit CPU paths (the ``"numba"`` path of ``cpu_path.py``).

Conversions, ReLU forward/backward, linear's bias epilogue, the loss-scale
unscale pass and the SGD/Adam updates, for ``convert.py``, ``gemm.py``,
``elementwise_cpu.py``, ``loss_scale.py``, ``cross_entropy.py`` and
``cpu_optim.py``. Serial ``nogil`` loops over 1-D contiguous integer views (and
the 2-D bias epilogue), whose scalar conversion is written in LLVM IR on 32-bit
integers: numba would widen Python-level integer code to 64 bits and run 3-4x
slower. With a hardware float16 conversion (F16C on x86) LLVM emits
``vcvtps2ph``/``vcvtph2ps`` plus a NaN fix-up, otherwise an integer/float
recipe; both are bit-identical to NumPy/ml_dtypes and 10-25x faster than
``astype``. Each loop is written once, the scalar conversion passed in
(:func:`_specialize`: one compiled kernel per conversion).

numba is a dependency (``astype`` stays as the exact fallback) and costs about a
second to import, so nothing here imports it until :func:`load` runs;
``cpu_path.py`` calls that on first use of the numba path and falls back to
``astype`` if it raises. Kernels then compile lazily on first call (0.1-0.5 s
each; ``cache=True`` keeps them on disk). :data:`KERNELS` maps a kernel name
to its compiled function; the names without ``_hw``/``_int`` are the
float16 implementation :func:`select_f16_impl` chose.

The loops are serial on purpose: ``parallel=True`` kernels are at best 2x
faster and far slower whenever another process holds a core (figures in
benchmarks/RESULTS.md, "bench_casts.py").
"""

from __future__ import annotations

import os
from types import FunctionType, SimpleNamespace
from typing import Any, Callable

import numpy as np

from ... import dtypes as dt
from . import nn_numba

# Modules whose numba loops load() defines (with the tools it imported).
_FAMILIES = (nn_numba,)

# name -> compiled numba function, filled by load(); load() also binds the
# scalar intrinsics (_h2f_hw, _f2h_int, _f2b_bits, _nb_fbits, ...) as module
# globals, which the benchmark's parallel variants reuse.
KERNELS = {}

# The integer views the kernels take, and the bits of +inf of the 16-bit formats: a 16-bit
# pattern p is NaN when (p & 0x7fff) > INF16[dtype].
U16 = np.dtype(np.uint16)
U32 = np.dtype(np.uint32)
I16 = np.dtype(np.int16)
INF16 = {dt.float16: 0x7C00, dt.bfloat16: 0x7F80}


def flat(a: np.ndarray) -> np.ndarray:
    """1-D view of a C- or F-contiguous array in memory order."""
    return a.reshape(-1) if a.flags.c_contiguous else a.ravel(order="K")


# The loops each kernel runs, written once; :func:`_specialize` compiles one per scalar conversion
# ``_CONVERT`` (u32 bits -> u32 bits), bound as a global of its own copy of the function.
def _map_bits(src, dst):  # 1-D contiguous bit views: dst[i] = convert(src[i])
    for i in range(src.size):
        dst[i] = _CONVERT(np.uint32(src[i]))  # noqa: F821 - bound by _specialize


def _bias_round(y, bias, dst):  # float32 (M, N) + float32 (N,) -> 16-bit bits (M, N): one rounding
    rows, cols = y.shape
    for r in range(rows):
        for c in range(cols):
            dst[r, c] = _CONVERT(_nb_fbits(y[r, c] + bias[c]))  # noqa: F821 - bound by _specialize


def _specialize(jit: Callable, loop: Callable, name: str, convert: Any) -> Any:
    """``loop`` compiled with ``_CONVERT`` = ``convert``: a copy of the function with that global, named
    ``name`` (numba's on-disk cache is per qualified name, so each specialisation keeps its own entry)."""
    copy = FunctionType(loop.__code__, {**loop.__globals__, "_CONVERT": convert}, name)
    copy.__qualname__ = name
    return jit(copy)


def load() -> bool:  # noqa: C901 - one place that defines every kernel
    """Import numba, define every kernel into KERNELS and pick the float16 ones.

    Returns whether the hardware float16 conversion is used (``cpu_path.F16C``).
    Raises (ImportError, or numba/LLVM errors) when numba is
    unusable.
    """
    # Names are declared global so that the jitted functions below see them as
    # module globals (not closure cells), which keeps numba's cache=True usable: a
    # kernel whose closure holds another kernel misses the cache in every new process
    # (numba keys the cache on the closure's pickled contents), so the kernels other
    # kernels call are globals too.
    global _nb_fbits, _h2f_int, _h2f_hw, _f2h_int, _f2h_hw, _f2b_bits, _b2h_int, _b2h_hw

    from llvmlite import ir
    from numba import njit, types
    from numba.extending import intrinsic, overload

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

    # -- the conversions, u32 bits -> u32 bits (composed ones for the 16-bit pairs) --
    def composed(outer, inner, doc):
        return u32_intrinsic(lambda b, u: outer(b, inner(b, u)), doc)

    conversions = {
        "f16_to_f32_hw": _h2f_hw, "f16_to_f32_int": _h2f_int,
        "f32_to_f16_hw": _f2h_hw, "f32_to_f16_int": _f2h_int,
        "f32_to_bf16": _f2b_bits,
        "bf16_to_f32": u32_intrinsic(lambda b, u: b.shl(u, k(16)), "bfloat16 -> float32 bits"),
        "f16_to_bf16_hw": composed(ir_f2b, ir_h2f_hw, "float16 -> bfloat16 bits (F16C)"),
        "f16_to_bf16_int": composed(ir_f2b, ir_h2f_int, "float16 -> bfloat16 bits (integer)"),
        "bf16_to_f16_hw": _b2h_hw, "bf16_to_f16_int": _b2h_int,
    }
    kernels = {name: _specialize(jit, _map_bits, name, convert) for name, convert in conversions.items()}
    for name, convert in (("bias_round_f16_hw", _f2h_hw), ("bias_round_f16_int", _f2h_int),
                          ("bias_round_bf16", _f2b_bits)):
        kernels[name] = _specialize(jit, _bias_round, name, convert)

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
    def unscale_f32(src, dst, inv):  # C-contiguous float32 arrays of one shape (dst may be src), float32 inv;
        bad = False                  # True if a result is inf/nan. Flattened here: a NumPy reshape costs more
        src, dst = src.reshape(-1), dst.reshape(-1)
        for i in range(src.size):
            v = src[i] * inv  # float32 times float32: one rounding, as NumPy's multiply
            dst[i] = v
            if not (v - v == np.float32(0.0)):  # inf - inf and nan - nan are nan
                bad = True
        return bad

    @jit
    def unscale_f32_inplace(buf, inv):  # unscale_f32 with dst = src: LLVM only vectorizes the
        bad = False                     # two-array loop when the arrays do not overlap
        buf = buf.reshape(-1)
        for i in range(buf.size):
            v = buf[i] * inv
            buf[i] = v
            if not (v - v == np.float32(0.0)):
                bad = True
        return bad

    @jit
    def sgd_f32(w, g, buf, lr, momentum, dampening_c, weight_decay, use_wd, maximize, momentum_on, started,
                nesterov):  # float32[::1] arrays, float32 scalars: optim.sgd's update, one pass
        for i in range(w.size):
            w32 = w[i]
            d = g[i]
            if maximize:
                d = -d
            if use_wd:
                d = d + weight_decay * w32
            if momentum_on:
                b = momentum * buf[i] + dampening_c * d if started else d
                d = d + momentum * b if nesterov else b
                buf[i] = b
            w[i] = w32 - lr * d

    @jit
    def adam_f32(w, g, m, v, v_max, step_size, bias2_sqrt, beta1_c, beta2, beta2_c, eps, weight_decay, decay,
                 use_wd, decoupled, amsgrad):  # optim.adam's update, one pass
        for i in range(w.size):
            w32 = w[i]
            g32 = g[i]
            if use_wd:
                if decoupled:
                    w32 = w32 * decay
                else:
                    g32 = g32 + weight_decay * w32
            m32 = m[i]
            m_new = m32 + beta1_c * (g32 - m32)
            v_new = beta2 * v[i] + beta2_c * (g32 * g32)
            second = v_new
            if amsgrad:
                vm = v_max[i]
                second = vm if (vm >= v_new or vm != vm) else v_new  # NumPy's maximum: nan wins
                v_max[i] = second
            denom = np.sqrt(second) / bias2_sqrt + eps
            w[i] = w32 - step_size * (m_new / denom)
            m[i] = m_new
            v[i] = v_new

    kernels.update(sgd_f32=sgd_f32, adam_f32=adam_f32, unscale_f32=unscale_f32,
                   unscale_f32_inplace=unscale_f32_inplace, relu16=relu16, relu_bwd16=relu_bwd16)
    KERNELS.clear()
    KERNELS.update(kernels)
    f16c = _probe_hw()
    select_f16_impl("hw" if f16c else "int")
    # The transformer kernels' modules take numba's tools from here (none of them imports numba).
    # error_model="numpy": a float division by zero gives inf/nan, as in NumPy, instead of a raise whose
    # check keeps LLVM from vectorising the loop.
    kernel_jit = njit(cache=True, nogil=True, fastmath=False, boundscheck=False, error_model="numpy")
    tools = SimpleNamespace(jit=kernel_jit, njit=njit, intrinsic=intrinsic, overload=overload, types=types, ir=ir,
                            h2f=_h2f_hw if f16c else _h2f_int, f2h=_f2h_hw if f16c else _f2h_int,
                            f2b=_f2b_bits, fbits=_nb_fbits)
    for family in _FAMILIES:
        family.define(tools)
    return f16c


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
        KERNELS["f32_to_f16_hw"](probe, got)
        with np.errstate(all="ignore"):
            ref = probe.view(np.float32).astype(np.float16).view(np.uint16)
        h = np.arange(65536, dtype=np.uint16)
        up = np.empty(h.size, np.uint32)
        KERNELS["f16_to_f32_hw"](h, up)
        ref_up = h.view(np.float16).astype(np.float32).view(np.uint32)
        return bool(np.array_equal(got, ref) and np.array_equal(up, ref_up))
    except Exception:
        return False


def select_f16_impl(which: str) -> None:
    """Choose the numba float32/bfloat16 -> float16 kernels: "hw" or "int".

    Internal; the tests and the benchmark use it to check both
    implementations.
    """
    if which not in ("hw", "int"):
        raise ValueError(which)
    KERNELS["f16_to_f32"] = KERNELS["f16_to_f32_" + which]
    KERNELS["f16_to_bf16"] = KERNELS["f16_to_bf16_" + which]
    KERNELS["f32_to_f16"] = KERNELS["f32_to_f16_" + which]
    KERNELS["bf16_to_f16"] = KERNELS["bf16_to_f16_" + which]
    KERNELS["bias_round_f16"] = KERNELS["bias_round_f16_" + which]
