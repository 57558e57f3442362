"""Fused CUDA kernels for the optimizers: SGD and Adam/AdamW over a whole parameter group.

On a GPU, ``optim/sgd.py`` and ``optim/adam.py`` call :func:`sgd_group` /
:func:`adam_group` instead of chains of CuPy ufuncs (NumPy twins, statement by
statement: tests/support/cuda_kernels_reference.py). Each update is one ``RawKernel``
launch per group (per dtype combination of weights, gradients and low copies),
reaching the tensors through cached tables of pointers and 8192-element
chunks; each thread moves four elements a load and a store
(``cuda_launch.VECTOR4``: 16 bytes of float32) where every array of the
tensor is aligned for it, one at a time otherwise and after the last four. It reads float16/bfloat16/float32 gradients, does nothing when the
scaler's ``found_inf`` is non-zero, updates the float32 weights (the masters
under O2) and state, and writes each weight's rounded float16/bfloat16 copy
when it has one (O2 parameters, autocast's cached copies). One launch with a
thread per tensor advances the step counters (and computes Adam's bias
corrections from them).

Hyper-parameters are read from a float64 device array
(``cuda_launch.DeviceValues``) and converted in the kernel exactly as the host
converted them for the float32 launch arguments of the previous per-parameter
kernels, so a learning rate a scheduler changes is a new array content, not a
new launch argument (a captured CUDA graph keeps working).

Same bits as the NumPy paths, except:

- Adam's bias corrections use CUDA's double ``pow`` (within 2 ulp of exact)
  where NumPy uses the C library's; after rounding to float32 the two agree
  unless the double lands within 2 ulp of a float32 rounding boundary.
- A NaN rounded to bfloat16 may carry a different NaN payload.
- With masters (O2) the float16 weights are written only on a kept step;
  the NumPy path rewrites ``round(master)``, the same value (except for a
  -0.0 parameter whose master is +0.0).

Compiling, launching and counting: ``cuda_launch.py``.
"""

from __future__ import annotations

import threading
from functools import lru_cache
from typing import Any

import numpy as np

from ... import backend
from . import cuda_launch as launch

# ------------------------------------------------ multi-tensor: one launch per group
# A group's tensors are reached through a device table of pointers (one column
# per role, a row per tensor: 0 where a tensor has no such buffer) and a table
# of 8192-element chunks, one block each; both are cached by their contents,
# so a steady training step uploads nothing. Every kernel reads ``found_inf``
# itself (a skipped step writes nothing) and the hyper-parameters from a
# float64 device array (``cuda_launch.DeviceValues``), converting each as the
# NumPy path does: to float32 where a Python float meets float32 arrays
# (``(float)(1.0 - dampening)``, rounded once from the double), in double where
# NumPy computes in float64 (Adam's bias corrections).
GROUP_CHUNK = 8192  # elements per block
GROUP_BLOCK = 256  # threads per block
SGD_SLOTS = ("w", "g", "buf", "step", "low")
ADAM_SLOTS = ("w", "g", "m", "v", "v_max", "step", "low")

