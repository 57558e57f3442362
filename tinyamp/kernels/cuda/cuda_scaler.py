"""Fused CUDA kernels for loss scaling: unscale a gradient group and update the scale, on the device.

On a GPU, ``loss_scale.unscale_group`` and ``loss_scale.update_scale`` hand
over to these (NumPy twins, statement by statement: tests/support/cuda_kernels_reference.py):

- :func:`unscale_group`: one pass over a group of gradients (a ``RawKernel``
  fed a table of pointers and 8192-element chunks): ``out = grad * inv_scale``
  with ``inv_scale = float32(1 / float64(scale))`` computed by each block from
  the scale itself (no launch for the reciprocal), and ``found_inf = 1`` if any
  result is inf/nan. Each thread moves four elements a load and a store
  (``cuda_launch.VECTOR4``) where both arrays are aligned for it. Every thread that sees one writes 1.0, so the race
  between them is benign.
- :func:`update_scale`: the dynamic scale rule of ``loss_scale.update_scale``
  as one thread on the device arrays.

Same bits as the NumPy path, except that a NaN rounded to bfloat16 may carry a
different NaN payload. Compiling, launching and counting: ``cuda_launch.py``.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from . import cuda_launch as launch
from .cuda_launch import BF16_CONVERSIONS, F16_CONVERSIONS, FUSED_DTYPES, STORAGE, VECTOR4, KernelSpec

UNSCALE_CHUNK = 8192  # elements per block of the unscale kernel
UNSCALE_BLOCK = 256  # threads per block

UNSCALE_BODY = r"""
extern "C" __global__ void {name}(const unsigned long long* ptrs, const int ntensors,
                                  const long long* chunks, const float* scale, float* found_inf) {{
    const long long* chunk = chunks + 3 * (long long)blockIdx.x;  // (tensor, start, end)
    const int t = (int)chunk[0];
    const {g}* grad = reinterpret_cast<const {g}*>(ptrs[t]);
    {o}* out = reinterpret_cast<{o}*>(ptrs[ntensors + t]);
    const float s = (float)(1.0 / (double)scale[0]);  // = reciprocal(float64(scale)).astype(float32)
    bool bad = false;
    const long long start = chunk[1], end = chunk[2];
    // Four elements a load and a store where both arrays allow it (chunks start on multiples of four).
    const long long nv = tinyamp_aligned4(grad + start) && tinyamp_aligned4(out + start) ? (end - start) / 4 : 0;
    for (long long q = threadIdx.x; q < nv; q += blockDim.x) {{
        float v[4];
        tinyamp_load4_{gc}(grad + start + 4 * q, v);
        for (int k = 0; k < 4; ++k) {{
            v[k] = v[k] * s;
            bad = bad || !isfinite(v[k]);
        }}
        tinyamp_store4_{oc}(out + start + 4 * q, v);
    }}
    for (long long j = start + 4 * nv + threadIdx.x; j < end; j += blockDim.x) {{
        const float v = tinyamp_{gc}_to_f32(grad[j]) * s;
        bad = bad || !isfinite(v);
        out[j] = tinyamp_f32_to_{oc}(v);
    }}
    if (bad) found_inf[0] = 1.0f;  // benign race: every writer stores 1
}}
"""


@lru_cache(maxsize=None)
def unscale_source(grad_dtype: Any, out_dtype: Any) -> tuple[str, str]:
    """(kernel name, full CUDA source) of the unscale kernel for one dtype pair."""
    (g, gc), (o, oc) = STORAGE[np.dtype(grad_dtype)], STORAGE[np.dtype(out_dtype)]
    name = f"tinyamp_unscale_{gc}_{oc}"
    return name, (F16_CONVERSIONS + BF16_CONVERSIONS + VECTOR4
                  + UNSCALE_BODY.format(name=name, g=g, o=o, gc=gc, oc=oc))


UPDATE_SCALE = KernelSpec(
    "tinyamp_update_scale",
    "raw float32 found_inf, float64 growth_factor, float64 backoff_factor, int32 growth_interval, "
    "int32 hysteresis, float32 scale_floor, bool has_max, float64 max_scale",
    "raw float32 scale, raw int32 growth_tracker, raw int32 hysteresis_tracker, raw float32 record",
    r"""
    const float current = scale[0];
    record[0] = current;  // the scale before and after, for GradScaler.last_step (no copies)
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
    record[1] = scale[0];
    """)


def elementwise_specs() -> list[KernelSpec]:
    """Every ElementwiseKernel this module can launch."""
    return [UPDATE_SCALE]


def raw_sources() -> list[tuple[str, str]]:
    """(name, source) of every RawKernel: the unscale kernel per supported dtype pair."""
    return [unscale_source(g, o) for g in FUSED_DTYPES for o in FUSED_DTYPES]


def unscale_group(grads: list, outs: list, scale: Any, found_inf: Any) -> list[tuple]:
    """Fused ``loss_scale.unscale_group``; returns the (grad, out) pairs it did not take.

    Pairs of contiguous float16/bfloat16/float32 arrays go through one launch per
    dtype pair; float64 or non-contiguous ones are left to the caller's loop.
    """
    groups: dict[tuple, list] = {}
    rest = []
    for g, o in zip(grads, outs):
        if g.shape != o.shape:
            raise ValueError(f"unscale: a gradient of shape {list(g.shape)} cannot be unscaled into an output of "
                             f"shape {list(o.shape)}")
        if g.size == 0:
            continue
        if launch.fusable(g, o) and g.flags.c_contiguous and o.flags.c_contiguous:
            groups.setdefault((g.dtype, o.dtype), []).append((g, o))
        else:
            rest.append((g, o))
    if not groups:
        return rest
    dev = launch._device(found_inf)
    with dev:
        for (g_dtype, o_dtype), pairs in groups.items():
            name, source = unscale_source(g_dtype, o_dtype)
            kernel = launch.raw_kernel(name, source)
            chunks = launch.device_chunk_table(dev, tuple(g.size for g, _ in pairs), UNSCALE_CHUNK)
            ptrs = launch.pointer_table(dev, [launch._pointer(g) for g, _ in pairs]
                                        + [launch._pointer(o) for _, o in pairs],
                                        site=("unscale", g_dtype, o_dtype, len(pairs)))
            # Each gradient read once, each output written once (the same memory when unscaling in place).
            launch.count(name, lambda: (sum(g.nbytes for g, _ in pairs) + ptrs.nbytes + chunks.nbytes + scale.nbytes,
                                        sum(o.nbytes for _, o in pairs) + found_inf.nbytes))
            kernel((chunks.shape[0],), (UNSCALE_BLOCK,),
                   (ptrs, np.int32(len(pairs)), chunks, scale, found_inf))
    return rest


def update_scale(scale: Any, growth_tracker: Any, hysteresis_tracker: Any, found_inf: Any, *,
                 growth_factor: float, backoff_factor: float, growth_interval: int, hysteresis: int,
                 min_scale: "float | None", max_scale: "float | None", floor: float, record: Any = None) -> None:
    """Fused ``loss_scale.update_scale`` on the 0-d device arrays, in place; ``record`` gets (before, after)."""
    with launch._device(scale):
        if record is None:
            record = launch._cp().empty((2,), dtype=np.float32)
        launch.elementwise(UPDATE_SCALE, found_inf.reshape(1), float(growth_factor), float(backoff_factor),
                           int(growth_interval), int(hysteresis),
                           np.float32(floor if min_scale is None else min_scale),
                           max_scale is not None, float(0.0 if max_scale is None else max_scale),
                           scale.reshape(1), growth_tracker.reshape(1), hysteresis_tracker.reshape(1), record,
                           size=1)
