"""Fused CUDA kernels for loss scaling and the optimizers (NumPy twins: cuda_kernels_reference.py).

On a GPU, GradScaler and tinyamp's SGD/Adam/AdamW call these instead of chains
of CuPy ufuncs (see ``amp/scaler_kernels.py``, ``optim/sgd.py``, ``optim/adam.py``):

- ``unscale_group``: one pass over a group of gradients (a ``RawKernel`` fed a
  table of pointers and 8192-element chunks): ``out = grad * inv_scale`` and
  ``found_inf = 1`` if any result is inf/nan. Every thread that sees one writes
  1.0, so the race between them is benign.
- ``update_scale``: the dynamic scale rule of ``scaler_kernels.update_scale``
  as one thread on the device arrays.
- ``sgd_step`` / ``adam_step``: one ``ElementwiseKernel`` per parameter that
  reads float16/bfloat16/float32 gradients, does nothing when the keep flag
  (``found_inf == 0``) is false, updates the float32 weights (the masters
  under O2) and state, and writes the rounded float16/bfloat16 copy of the
  weights (O2). One-thread kernels advance the device-side step counter
  (and compute Adam's bias corrections from it).

float64 arrays (and non-contiguous gradients for ``unscale_group``) stay on
the CuPy ufunc path of the callers.

No launch reads a device value on the host: a whole training step stays
asynchronous. CuPy is only reached through ``tinyamp.backend``, inside the
functions: importing this module never imports CuPy. Kernels compile on first
use (NVRTC) and are cached; ``launches`` counts launches by kernel name.

Same math, same bits. The kernel bodies are written in the operation order of
the NumPy paths, and compiled with ``--fmad=false`` so that no ``a * b + c``
is fused into one rounding (NumPy rounds twice). The ``*_reference``
functions of ``cuda_kernels_reference.py`` are the kernels transcribed to
NumPy; the tests check them, and the kernel sources run through a CPU stand-in
for CuPy (tests/cuda_emulation.py), against the NumPy paths bit for bit. The
differences:

- Adam's bias corrections use CUDA's double ``pow`` (within 2 ulp of exact)
  where NumPy uses the C library's; after rounding to float32 the two agree
  unless the double lands within 2 ulp of a float32 rounding boundary.
- A NaN rounded to bfloat16 may carry a different NaN payload.
- With masters (O2) the float16 weights are written only on a kept step;
  the NumPy path rewrites ``round(master)``, the same value (except for a
  -0.0 parameter whose master is +0.0).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from . import backend
from . import dtypes as dt

FUSED_DTYPES = (dt.float16, dt.bfloat16, dt.float32)
NVRTC_OPTIONS = ("--fmad=false",)  # no contraction of a*b+c: the NumPy paths round each op
UNSCALE_CHUNK = 8192  # elements per block of the unscale kernel
UNSCALE_BLOCK = 256  # threads per block

launches: dict[str, int] = {}
_kernels: dict[str, Any] = {}
_chunk_tables: dict[tuple, Any] = {}
_pointer_tables: dict[tuple, Any] = {}
POINTER_TABLES_KEPT = 64
_true_flags: dict[int, Any] = {}


# --------------------------------------------------------------- seams to CuPy
def _cp() -> Any:
    return backend.cupy()


def on_gpu(array: Any) -> bool:
    """True for a CuPy array: the callers' test for taking the fused path."""
    return backend.is_cupy_array(array)


def _pointer(array: Any) -> int:
    return array.data.ptr


def _device(array: Any) -> Any:
    return array.device


def fusable(*arrays: Any) -> bool:
    """Whether the fused kernels take these dtypes (float64 stays on the CuPy ufunc path)."""
    return all(a.dtype in FUSED_DTYPES for a in arrays)


# ------------------------------------------------------------ kernel sources
class KernelSpec(NamedTuple):
    """An ``ElementwiseKernel``: CuPy's parameter strings and the loop body."""

    name: str
    in_params: str
    out_params: str
    body: str