SGD_GROUP = r"""
extern "C" __global__ void {name}(const unsigned long long* ptrs, const int ntensors, const long long* chunks,
        const float* found_inf, const double* hyper, const int momentum_on, const int nesterov,
        const int maximize) {{
    if (found_inf[0] != 0.0f) return;  // keep = found_inf == 0: a skipped step writes nothing
    const long long* chunk = chunks + 3 * (long long)blockIdx.x;  // (tensor, start, end)
    const int t = (int)chunk[0];
    {w}* w = reinterpret_cast<{w}*>(ptrs[t]);
    const {g}* grad = reinterpret_cast<const {g}*>(ptrs[ntensors + t]);
    {w}* buf = reinterpret_cast<{w}*>(ptrs[2 * ntensors + t]);
    const float* step = reinterpret_cast<const float*>(ptrs[3 * ntensors + t]);
    {l}* low = reinterpret_cast<{l}*>(ptrs[4 * ntensors + t]);
    // hyper = (lr, momentum, dampening, weight_decay), rounded as the float32 launch arguments were.
    const float lr = (float)hyper[0], momentum = (float)hyper[1], dampening_c = (float)(1.0 - hyper[2]);
    const float weight_decay = (float)hyper[3];
    const bool use_wd = hyper[3] != 0.0;
    const bool started = momentum_on && step[0] > 0.0f;  // the step counter is advanced after this launch
    // One element: w32 and b (the buffer) updated in place, from the gradient d.
    auto update = [&](float& w32, float d, float& b) {{
        if (maximize) d = -d;
        if (use_wd) d = d + weight_decay * w32;
        if (momentum_on) {{
            b = started ? momentum * b + dampening_c * d : d;
            d = nesterov ? d + momentum * b : b;
        }}
        w32 = w32 - lr * d;
    }};
    const long long start = chunk[1], end = chunk[2];
    // Four elements a load and a store where every array allows it (chunks start on multiples of four).
    const bool vec = tinyamp_aligned4(w + start) && tinyamp_aligned4(grad + start)
        && (!momentum_on || tinyamp_aligned4(buf + start)) && (!low || tinyamp_aligned4(low + start));
    const long long nv = vec ? (end - start) / 4 : 0;
    for (long long q = threadIdx.x; q < nv; q += blockDim.x) {{
        const long long j = start + 4 * q;
        float wv[4], gv[4], bv[4] = {{0.0f, 0.0f, 0.0f, 0.0f}};
        tinyamp_load4_{wc}(w + j, wv);
        tinyamp_load4_{gc}(grad + j, gv);
        if (momentum_on) tinyamp_load4_{wc}(buf + j, bv);
        for (int k = 0; k < 4; ++k) update(wv[k], gv[k], bv[k]);
        if (momentum_on) tinyamp_store4_{wc}(buf + j, bv);
        tinyamp_store4_{wc}(w + j, wv);
        if (low) tinyamp_store4_{lc}(low + j, wv);  // the low-precision copy (O2 weights, autocast's copy)
    }}
    for (long long j = start + 4 * nv + threadIdx.x; j < end; j += blockDim.x) {{
        float w32 = tinyamp_{wc}_to_f32(w[j]);
        float b = momentum_on ? tinyamp_{wc}_to_f32(buf[j]) : 0.0f;
        update(w32, tinyamp_{gc}_to_f32(grad[j]), b);
        if (momentum_on) buf[j] = tinyamp_f32_to_{wc}(b);
        w[j] = tinyamp_f32_to_{wc}(w32);
        if (low) low[j] = tinyamp_f32_to_{lc}(w32);
    }}
}}
"""

