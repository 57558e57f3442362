"""CUDA random draws: Philox4x32-10 uniforms in [0, 1) and standard normals, float32 or float64.

Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
3", SC 2011) maps a 128-bit counter and a 64-bit key to four 32-bit words
(x0, x1, x2, x3) with ten rounds. Value ``i`` of a draw at ``offset`` under
``seed`` is made from one block:

- counter = (low 32 bits of c, high 32 bits of c, 0, 0) with
  c = (offset + i) mod 2**64; key = (low 32 bits of seed, high 32 bits);
- uniform float32: (x0 >> 8) * 2**-24; float64: (x0 * 2**21 + (x1 >> 11)) * 2**-53;
- normal (Box-Muller): sqrt(-2 log u1) * cos(2 pi u2), u1 = the uniform of
  (x0, x1) with one unit of its last place added (in (0, 1]: no log(0)),
  u2 = the uniform of (x1) for float32, of (x2, x3) for float64; computed
  in the value's dtype.

So a draw of ``n`` values uses counters ``offset .. offset + n - 1`` and the
next draw starts at ``offset + n``: the generator's offset counts Philox
blocks. Each kernel comes in two forms: the eager one takes ``seed`` and
``offset`` as arguments; the ``_graph`` one (used inside a CUDA graph
capture) reads the seed and a base offset from a device array ``state``
(``state[0]``, ``state[1]``) and adds its ``offset`` argument to the base, so
a replay draws from wherever the host wrote ``state`` before it.

Compiling, launching and counting: ``cuda_launch.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import cuda_launch as launch

BLOCK = 256
MAX_BLOCKS = 4096  # a grid-stride loop covers the rest
KINDS = ("uniform", "normal")
DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_SUFFIX = {np.dtype(np.float32): ("f32", "float"), np.dtype(np.float64): ("f64", "double")}

_PHILOX = r"""
// Philox4x32-10: four 32-bit words from counter c and key k.
__device__ __forceinline__ void tinyamp_philox(unsigned int c[4], unsigned int k0, unsigned int k1) {
    for (int round = 0; round < 10; ++round) {
        const unsigned long long p0 = 0xD2511F53ull * c[0], p1 = 0xCD9E8D57ull * c[2];
        const unsigned int hi0 = (unsigned int)(p0 >> 32), lo0 = (unsigned int)p0;
        const unsigned int hi1 = (unsigned int)(p1 >> 32), lo1 = (unsigned int)p1;
        c[0] = hi1 ^ c[1] ^ k0; c[1] = lo1; c[2] = hi0 ^ c[3] ^ k1; c[3] = lo0;
        k0 += 0x9E3779B9u; k1 += 0xBB67AE85u;
    }
}
__device__ __forceinline__ float tinyamp_u01_f32(unsigned int a) { return (float)(a >> 8) * 5.9604644775390625e-08f; }
__device__ __forceinline__ double tinyamp_u01_f64(unsigned int a, unsigned int b) {
    return (double)(((unsigned long long)a << 21) | (b >> 11)) * 1.1102230246251565e-16;
}
"""

# The value of block x (four words) in each kind and dtype.
_VALUE = {
    ("uniform", "f32"): "tinyamp_u01_f32(x[0])",
    ("uniform", "f64"): "tinyamp_u01_f64(x[0], x[1])",
    ("normal", "f32"): "sqrtf(-2.0f * logf(tinyamp_u01_f32(x[0]) + 5.9604644775390625e-08f))"
                       " * cosf(6.2831853071795865f * tinyamp_u01_f32(x[1]))",
    ("normal", "f64"): "sqrt(-2.0 * log(tinyamp_u01_f64(x[0], x[1]) + 1.1102230246251565e-16))"
                       " * cos(6.283185307179586 * tinyamp_u01_f64(x[2], x[3]))",
}

_KERNEL = r"""
extern "C" __global__ void {name}({t}* out, const long long n, unsigned long long seed, unsigned long long offset{extra}) {{
{read_state}    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {{
        const unsigned long long c = offset + (unsigned long long)i;
        unsigned int x[4] = {{(unsigned int)c, (unsigned int)(c >> 32), 0u, 0u}};
        tinyamp_philox(x, (unsigned int)seed, (unsigned int)(seed >> 32));
        out[i] = {value};
    }}
}}
"""
_GRAPH_ARGS = ", const unsigned long long* state"
_GRAPH_READ = "    seed = state[0];\n    offset += state[1];\n"


def kernel_name(kind: str, dtype: Any, graph: bool) -> str:
    """The kernel of one kind, dtype and form: tinyamp_philox_{kind}_{f32|f64}[_graph]."""
    return f"tinyamp_philox_{kind}_{_SUFFIX[np.dtype(dtype)][0]}" + ("_graph" if graph else "")


def source(kind: str, dtype: Any, graph: bool) -> str:
    """The RawKernel source of one kind (uniform/normal), dtype and form (eager or graph)."""
    suffix, ctype = _SUFFIX[np.dtype(dtype)]
    return _PHILOX + _KERNEL.format(name=kernel_name(kind, dtype, graph), t=ctype, value=_VALUE[(kind, suffix)],
                                    extra=_GRAPH_ARGS if graph else "", read_state=_GRAPH_READ if graph else "")


def sources() -> list[tuple[str, str]]:
    """(name, source) of every kernel of this module (each kind, dtype and form), for the NVRTC check."""
    return [(kernel_name(k, d, g), source(k, d, g)) for k in KINDS for d in DTYPES for g in (False, True)]


def draw(kind: str, out: Any, seed: int, offset: int, state: Any = None) -> None:
    """Fill the C-contiguous float32/float64 device array ``out`` with ``kind`` values of the Philox stream
    (see the module docstring): counters from ``offset``, or from ``state[1] + offset`` under the seed
    ``state[0]`` when ``state`` (a device uint64 array) is given."""
    if kind not in KINDS:
        raise ValueError(f"philox draw: kind must be one of {KINDS}, got {kind!r}")
    if out.dtype not in DTYPES or not out.flags.c_contiguous:
        raise TypeError(f"philox draw: out must be a C-contiguous float32 or float64 array, got {out.dtype} "
                        f"of shape {out.shape}")
    n = int(out.size)
    if n == 0:
        return
    graph = state is not None
    name = kernel_name(kind, out.dtype, graph)
    kernel = launch.raw_kernel(name, source(kind, out.dtype, graph))
    args = (out.reshape(-1), np.int64(n), np.uint64(seed % 2**64), np.uint64(offset % 2**64))
    launch.count(name)
    kernel((min((n + BLOCK - 1) // BLOCK, MAX_BLOCKS),), (BLOCK,), args + ((state,) if graph else ()))