# Float <-> 16-bit conversions of the unscale RawKernel, which sees raw 16-bit
# storage. float16 uses the PTX conversion (round to nearest even) so that no
# CUDA header is needed; bfloat16 is float32's upper half, rounded to nearest even.
F16_CONVERSIONS = r"""
__device__ __forceinline__ float tinyamp_f16_to_f32(unsigned short h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
__device__ __forceinline__ unsigned short tinyamp_f32_to_f16(float f) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
"""

BF16_CONVERSIONS = r"""
__device__ __forceinline__ float tinyamp_bf16_to_f32(unsigned short b) {
    return __uint_as_float(((unsigned int)b) << 16);
}
__device__ __forceinline__ unsigned short tinyamp_f32_to_bf16(float f) {
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x0040u);  // NaN stays NaN
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
    return (unsigned short)(u >> 16);
}
__device__ __forceinline__ float tinyamp_f32_to_f32(float f) { return f; }
"""

_STORAGE = {dt.float32: ("float", "f32"), dt.float16: ("unsigned short", "f16"),
            dt.bfloat16: ("unsigned short", "bf16")}

UNSCALE_BODY = r"""
extern "C" __global__ void {name}(const unsigned long long* ptrs, const int ntensors,
                                  const long long* chunks, const float* inv_scale, float* found_inf) {{
    const long long* chunk = chunks + 3 * (long long)blockIdx.x;  // (tensor, start, end)
    const int t = (int)chunk[0];
    const {g}* grad = reinterpret_cast<const {g}*>(ptrs[t]);
    {o}* out = reinterpret_cast<{o}*>(ptrs[ntensors + t]);
    const float s = inv_scale[0];
    bool bad = false;
    for (long long j = chunk[1] + threadIdx.x; j < chunk[2]; j += blockDim.x) {{
        const float v = tinyamp_{gc}_to_f32(grad[j]) * s;
        bad = bad || !isfinite(v);
        out[j] = tinyamp_f32_to_{oc}(v);
    }}
    if (bad) found_inf[0] = 1.0f;  // benign race: every writer stores 1
}}
"""


def unscale_source(grad_dtype: Any, out_dtype: Any) -> tuple[str, str]:
    """(kernel name, full CUDA source) of the unscale kernel for one dtype pair."""
    (g, gc), (o, oc) = _STORAGE[np.dtype(grad_dtype)], _STORAGE[np.dtype(out_dtype)]
    name = f"tinyamp_unscale_{gc}_{oc}"
    return name, F16_CONVERSIONS + BF16_CONVERSIONS + UNSCALE_BODY.format(name=name, g=g, o=o, gc=gc, oc=oc)


UPDATE_SCALE = KernelSpec(
    "tinyamp_update_scale",
    "raw float32 found_inf, float64 growth_factor, float64 backoff_factor, int32 growth_interval, "
    "int32 hysteresis, float32 scale_floor, bool has_max, float64 max_scale",
    "raw float32 scale, raw int32 growth_tracker, raw int32 hysteresis_tracker",
    r"""
    const float current = scale[0];
    const int hyst_left = hysteresis_tracker[0] > 1 ? hysteresis_tracker[0] - 1 : 0;
    const int successful = growth_tracker[0] + 1;
    if (found_inf[0] > 0.0f) {
        growth_tracker[0] = 0;
        hysteresis_tracker[0] = hyst_left;
        if (hyst_left <= 0) {
            const float backed = (float)((double)current * backoff_factor);
            scale[0] = backed > scale_floor ? backed : scale_floor;
        }
    } else if (successful >= growth_interval) {
        double grown = (double)current * growth_factor;
        if (has_max && max_scale < grown) grown = max_scale;
        const float grown32 = (float)grown;
        if (isfinite(grown32)) scale[0] = grown32;  // never grow to inf
        growth_tracker[0] = 0;
        hysteresis_tracker[0] = hysteresis;
    } else {
        growth_tracker[0] = successful;
    }
    """)

