"""GELU (exact and tanh) forward and backward as one CUDA launch each: 16-bit or float32 in and out, float32 math.

``kernels/gelu.py`` dispatches CuPy arrays here. Each kernel reads four
elements per load (``cuda_launch.VECTOR4``: 8 bytes of float16/bfloat16, 16
of float32) when the arrays are aligned for it, with a scalar loop for the
tail, widens them exactly to float32, applies the formula and rounds once to
the output's dtype. The formulas are PyTorch's CUDA ones, operation for
operation (``aten/src/ATen/native/cuda/ActivationGeluKernel.cu``), with the
device's ``erff``/``expf``/``tanhf``::

    exact:  y = (x * 0.5) * (1 + erf(x * M_SQRT1_2))
            dx = dy * (cdf + x * pdf),  cdf = 0.5 * (1 + erf(x * M_SQRT1_2)),  pdf = exp(-0.5 * x * x) * kBeta
    tanh:   inner = kBeta * (x + kKappa * x^3),  y = 0.5 * x * (1 + tanh(inner))
            dx = dy * (0.5 (1 + t) + 0.5 x (1 - t^2) kBeta (1 + 3 kKappa x^2)),  t = tanh(inner)

(the two kBetas are PyTorch's: 1/sqrt(2 pi) for the exact density, sqrt(2/pi)
for the tanh form; the constants are float32 roundings of the double values).
Compiled with ``--fmad=false`` (``cuda_launch.NVRTC_OPTIONS``): each product
and sum rounds on its own. The device's ``erff`` is within 2 float32 ulp
(``tanhf`` 2, ``expf`` 2; CUDA's programming guide), so a 16-bit result is the
correctly rounded one except within a few float32 ulp of a 16-bit tie.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import numpy as np

from . import cuda_launch as launch

BLOCK = 256
MAX_BLOCKS = 65535
VECTORS_PER_THREAD = 4
MODES = ("none", "tanh")


def _f32(value: float) -> str:
    """A float32 C literal holding the float32 rounding of ``value`` exactly (9 significant digits)."""
    return f"{float(np.float32(value)):.9e}f"


_CONSTANTS = (f"#define TINYAMP_SQRT1_2 {_f32(math.sqrt(0.5))}\n"
              f"#define TINYAMP_GELU_PDF {_f32(2 / math.sqrt(math.pi) * math.sqrt(0.5) * 0.5)}\n"
              f"#define TINYAMP_TANH_BETA {_f32(math.sqrt(2) * 2 / math.sqrt(math.pi) * 0.5)}\n"
              f"#define TINYAMP_TANH_KAPPA {_f32(0.044715)}\n")

_FORMULAS = _CONSTANTS + r"""
__device__ __forceinline__ float tinyamp_gelu_none(float x) {
    return (x * 0.5f) * (1.0f + erff(x * TINYAMP_SQRT1_2));
}
__device__ __forceinline__ float tinyamp_gelu_tanh(float x) {
    const float cube = x * x * x;
    const float inner = TINYAMP_TANH_BETA * (x + TINYAMP_TANH_KAPPA * cube);
    return 0.5f * x * (1.0f + tanhf(inner));
}
__device__ __forceinline__ float tinyamp_gelu_backward_none(float dy, float x) {
    const float cdf = 0.5f * (1.0f + erff(x * TINYAMP_SQRT1_2));
    const float pdf = expf(-0.5f * x * x) * TINYAMP_GELU_PDF;
    return dy * (cdf + x * pdf);
}
__device__ __forceinline__ float tinyamp_gelu_backward_tanh(float dy, float x) {
    const float sq = x * x;
    const float cube = sq * x;
    const float inner = TINYAMP_TANH_BETA * (x + TINYAMP_TANH_KAPPA * cube);
    const float t = tanhf(inner);
    const float left = 0.5f * x;
    const float right = 1.0f + t;
    const float left_derivative = 0.5f * right;
    const float tanh_derivative = 1.0f - t * t;
    const float inner_derivative = TINYAMP_TANH_BETA * (1.0f + 3.0f * TINYAMP_TANH_KAPPA * sq);
    const float right_derivative = left * tanh_derivative * inner_derivative;
    return dy * (left_derivative + right_derivative);
}
"""

_FORWARD = r"""
extern "C" __global__ void {fn}(const {s}* __restrict__ x, {s}* __restrict__ y, const long long n,
        const long long nvec) {{
    // nvec: groups of four elements loaded and stored as one vector; the rest one at a time.
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (long long v = first; v < nvec; v += stride) {{
        float f[4];
        tinyamp_load4_{c}(x + 4 * v, f);
        for (int k = 0; k < 4; ++k) f[k] = tinyamp_gelu_{mode}(f[k]);
        tinyamp_store4_{c}(y + 4 * v, f);
    }}
    for (long long i = nvec * 4 + first; i < n; i += stride)
        y[i] = tinyamp_f32_to_{c}(tinyamp_gelu_{mode}(tinyamp_{c}_to_f32(x[i])));
}}
"""

_BACKWARD = r"""
extern "C" __global__ void {fn}(const {sg}* __restrict__ grad, const {sx}* __restrict__ x, {sg}* __restrict__ out,
        const long long n, const long long nvec) {{
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (long long v = first; v < nvec; v += stride) {{
        float g[4], f[4];
        tinyamp_load4_{cg}(grad + 4 * v, g);
        tinyamp_load4_{cx}(x + 4 * v, f);
        for (int k = 0; k < 4; ++k) f[k] = tinyamp_gelu_backward_{mode}(g[k], f[k]);
        tinyamp_store4_{cg}(out + 4 * v, f);
    }}
    for (long long i = nvec * 4 + first; i < n; i += stride)
        out[i] = tinyamp_f32_to_{cg}(tinyamp_gelu_backward_{mode}(tinyamp_{cg}_to_f32(grad[i]), tinyamp_{cx}_to_f32(x[i])));
}}
"""

_PRELUDE = launch.F16_CONVERSIONS + launch.BF16_CONVERSIONS + launch.VECTOR4 + _FORMULAS


def _suffix(dtype: Any) -> str:
    return launch.STORAGE[np.dtype(dtype)][1]


def _storage(dtype: Any) -> str:
    return launch.STORAGE[np.dtype(dtype)][0]


@lru_cache(maxsize=None)
def forward_source(dtype: Any, approximate: str) -> tuple[str, str]:
    """(name, source) of GELU's forward for ``dtype`` in and out."""
    c = _suffix(dtype)
    fn = f"tinyamp_gelu_{approximate}_{c}"
    return fn, _PRELUDE + _FORWARD.format(fn=fn, s=_storage(dtype), c=c, mode=approximate)