ADAM_GROUP = r"""
extern "C" __global__ void {name}(const unsigned long long* ptrs, const int ntensors, const long long* chunks,
        const float* found_inf, const double* hyper, const float* coef, const int decoupled,
        const int amsgrad) {{
    if (found_inf[0] != 0.0f) return;
    const long long* chunk = chunks + 3 * (long long)blockIdx.x;
    const int t = (int)chunk[0];
    {w}* w = reinterpret_cast<{w}*>(ptrs[t]);
    const {g}* grad = reinterpret_cast<const {g}*>(ptrs[ntensors + t]);
    {w}* m = reinterpret_cast<{w}*>(ptrs[2 * ntensors + t]);
    {w}* v = reinterpret_cast<{w}*>(ptrs[3 * ntensors + t]);
    {w}* v_max = reinterpret_cast<{w}*>(ptrs[4 * ntensors + t]);
    {l}* low = reinterpret_cast<{l}*>(ptrs[6 * ntensors + t]);
    // hyper = (lr, beta1, beta2, eps, weight_decay); coef = (step size, sqrt of the second bias correction).
    const float beta1_c = (float)(1.0 - hyper[1]), beta2 = (float)hyper[2], beta2_c = (float)(1.0 - hyper[2]);
    const float eps = (float)hyper[3], weight_decay = (float)hyper[4], decay = (float)(1.0 - hyper[0] * hyper[4]);
    const bool use_wd = hyper[4] != 0.0;
    const float step_size = coef[2 * t], bias2_sqrt = coef[2 * t + 1];
    // One element: the weight, m, v and v_max updated in place from the gradient g32.
    auto update = [&](float& w32, float g32, float& m32, float& v32, float& vm) {{
        if (use_wd) {{
            if (decoupled) w32 = w32 * decay;
            else g32 = g32 + weight_decay * w32;
        }}
        const float m_new = m32 + beta1_c * (g32 - m32);
        const float v_new = beta2 * v32 + beta2_c * (g32 * g32);
        float second = v_new;
        if (amsgrad) {{
            second = (vm >= v_new || isnan(vm)) ? vm : v_new;  // NumPy's maximum: nan wins
            vm = second;
        }}
        const float denom = sqrtf(second) / bias2_sqrt + eps;
        w32 = w32 - step_size * (m_new / denom);
        m32 = m_new;
        v32 = v_new;
    }};
    const long long start = chunk[1], end = chunk[2];
    // Four elements a load and a store where every array allows it (chunks start on multiples of four).
    const bool vec = tinyamp_aligned4(w + start) && tinyamp_aligned4(grad + start) && tinyamp_aligned4(m + start)
        && tinyamp_aligned4(v + start) && (!amsgrad || tinyamp_aligned4(v_max + start))
        && (!low || tinyamp_aligned4(low + start));
    const long long nv = vec ? (end - start) / 4 : 0;
    for (long long q = threadIdx.x; q < nv; q += blockDim.x) {{
        const long long j = start + 4 * q;
        float wv[4], gv[4], mv[4], vv[4], xv[4] = {{0.0f, 0.0f, 0.0f, 0.0f}};
        tinyamp_load4_{wc}(w + j, wv);
        tinyamp_load4_{gc}(grad + j, gv);
        tinyamp_load4_{wc}(m + j, mv);
        tinyamp_load4_{wc}(v + j, vv);
        if (amsgrad) tinyamp_load4_{wc}(v_max + j, xv);
        for (int k = 0; k < 4; ++k) update(wv[k], gv[k], mv[k], vv[k], xv[k]);
        if (amsgrad) tinyamp_store4_{wc}(v_max + j, xv);
        tinyamp_store4_{wc}(w + j, wv);
        tinyamp_store4_{wc}(m + j, mv);
        tinyamp_store4_{wc}(v + j, vv);
        if (low) tinyamp_store4_{lc}(low + j, wv);
    }}
    for (long long j = start + 4 * nv + threadIdx.x; j < end; j += blockDim.x) {{
        float w32 = tinyamp_{wc}_to_f32(w[j]), m32 = tinyamp_{wc}_to_f32(m[j]), v32 = tinyamp_{wc}_to_f32(v[j]);
        float vm = amsgrad ? tinyamp_{wc}_to_f32(v_max[j]) : 0.0f;
        update(w32, tinyamp_{gc}_to_f32(grad[j]), m32, v32, vm);
        if (amsgrad) v_max[j] = tinyamp_f32_to_{wc}(vm);
        w[j] = tinyamp_f32_to_{wc}(w32);
        m[j] = tinyamp_f32_to_{wc}(m32);
        v[j] = tinyamp_f32_to_{wc}(v32);
        if (low) low[j] = tinyamp_f32_to_{lc}(w32);
    }}
}}
"""

# One thread per tensor: the step counters (after SGD's update, which reads them) ...
ADVANCE_STEPS = r"""
extern "C" __global__ void tinyamp_advance_steps(const unsigned long long* steps, const int ntensors,
        const float* found_inf) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= ntensors || found_inf[0] != 0.0f) return;
    float* step = reinterpret_cast<float*>(steps[t]);
    step[0] = step[0] + 1.0f;
}
"""