ADVANCE_STEP = KernelSpec("tinyamp_advance_step", "raw bool keep", "raw float32 step",
                          "if (keep[0]) step[0] = step[0] + 1.0f;")

ADAM_PREPARE = KernelSpec(
    "tinyamp_adam_prepare", "raw bool keep, float64 lr, float64 beta1, float64 beta2",
    "raw float32 step, raw float32 coef",
    r"""
    const double t = (double)(step[0] + 1.0f);
    coef[0] = (float)(lr / (1.0 - pow(beta1, t)));   // step size
    coef[1] = (float)sqrt(1.0 - pow(beta2, t));      // sqrt of the second bias correction
    if (keep[0]) step[0] = step[0] + 1.0f;
    """)


def sgd_spec(momentum: bool, low_copy: bool) -> KernelSpec:
    """The SGD update, with or without a momentum buffer and a low-precision weight copy."""
    ins = "G g, raw bool keep, float32 lr, float32 weight_decay, bool use_wd, bool maximize"
    outs = "W w"
    if momentum:
        ins += ", raw float32 step, float32 momentum, float32 dampening_c, bool nesterov"
        outs += ", W buf"
    if low_copy:
        outs += ", L w_low"
    body = ["if (keep[0]) {",
            "    const float w32 = static_cast<float>(w);",
            "    float d = static_cast<float>(g);",
            "    if (maximize) d = -d;",
            "    if (use_wd) d = d + weight_decay * w32;"]
    if momentum:
        body += ["    const float b = step[0] > 0.0f ? momentum * static_cast<float>(buf) + dampening_c * d : d;",
                 "    d = nesterov ? d + momentum * b : b;",
                 "    buf = b;"]
    body += ["    const float w_new = w32 - lr * d;", "    w = w_new;"]
    if low_copy:
        body.append("    w_low = w_new;")
    body.append("}")
    name = "tinyamp_sgd" + ("_momentum" if momentum else "") + ("_low" if low_copy else "")
    return KernelSpec(name, ins, outs, "\n".join(body))


def adam_spec(amsgrad: bool, low_copy: bool) -> KernelSpec:
    """The Adam/AdamW update (``coef`` from ``ADAM_PREPARE``), optionally AMSGrad and a low copy."""
    ins = ("G g, raw bool keep, raw float32 coef, float32 beta1_c, float32 beta2, float32 beta2_c, "
           "float32 eps, float32 weight_decay, float32 decay, bool use_wd, bool decoupled")
    outs = "W w, W m, W v" + (", W v_max" if amsgrad else "") + (", L w_low" if low_copy else "")
    body = ["if (keep[0]) {",
            "    float w32 = static_cast<float>(w);",
            "    float g32 = static_cast<float>(g);",
            "    if (use_wd) {",
            "        if (decoupled) w32 = w32 * decay;",
            "        else g32 = g32 + weight_decay * w32;",
            "    }",
            "    const float m32 = static_cast<float>(m);",
            "    const float m_new = m32 + beta1_c * (g32 - m32);",
            "    const float v_new = beta2 * static_cast<float>(v) + beta2_c * (g32 * g32);",
            "    float second = v_new;"]
    if amsgrad:
        body += ["    const float vm = static_cast<float>(v_max);",
                 "    second = (vm >= v_new || isnan(vm)) ? vm : v_new;  // NumPy's maximum: nan wins",
                 "    v_max = second;"]
    body += ["    const float denom = sqrtf(second) / coef[1] + eps;",
             "    const float w_new = w32 - coef[0] * (m_new / denom);",
             "    w = w_new;", "    m = m_new;", "    v = v_new;"]
    if low_copy:
        body.append("    w_low = w_new;")
    body.append("}")
    name = "tinyamp_adam" + ("_amsgrad" if amsgrad else "") + ("_low" if low_copy else "")
    return KernelSpec(name, ins, outs, "\n".join(body))


