"""Compiling, launching and counting tinyamp's own CUDA kernels (the fused kernels' machinery).

The fused kernels (``cuda_scaler.py``: loss scaling; ``cuda_optim.py``: the
optimizer updates) are CuPy ``ElementwiseKernel``/``RawKernel`` sources; this
module compiles each once (NVRTC, cached by name), counts launches by kernel
name (``launches``), and keeps the small device tables the RawKernels read
(pointer tables and chunk tables), reused while they repeat. During a CUDA
graph capture a missing table is written by a kernel carrying its values as
launch arguments (an upload cannot be captured), and the graph holds every
table it reads.

CuPy is only reached through ``tinyamp.backend``, inside the functions:
importing this module never imports CuPy. The seams to CuPy (``_cp``,
``on_gpu``, ``_pointer``, ``_device``) are module functions so that the tests
can run every launch through the CUDA stand-in (tinyamp/cuda_standin, whose
kernels run the same sources compiled with g++).

Same math, same bits as the NumPy paths: the kernel bodies are written in their
operation order and compiled with ``--fmad=false``, so no ``a * b + c`` is
fused into one rounding (NumPy rounds twice). float64 arrays stay on the CuPy
ufunc path of the callers (``fusable``). No launch reads a device value on the
host: a whole training step stays asynchronous.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from .. import backend
from .. import dtypes as dt

FUSED_DTYPES = (dt.float16, dt.bfloat16, dt.float32)
NVRTC_OPTIONS = ("--fmad=false",)  # no contraction of a*b+c: the NumPy paths round each op

launches: dict[str, int] = {}
_kernels: dict[str, Any] = {}
_chunk_tables: dict[tuple, Any] = {}
_pointer_tables: dict[tuple, Any] = {}
POINTER_TABLES_KEPT = 64


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


# Float <-> 16-bit conversions for RawKernels, which see raw 16-bit storage.
# float16 uses the PTX conversion (round to nearest even) so that no CUDA
# header is needed; bfloat16 is float32's upper half, rounded to nearest even.
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

# dtype -> (C storage type in a RawKernel, suffix of its tinyamp_*_to_* conversion)
STORAGE = {dt.float32: ("float", "f32"), dt.float16: ("unsigned short", "f16"),
           dt.bfloat16: ("unsigned short", "bf16")}


# ------------------------------------------------------------------ launching
def count(name: str) -> None:
    """Count one launch of kernel ``name``."""
    launches[name] = launches.get(name, 0) + 1


def elementwise(spec: KernelSpec, *args: Any, size: "int | None" = None) -> None:
    """Launch ``spec`` as an ``ElementwiseKernel`` (compiled on first use)."""
    kernel = _kernels.get(spec.name)
    if kernel is None:
        kernel = _kernels[spec.name] = _cp().ElementwiseKernel(
            spec.in_params, spec.out_params, spec.body, spec.name, options=NVRTC_OPTIONS)
    count(spec.name)
    if size is None:
        kernel(*args)
    else:
        kernel(*args, size=size)


def raw_kernel(name: str, source: str) -> Any:
    """The compiled ``RawKernel`` ``name`` of ``source`` (compiled on first use)."""
    kernel = _kernels.get(name)
    if kernel is None:
        kernel = _kernels[name] = _cp().RawKernel(source, name, options=NVRTC_OPTIONS)
    return kernel


def chunk_table(sizes: list[int], chunk: int) -> np.ndarray:
    """(tensor index, start, end) rows covering every element once, ``chunk`` at a time."""
    rows = [np.zeros((0, 3), dtype=np.int64)]
    for t, n in enumerate(sizes):
        starts = np.arange(0, n, chunk, dtype=np.int64)
        rows.append(np.stack([np.full_like(starts, t), starts, np.minimum(starts + chunk, n)], axis=1))
    return np.concatenate(rows)


def device_chunk_table(dev: Any, sizes: tuple, chunk: int) -> Any:
    """:func:`chunk_table` on the device; sizes repeat every step, so it is uploaded once."""
    key = (dev.id, sizes, chunk)
    table = _chunk_tables.get(key)
    if table is None:
        table = _chunk_tables[key] = _device_constant(chunk_table(list(sizes), chunk))
    return _held_by_capture(table)


def pointer_table(dev: Any, pointers: list[int]) -> Any:
    """The pointers as a device array, reused while they repeat.

    Gradients are fresh arrays every step, but the memory pool hands out the
    same addresses in the same order, so after the first steps the table is
    found here and nothing is uploaded; otherwise it is a small asynchronous
    copy. A table depends only on its key, so a stale entry is never wrong.
    """
    key = (dev.id, tuple(pointers))
    table = _pointer_tables.pop(key, None)
    if table is None:
        table = _device_constant(np.array(pointers, dtype=np.uint64))
        if len(_pointer_tables) >= POINTER_TABLES_KEPT:
            del _pointer_tables[next(iter(_pointer_tables))]  # the least recently used
    _pointer_tables[key] = table
    return _held_by_capture(table)


# Values written by a kernel's arguments, for a capture (which cannot copy from the host): the arguments
# are frozen in the graph, so each replay writes the same table before the kernels that read it.
CONSTANTS_PER_LAUNCH = 16
WRITE_CONSTANTS = r"""
extern "C" __global__ void tinyamp_write_constants(unsigned long long* out, const int n,
        const unsigned long long v0, const unsigned long long v1, const unsigned long long v2,
        const unsigned long long v3, const unsigned long long v4, const unsigned long long v5,
        const unsigned long long v6, const unsigned long long v7, const unsigned long long v8,
        const unsigned long long v9, const unsigned long long v10, const unsigned long long v11,
        const unsigned long long v12, const unsigned long long v13, const unsigned long long v14,
        const unsigned long long v15) {
    const unsigned long long v[16] = {v0, v1, v2, v3, v4, v5, v6, v7, v8, v9, v10, v11, v12, v13, v14, v15};
    const int i = threadIdx.x;
    if (i < n) out[i] = v[i];
}
"""


def write_constants(array: Any, host: np.ndarray) -> None:
    """``array[...] = host`` for a small contiguous device array of 8-byte values.

    Outside a capture an upload. During a CUDA graph capture, which cannot copy
    from the host, kernels that carry the values as launch arguments, 16 at a
    time (a graph keeps launch arguments, so each replay rewrites the same
    values before the kernels that read them).
    """
    host = np.ascontiguousarray(host, dtype=array.dtype).reshape(-1)
    if backend.current_capture() is None:
        array.set(host.reshape(array.shape))
        return
    if host.dtype.itemsize != 8:
        raise TypeError(f"write_constants: 8-byte values only during a capture, got {host.dtype}")
    bits, flat = host.view(np.uint64), array.reshape(-1).view(np.uint64)
    kernel = raw_kernel("tinyamp_write_constants", WRITE_CONSTANTS)
    for start in range(0, bits.size, CONSTANTS_PER_LAUNCH):
        part = bits[start:start + CONSTANTS_PER_LAUNCH]
        values = [np.uint64(v) for v in part] + [np.uint64(0)] * (CONSTANTS_PER_LAUNCH - part.size)
        count("tinyamp_write_constants")
        kernel((1,), (CONSTANTS_PER_LAUNCH,), (flat[start:start + part.size], np.int32(part.size), *values))


def _device_constant(host: np.ndarray) -> Any:
    """``host`` (8-byte values) as a new device array (see :func:`write_constants`)."""
    if backend.current_capture() is None:
        return _cp().asarray(host)
    table = _cp().empty(host.shape, dtype=host.dtype)
    write_constants(table, host)
    return table


def _held_by_capture(table: Any) -> Any:
    """A table a capture's kernels read must outlive the cache entry: the graph holds it too."""
    capture = backend.current_capture()
    if capture is not None:
        capture.keep_alive(table)
    return table


@backend.on_cuda_switch
def _forget_device_state() -> None:
    """Compiled kernels and device tables belong to one CUDA backend (CuPy or the stand-in): drop them."""
    for cache in (_kernels, _chunk_tables, _pointer_tables):
        cache.clear()