# ... and Adam's bias corrections from them (before its update), in double as on the host.
ADAM_PREPARE_GROUP = r"""
extern "C" __global__ void tinyamp_adam_prepare_group(const unsigned long long* steps, const int ntensors,
        const float* found_inf, const double* hyper, float* coef) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= ntensors) return;
    float* step = reinterpret_cast<float*>(steps[t]);
    const double count = (double)(step[0] + 1.0f);
    coef[2 * t] = (float)(hyper[0] / (1.0 - pow(hyper[1], count)));
    coef[2 * t + 1] = (float)sqrt(1.0 - pow(hyper[2], count));
    if (found_inf[0] == 0.0f) step[0] = step[0] + 1.0f;
}
"""

# (thread, device id, tensor count) -> the bias corrections one launch writes and the next reads: per thread,
# so another thread's Adam step cannot rewrite them between the two launches.
_coefs: dict[tuple, Any] = {}


@backend.on_cuda_switch
def _forget_device_state() -> None:
    """The bias-correction buffers are arrays of one CUDA backend (CuPy or the stand-in): drop them on a switch."""
    _coefs.clear()

_FLOAT16 = np.dtype(np.float16)


@lru_cache(maxsize=None)
def _group_source(template: str, prefix: str, w_dtype: Any, g_dtype: Any, low_dtype: Any) -> tuple[str, str]:
    (w, wc), (g, gc), (lo, lc) = (launch.STORAGE[np.dtype(d)] for d in (w_dtype, g_dtype, low_dtype))
    name = f"{prefix}_{wc}_{gc}_{lc}"
    return name, (launch.F16_CONVERSIONS + launch.BF16_CONVERSIONS + launch.VECTOR4
                  + template.format(name=name, w=w, wc=wc, g=g, gc=gc, l=lo, lc=lc))


def sgd_group_source(w_dtype: Any, g_dtype: Any, low_dtype: Any) -> tuple[str, str]:
    """(name, source) of the multi-tensor SGD update for one (weight, gradient, low copy) dtype triple."""
    return _group_source(SGD_GROUP, "tinyamp_sgd_group", w_dtype, g_dtype, low_dtype)


def adam_group_source(w_dtype: Any, g_dtype: Any, low_dtype: Any) -> tuple[str, str]:
    """(name, source) of the multi-tensor Adam/AdamW update for one dtype triple."""
    return _group_source(ADAM_GROUP, "tinyamp_adam_group", w_dtype, g_dtype, low_dtype)


def group_raw_sources() -> list[tuple[str, str]]:
    """(name, source) of every multi-tensor kernel variant."""
    fused = launch.FUSED_DTYPES
    conversions = launch.F16_CONVERSIONS + launch.BF16_CONVERSIONS
    return ([sgd_group_source(w, g, lo) for w in fused for g in fused for lo in fused]
            + [adam_group_source(w, g, lo) for w in fused for g in fused for lo in fused]
            + [("tinyamp_advance_steps", conversions + ADVANCE_STEPS),
               ("tinyamp_adam_prepare_group", conversions + ADAM_PREPARE_GROUP)])


def _launch_tables(dev: Any, columns: list[list], sizes: list[int], site: tuple) -> tuple[Any, Any]:
    """(pointer table, chunk table) on the device; a column is one role's arrays (None: a 0 pointer)."""
    pointers = [0 if a is None else launch._pointer(a) for column in columns for a in column]
    return (launch.pointer_table(dev, pointers, site=site + (len(pointers),)),
            launch.device_chunk_table(dev, tuple(sizes), GROUP_CHUNK))


def _signatures(weights: list, grads: list, lows: list) -> dict:
    """Tensor indices by (weight, gradient, low copy) dtype: one launch each (low float16 when absent)."""
    groups: dict[tuple, list] = {}
    for i, (w, g, lo) in enumerate(zip(weights, grads, lows)):
        key = (w.dtype, g.dtype, _FLOAT16 if lo is None else lo.dtype)
        groups.setdefault(key, []).append(i)
    return groups