def elementwise_specs() -> list[KernelSpec]:
    """Every ElementwiseKernel this module can launch (all variants)."""
    return ([UPDATE_SCALE, ADVANCE_STEP, ADAM_PREPARE]
            + [sgd_spec(m, lo) for m in (False, True) for lo in (False, True)]
            + [adam_spec(a, lo) for a in (False, True) for lo in (False, True)])


def raw_sources() -> list[tuple[str, str]]:
    """(name, source) of every RawKernel: the unscale kernel per supported dtype pair."""
    return [unscale_source(g, o) for g in FUSED_DTYPES for o in FUSED_DTYPES]


# ------------------------------------------------------------------ launching
def _count(name: str) -> None:
    launches[name] = launches.get(name, 0) + 1


def _elementwise(spec: KernelSpec, *args: Any, size: "int | None" = None) -> None:
    kernel = _kernels.get(spec.name)
    if kernel is None:
        kernel = _kernels[spec.name] = _cp().ElementwiseKernel(
            spec.in_params, spec.out_params, spec.body, spec.name, options=NVRTC_OPTIONS)
    _count(spec.name)
    if size is None:
        kernel(*args)
    else:
        kernel(*args, size=size)


def _keep_flag(keep: Any, like: Any) -> Any:
    """The optimizer's keep mask as a 1-element device bool (``True`` means no AMP mask)."""
    if keep is True:
        dev = _device(like)
        flag = _true_flags.get(dev.id)
        if flag is None:
            with dev:
                flag = _true_flags[dev.id] = _cp().ones((1,), dtype=np.bool_)
        return flag
    return keep.reshape(1)


def chunk_table(sizes: list[int], chunk: int) -> np.ndarray:
    """(tensor index, start, end) rows covering every element once, ``chunk`` at a time."""
    rows = [np.zeros((0, 3), dtype=np.int64)]
    for t, n in enumerate(sizes):
        starts = np.arange(0, n, chunk, dtype=np.int64)
        rows.append(np.stack([np.full_like(starts, t), starts, np.minimum(starts + chunk, n)], axis=1))
    return np.concatenate(rows)


def _pointer_table(cp: Any, dev: Any, pointers: list[int]) -> Any:
    """The pointers as a device array, reused while they repeat.

    Gradients are fresh arrays every step, but the memory pool hands out the
    same addresses in the same order, so after the first steps the table is
    found here and nothing is uploaded; otherwise it is a small asynchronous
    copy. A table depends only on its key, so a stale entry is never wrong.
    """
    key = (dev.id, tuple(pointers))
    table = _pointer_tables.pop(key, None)
    if table is None:
        table = cp.asarray(np.array(pointers, dtype=np.uint64))
        if len(_pointer_tables) >= POINTER_TABLES_KEPT:
            del _pointer_tables[next(iter(_pointer_tables))]  # the least recently used
    _pointer_tables[key] = table
    return table


def unscale_group(grads: list, outs: list, inv_scale: Any, found_inf: Any) -> list[tuple]:
    """Fused ``scaler_kernels.unscale_group``; returns the (grad, out) pairs it did not take.

    Pairs of contiguous float16/bfloat16/float32 arrays go through one launch per
    dtype pair; float64 or non-contiguous ones are left to the caller's loop.
    """
    groups: dict[tuple, list] = {}
    rest = []
    for g, o in zip(grads, outs):
        if g.size == 0:
            continue
        if fusable(g, o) and g.shape == o.shape and g.flags.c_contiguous and o.flags.c_contiguous:
            groups.setdefault((g.dtype, o.dtype), []).append((g, o))
        else:
            rest.append((g, o))
    if not groups:
        return rest
    cp, dev = _cp(), _device(found_inf)
    with dev:
        for (g_dtype, o_dtype), pairs in groups.items():
            name, source = unscale_source(g_dtype, o_dtype)
            kernel = _kernels.get(name)
            if kernel is None:
                kernel = _kernels[name] = cp.RawKernel(source, name, options=NVRTC_OPTIONS)
            sizes = tuple(g.size for g, _ in pairs)
            key = (dev.id, sizes, UNSCALE_CHUNK)
            chunks = _chunk_tables.get(key)
            if chunks is None:  # sizes repeat every step: the table is uploaded once
                chunks = _chunk_tables[key] = cp.asarray(chunk_table(list(sizes), UNSCALE_CHUNK))
            ptrs = _pointer_table(cp, dev, [_pointer(g) for g, _ in pairs] + [_pointer(o) for _, o in pairs])
            _count(name)
            kernel((chunks.shape[0],), (UNSCALE_BLOCK,),
                   (ptrs, np.int32(len(pairs)), chunks, inv_scale, found_inf))
    return rest