@lru_cache(maxsize=None)
def backward_source(gy_dtype: Any, x_dtype: Any, approximate: str) -> tuple[str, str]:
    """(name, source) of GELU's backward: ``gy`` and the result in ``gy_dtype``, ``x`` in ``x_dtype``."""
    cg, cx = _suffix(gy_dtype), _suffix(x_dtype)
    fn = f"tinyamp_gelu_backward_{approximate}_{cg}_{cx}"
    return fn, _PRELUDE + _BACKWARD.format(fn=fn, sg=_storage(gy_dtype), sx=_storage(x_dtype), cg=cg, cx=cx,
                                           mode=approximate)


def sources() -> list[tuple[str, str]]:
    """(name, source) of every kernel of this module, for the NVRTC check."""
    fused = launch.FUSED_DTYPES
    return ([forward_source(d, m) for d in fused for m in MODES]
            + [backward_source(g, x, m) for g in fused for x in fused for m in MODES])


def takes(*arrays: Any) -> bool:
    """Whether these kernels take the arrays: GPU arrays of the fused dtypes, C-contiguous, one shape."""
    first = arrays[0]
    return (launch.on_gpu(first) and all(a.dtype in launch.FUSED_DTYPES and a.flags.c_contiguous
                                         and a.shape == first.shape for a in arrays))


def _vectors(n: int, *arrays: Any) -> int:
    """Whole four-element groups when every array is aligned for a four-element load, else 0."""
    aligned = all(launch._pointer(a) % (4 * a.itemsize) == 0 for a in arrays)
    return n // 4 if aligned else 0


def _grid(work: int) -> tuple[int]:
    per_block = BLOCK * VECTORS_PER_THREAD
    return (max(1, min(MAX_BLOCKS, (work + per_block - 1) // per_block)),)


def gelu(x: Any, approximate: str) -> Any:
    """GELU of a C-contiguous GPU array in its own dtype, one launch (``approximate``: "none" or "tanh")."""
    name, source = forward_source(x.dtype, approximate)
    with launch._device(x):
        y = launch._cp().empty(x.shape, dtype=x.dtype)
        n = x.size
        nvec = _vectors(n, x, y)
        launch.count(name)
        launch.raw_kernel(name, source)(_grid(max(nvec, n - 4 * nvec)), (BLOCK,), (x, y, np.int64(n), np.int64(nvec)))
    return y


def gelu_backward(gy: Any, x: Any, approximate: str) -> Any:
    """``gy * gelu'(x)`` in ``gy``'s dtype, one launch; both C-contiguous GPU arrays of one shape."""
    name, source = backward_source(gy.dtype, x.dtype, approximate)
    with launch._device(gy):
        dx = launch._cp().empty(gy.shape, dtype=gy.dtype)
        n = gy.size
        nvec = _vectors(n, gy, x, dx)
        launch.count(name)
        launch.raw_kernel(name, source)(_grid(max(nvec, n - 4 * nvec)), (BLOCK,),
                                        (gy, x, dx, np.int64(n), np.int64(nvec)))
    return dx