def _check_group(kernel: str, weights: list, columns: list, steps: "list | None") -> None:
    """The kernels' boundary: every array a pointer table names is C-contiguous with its weight's shape
    (per-element buffers in the weight's dtype), each step counter one float32, so no launch reads or
    writes past a buffer. The optimizers guarantee it; a violation here is refused, never launched."""
    for i, w in enumerate(weights):
        shape = w.shape
        if not w.flags.c_contiguous:
            raise ValueError(f"{kernel}: weight {i} (shape {list(shape)}) is not C-contiguous")
        for role, column, same_dtype in columns:
            a = column[i] if column is not None else None
            if a is not None and (a.shape != shape or not a.flags.c_contiguous
                                  or (same_dtype and a.dtype != w.dtype)):
                raise ValueError(f"{kernel}: {role} {i} of shape {list(a.shape)}, {a.dtype} "
                                 f"(c_contiguous={a.flags.c_contiguous}) does not fit its weight of shape "
                                 f"{list(shape)}, {w.dtype}")
        if steps is not None and (steps[i].size != 1 or steps[i].dtype != np.float32):
            raise ValueError(f"{kernel}: step counter {i} is {steps[i].dtype} of shape {list(steps[i].shape)}, "
                             f"not one float32")


def _nbytes(*columns: "list | None") -> int:
    """Bytes of every array in the columns (None entries and columns skipped)."""
    return sum(a.nbytes for column in columns if column is not None for a in column if a is not None)