def update_scale(scale: Any, growth_tracker: Any, hysteresis_tracker: Any, found_inf: Any, *,
                 growth_factor: float, backoff_factor: float, growth_interval: int, hysteresis: int,
                 min_scale: "float | None", max_scale: "float | None", floor: float) -> None:
    """Fused ``scaler_kernels.update_scale`` on the 0-d device arrays, in place."""
    with _device(scale):
        _elementwise(UPDATE_SCALE, found_inf.reshape(1), float(growth_factor), float(backoff_factor),
                     int(growth_interval), int(hysteresis), np.float32(floor if min_scale is None else min_scale),
                     max_scale is not None, float(0.0 if max_scale is None else max_scale),
                     scale.reshape(1), growth_tracker.reshape(1), hysteresis_tracker.reshape(1), size=1)


def sgd_step(w: Any, g: Any, buf: Any, step: Any, keep: Any, *, low: Any = None, lr: float, momentum: float,
             dampening: float, weight_decay: float, nesterov: bool, maximize: bool) -> None:
    """Fused ``optim.sgd._sgd_param`` (``buf``/``step`` None without momentum); writes ``low`` too."""
    with _device(w):
        flag = _keep_flag(keep, w)
        args = [g, flag, lr, weight_decay, weight_decay != 0, bool(maximize)]
        outs = [w]
        if momentum != 0:
            args += [step.reshape(1), momentum, 1 - dampening, bool(nesterov)]
            outs.append(buf)
        if low is not None:
            outs.append(low)
        _elementwise(sgd_spec(momentum != 0, low is not None), *args, *outs)
        if momentum != 0:  # after the update, which read the old count
            _elementwise(ADVANCE_STEP, flag, step.reshape(1), size=1)


def adam_step(w: Any, g: Any, m: Any, v: Any, v_max: Any, step: Any, keep: Any, *, low: Any = None,
              lr: float, beta1: float, beta2: float, eps: float, weight_decay: float, decoupled: bool) -> None:
    """Fused ``optim.adam._adam_param`` (``v_max`` None without AMSGrad); writes ``low`` too."""
    with _device(w):
        flag = _keep_flag(keep, w)
        coef = _cp().empty((2,), dtype=np.float32)
        _elementwise(ADAM_PREPARE, flag, float(lr), float(beta1), float(beta2), step.reshape(1), coef, size=1)
        outs = [w, m, v] + ([v_max] if v_max is not None else []) + ([low] if low is not None else [])
        _elementwise(adam_spec(v_max is not None, low is not None), g, flag, coef, 1 - beta1, beta2, 1 - beta2,
                     eps, weight_decay, 1 - lr * weight_decay, weight_decay != 0, bool(decoupled), *outs)



@backend.on_cuda_switch
def _forget_device_state() -> None:
    """Kernels, tables and flags belong to one CUDA backend (CuPy or the stand-in): drop them on a switch."""
    for cache in (_kernels, _chunk_tables, _pointer_tables, _true_flags):
        cache.clear()
