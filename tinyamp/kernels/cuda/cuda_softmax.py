"""softmax and log_softmax over the last dim, forward and backward, one CUDA launch each.

``kernels/softmax.py`` hands over C-contiguous GPU arrays (16-bit or float32;
the result in the input's dtype). One block per row, float32 throughout, the
composed path's operations (``ops/softmax.py``) in its order:

- forward: ``m = max(x)`` (NaN wins; a row of -inf shifts by 0), ``z = x - m``,
  ``s = sum(exp(z))``; softmax ``exp(z) / s``, log_softmax ``z - log(s)``,
  rounded once;
- backward from the saved output ``y``: softmax ``dx = y * (gy - sum(gy * y))``,
  log_softmax ``dx = gy - exp(y) * sum(gy)``, rounded once to ``gy``'s dtype.

The sums are block trees (``cuda_rows.BLOCK_REDUCE``), not NumPy's pairwise
order: a few float32 ulp from the composed path, not its bits.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from . import cuda_launch as launch
from . import cuda_rows

_PRELUDE = launch.F16_CONVERSIONS + launch.BF16_CONVERSIONS + cuda_rows.BLOCK_REDUCE + r"""
#define TINYAMP_INF __uint_as_float(0x7f800000u)
"""

_FORWARD = r"""
extern "C" __global__ void {fn}(const {s}* __restrict__ x, {s}* __restrict__ y, const long long cols) {{
    const {s}* const xr = x + (long long)blockIdx.x * cols;
    {s}* const yr = y + (long long)blockIdx.x * cols;
    float m = -TINYAMP_INF;
    for (long long j = threadIdx.x; j < cols; j += blockDim.x) {{
        const float v = tinyamp_{c}_to_f32(xr[j]);
        if (isnan(v) || v > m) m = v;  // once NaN, m stays NaN
    }}
    m = tinyamp_block_max(m);
    if (m == -TINYAMP_INF) m = 0.0f;  // a row of -inf: shifted by 0, not made NaN
    float s = 0.0f;
    for (long long j = threadIdx.x; j < cols; j += blockDim.x) s = s + expf(tinyamp_{c}_to_f32(xr[j]) - m);
    s = tinyamp_block_sum(s);
    const float lse = logf(s);
    for (long long j = threadIdx.x; j < cols; j += blockDim.x) {{
        const float z = tinyamp_{c}_to_f32(xr[j]) - m;
        yr[j] = tinyamp_f32_to_{c}({result});
    }}
}}
"""
_RESULTS = {False: "expf(z) / s", True: "z - lse"}

_BACKWARD = r"""
extern "C" __global__ void {fn}(const {sg}* __restrict__ grad, const {sy}* __restrict__ y, {sg}* __restrict__ out,
        const long long cols) {{
    const long long base = (long long)blockIdx.x * cols;
    float s = 0.0f;
    for (long long j = threadIdx.x; j < cols; j += blockDim.x) s = s + {term};
    s = tinyamp_block_sum(s);
    for (long long j = threadIdx.x; j < cols; j += blockDim.x) {{
        const float g = tinyamp_{cg}_to_f32(grad[base + j]), v = tinyamp_{cy}_to_f32(y[base + j]);
        out[base + j] = tinyamp_f32_to_{cg}({result});
    }}
}}
"""
_GRAD_TERMS = {False: "tinyamp_{cg}_to_f32(grad[base + j]) * tinyamp_{cy}_to_f32(y[base + j])",
               True: "tinyamp_{cg}_to_f32(grad[base + j])"}
_GRAD_RESULTS = {False: "v * (g - s)", True: "g - expf(v) * s"}


def _suffix(dtype: Any) -> str:
    return launch.STORAGE[np.dtype(dtype)][1]


def _storage(dtype: Any) -> str:
    return launch.STORAGE[np.dtype(dtype)][0]


def _kind(log: bool) -> str:
    return "log_softmax" if log else "softmax"


@lru_cache(maxsize=None)
def forward_source(dtype: Any, log: bool) -> tuple[str, str]:
    """(name, source) of the forward of softmax (or log_softmax) for ``dtype`` in and out."""
    c = _suffix(dtype)
    fn = f"tinyamp_{_kind(log)}_{c}"
    return fn, _PRELUDE + _FORWARD.format(fn=fn, s=_storage(dtype), c=c, result=_RESULTS[log])


@lru_cache(maxsize=None)
def backward_source(g_dtype: Any, y_dtype: Any, log: bool) -> tuple[str, str]:
    """(name, source) of the backward for a ``g_dtype`` gradient of a ``y_dtype`` output."""
    cg, cy = _suffix(g_dtype), _suffix(y_dtype)
    fn = f"tinyamp_{_kind(log)}_backward_{cg}_{cy}"
    term = _GRAD_TERMS[log].format(cg=cg, cy=cy)
    return fn, _PRELUDE + _BACKWARD.format(fn=fn, sg=_storage(g_dtype), sy=_storage(y_dtype), cg=cg, cy=cy,
                                           term=term, result=_GRAD_RESULTS[log])


def sources() -> list[tuple[str, str]]:
    """(name, source) of every kernel of this module, for the NVRTC check."""
    fused = launch.FUSED_DTYPES
    return ([forward_source(d, log) for d in fused for log in (False, True)]
            + [backward_source(g, y, log) for g in fused for y in fused for log in (False, True)])


def takes(*arrays: Any) -> bool:
    """Whether the kernels take these: C-contiguous GPU arrays of the fused dtypes, one shape, at least 1-D, with
    a non-empty last dim."""
    first = arrays[0]
    return (launch.on_gpu(first) and first.ndim >= 1 and first.shape[-1] > 0
            and all(a.dtype in launch.FUSED_DTYPES and a.flags.c_contiguous and a.shape == first.shape
                    for a in arrays))


def forward(x: Any, *, log: bool) -> Any:
    """softmax (or with ``log`` log_softmax) of ``x`` over its last dim, in ``x``'s dtype: one launch."""
    name, source = forward_source(x.dtype, log)
    cols = x.shape[-1]
    rows = x.size // cols
    with launch._device(x):
        y = launch._cp().empty(x.shape, dtype=x.dtype)
        if rows:
            launch.count(name)
            launch.raw_kernel(name, source)((rows,), (cuda_rows.threads_for(cols),), (x, y, np.int64(cols)))
    return y


def backward(gy: Any, y: Any, *, log: bool) -> Any:
    """The input's gradient from the output ``y`` and its gradient ``gy``, in ``gy``'s dtype: one launch."""
    name, source = backward_source(gy.dtype, y.dtype, log)
    cols = y.shape[-1]
    rows = y.size // cols
    with launch._device(y):
        dx = launch._cp().empty(y.shape, dtype=gy.dtype)
        if rows:
            launch.count(name)
            launch.raw_kernel(name, source)((rows,), (cuda_rows.threads_for(cols),), (gy, y, dx, np.int64(cols)))
    return dx