def _per_tensor_threads(kernel: Any, name: str, args: tuple, ntensors: int, moved: launch.Moved) -> None:
    launch.count(name, moved)
    kernel(((ntensors + GROUP_BLOCK - 1) // GROUP_BLOCK,), (GROUP_BLOCK,), args)


def sgd_group(weights: list, grads: list, bufs: "list | None", steps: "list | None", lows: "list | None",
              found_inf: Any, hyper: Any, *, nesterov: bool, maximize: bool) -> None:
    """SGD on a whole parameter group: one launch per dtype triple, plus one advancing the step counters.

    ``bufs``/``steps`` are None without momentum; ``lows`` holds each tensor's
    low-precision copy to write, or None; ``found_inf`` is the scaler's
    one-element float32 flag, or None without AMP; ``hyper`` the float64
    device array (lr, momentum, dampening, weight_decay).
    """
    count = len(weights)
    if count == 0:
        return
    dev = launch._device(weights[0])
    momentum_on = bufs is not None
    lows = lows if lows is not None else [None] * count
    _check_group("sgd_group", weights, [("gradient", grads, False), ("momentum buffer", bufs, True),
                                        ("low copy", lows, False)], steps)
    with dev:
        found = launch.no_inf_found(dev) if found_inf is None else found_inf
        for (w_dt, g_dt, lo_dt), index in _signatures(weights, grads, lows).items():
            pick = (lambda column, index=index: [column[i] for i in index])
            none = [None] * len(index)
            columns = [pick(weights), pick(grads), pick(bufs) if momentum_on else none,
                       pick(steps) if momentum_on else none, pick(lows)]
            sizes = [weights[i].size for i in index]
            ptrs, chunks = _launch_tables(dev, columns, sizes, ("sgd", w_dt, g_dt, lo_dt))
            if chunks.shape[0] == 0:
                continue
            name, source = sgd_group_source(w_dt, g_dt, lo_dt)
            # Each weight, gradient, momentum buffer and step counter read once; weight, buffer and low copy
            # written once; the tables read by every block (counted once).
            w, g, b, st, lo = columns
            launch.count(name, lambda: (_nbytes(w, g, b, st) + ptrs.nbytes + chunks.nbytes + found.nbytes
                                        + hyper.nbytes, _nbytes(w, b, lo)))
            launch.raw_kernel(name, source)((chunks.shape[0],), (GROUP_BLOCK,),
                                            (ptrs, np.int32(len(index)), chunks, found, hyper,
                                             np.int32(momentum_on), np.int32(nesterov), np.int32(maximize)))
        if momentum_on:  # after every update of the group, which read the old counts
            table = launch.pointer_table(dev, [launch._pointer(s) for s in steps])
            kernel = launch.raw_kernel("tinyamp_advance_steps",
                                       launch.F16_CONVERSIONS + launch.BF16_CONVERSIONS + ADVANCE_STEPS)
            _per_tensor_threads(kernel, "tinyamp_advance_steps", (table, np.int32(count), found), count,
                                lambda: (table.nbytes + found.nbytes + _nbytes(steps), _nbytes(steps)))


def adam_group(weights: list, grads: list, ms: list, vs: list, v_maxs: "list | None", steps: list,
               lows: "list | None", found_inf: Any, hyper: Any, *, decoupled: bool) -> None:
    """Adam/AdamW on a whole parameter group: one launch for the step counters and bias corrections,
    one per dtype triple for the update.

    ``hyper`` is the float64 device array (lr, beta1, beta2, eps, weight_decay);
    the rest as in :func:`sgd_group` (``v_maxs`` None without AMSGrad).
    """
    count = len(weights)
    if count == 0:
        return
    dev = launch._device(weights[0])
    lows = lows if lows is not None else [None] * count
    amsgrad = v_maxs is not None
    _check_group("adam_group", weights, [("gradient", grads, False), ("exp_avg", ms, True), ("exp_avg_sq", vs, True),
                                         ("max_exp_avg_sq", v_maxs, True), ("low copy", lows, False)], steps)
    with dev:
        found = launch.no_inf_found(dev) if found_inf is None else found_inf
        key = (threading.get_ident(), dev.id, count)
        coef = _coefs.get(key)
        if coef is None:
            coef = _coefs[key] = launch._cp().empty((2 * count,), dtype=np.float32)
        signatures = _signatures(weights, grads, lows)
        # Prepare in signature order, so each update launch reads its tensors' rows of coef from an offset.
        order = [i for index in signatures.values() for i in index]
        adam_bias_corrections([steps[i] for i in order], found, hyper, coef)
        offset = 0
        for (w_dt, g_dt, lo_dt), index in signatures.items():
            pick = (lambda column, index=index: [column[i] for i in index])
            columns = [pick(weights), pick(grads), pick(ms), pick(vs),
                       pick(v_maxs) if amsgrad else [None] * len(index), pick(steps), pick(lows)]
            ptrs, chunks = _launch_tables(dev, columns, [weights[i].size for i in index], ("adam", w_dt, g_dt, lo_dt))
            rows = coef[2 * offset:]
            offset += len(index)
            if chunks.shape[0] == 0:
                continue
            name, source = adam_group_source(w_dt, g_dt, lo_dt)
            w, g, m, v, vmax, st, lo = columns
            launch.count(name, lambda: (_nbytes(w, g, m, v, vmax, st) + ptrs.nbytes + chunks.nbytes + found.nbytes
                                        + hyper.nbytes + 8 * len(index), _nbytes(w, m, v, vmax, lo)))
            launch.raw_kernel(name, source)((chunks.shape[0],), (GROUP_BLOCK,),
                                            (ptrs, np.int32(len(index)), chunks, found, hyper, rows,
                                             np.int32(decoupled), np.int32(amsgrad)))


def adam_bias_corrections(steps: list, found_inf: Any, hyper: Any, coef: Any) -> None:
    """One launch, a thread per step counter: ``coef[2t:2t+2]`` = (lr / (1 - beta1^k), sqrt(1 - beta2^k))
    with k = steps[t] + 1, computed in double; then each counter advances unless found_inf is set."""
    dev = launch._device(coef)
    with dev:
        table = launch.pointer_table(dev, [launch._pointer(s) for s in steps])
        prepare = launch.raw_kernel("tinyamp_adam_prepare_group",
                                    launch.F16_CONVERSIONS + launch.BF16_CONVERSIONS + ADAM_PREPARE_GROUP)
        _per_tensor_threads(prepare, "tinyamp_adam_prepare_group",
                            (table, np.int32(len(steps)), found_inf, hyper, coef), len(steps),
                            lambda: (table.nbytes + found_inf.nbytes + hyper.nbytes + _nbytes(steps),
                                     _nbytes(steps) + 8 * len(steps)))
