"""Compiling, launching and counting tinyamp's own CUDA kernels (the fused kernels' machinery).

The fused kernels (``cuda_scaler.py``: loss scaling; ``cuda_optim.py``: the
optimizer updates) are CuPy ``ElementwiseKernel``/``RawKernel`` sources; this
module compiles each once (NVRTC, cached by name), counts launches by kernel
name (``launches``), and keeps the small device tables the RawKernels read
(pointer tables and chunk tables), reused while they repeat, and the small
arrays of host values kernels read (``DeviceValues``). During a CUDA graph
capture (``backend.current_capture()``), which cannot copy from the host, a
missing table is written by a kernel carrying its values as launch arguments
and belongs to the graph, and a changed host value is copied when the capture
ends.

CuPy is only reached through ``tinyamp.backend``, inside the functions:
importing this module never imports CuPy. The seams to CuPy (``_cp``,
``on_gpu``, ``_pointer``, ``_device``) are module functions so that the tests
can run every launch through the CUDA stand-in (cupy_standin, whose
kernels run the same sources compiled with g++).

Same math, same bits as the NumPy paths: the kernel bodies are written in their
operation order and compiled with ``--fmad=false``, so no ``a * b + c`` is
fused into one rounding (NumPy rounds twice). float64 arrays stay on the CuPy
ufunc path of the callers (``fusable``). No launch reads a device value on the
host: a whole training step stays asynchronous.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, NamedTuple

import numpy as np

from ... import backend
from ... import dtypes as dt

FUSED_DTYPES = (dt.float16, dt.bfloat16, dt.float32)
NVRTC_OPTIONS = ("--fmad=false",)  # no contraction of a*b+c: the NumPy paths round each op

launches: dict[str, int] = {}
_kernels: dict[str, Any] = {}
_chunk_tables: dict[tuple, Any] = {}
# Pointer tables are kept per thread (CuPy is thread-safe; so is this cache): a table one thread looked
# up must not be rewritten for another thread's pointers before its launch.
_pointer_tables: dict[tuple, dict] = {}  # (thread, device id) -> {pointers: table}, least recently used first
_site_tables: dict[tuple, dict] = {}  # (thread, device id, site) -> {pointers: table}, least recently used first
POINTER_TABLES_KEPT = 64
SITE_TABLES_KEPT = 4


# --------------------------------------------------------------- seams to CuPy
def _cp() -> Any:
    return backend.cupy()


# on_gpu(array): True for a CuPy array, the callers' test for taking the fused path. The backend's
# own function (it reads the active CUDA backend at call time), bound here without a wrapper: the
# test runs several times per op.
on_gpu = backend.is_cupy_array


def _pointer(array: Any) -> int:
    return array.data.ptr


def _device(array: Any) -> Any:
    return array.device


def _upload_into(array: Any, host: np.ndarray) -> None:
    """Copy ``host`` into the existing device ``array`` (same address: a captured graph still reads it).

    During a CUDA graph capture the copy is made when the capture ends: a
    capture cannot copy from the host, and a write recorded in the graph would
    put this value back at every replay, over the newer ones the host writes
    between replays (a scheduler's learning rate).
    """
    capture = backend.current_capture()
    if capture is None:
        array.set(host)
    else:
        capture.upload_after_capture(array, host)


def fusable(*arrays: Any) -> bool:
    """Whether the fused kernels take these dtypes (float64 stays on the CuPy ufunc path)."""
    return all(a.dtype in FUSED_DTYPES for a in arrays)


def fusable_update(w: Any, g: Any) -> bool:
    """Whether an optimizer's fused group kernels take this weight and gradient: GPU arrays of the fused
    dtypes, C-contiguous (the kernels index them as flat arrays); others take the CuPy ufunc path."""
    return (on_gpu(w) and w.dtype in FUSED_DTYPES and g.dtype in FUSED_DTYPES and w.flags.c_contiguous
            and g.flags.c_contiguous)


# ------------------------------------------------------------ kernel sources
class KernelSpec(NamedTuple):
    """An ``ElementwiseKernel``: CuPy's parameter strings, the loop body and the code before the kernel.

    A body may name ``float16``/``bfloat16`` only if a parameter has that type:
    CuPy includes their definitions (``cupy/float16.cuh``, ``cupy/bfloat16.cuh``)
    only then. Otherwise the conversions come from the ``preamble``
    (``F16_CONVERSIONS``/``BF16_CONVERSIONS``); tests/kernels/test_nvrtc_kernels.py
    compiles every kernel with NVRTC and CuPy's headers.
    """

    name: str
    in_params: str
    out_params: str
    body: str
    preamble: str = ""


# Float <-> 16-bit conversions on 16-bit bit patterns, for RawKernels (which see raw 16-bit storage)
# and for ElementwiseKernels without a 16-bit parameter (which have no float16/bfloat16 type).
# float16 uses the PTX conversion (round to nearest even) so that no CUDA
# header is needed; bfloat16 is float32's upper half, rounded to nearest even
# (a NaN stays a NaN with its sign and payload, as ml_dtypes/NumPy keep it).
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
__device__ __forceinline__ unsigned short tinyamp_f64_to_f16(double d) {  // one rounding, as NumPy's astype
    unsigned short h;
    asm("cvt.rn.f16.f64 %0, %1;" : "=h"(h) : "d"(d));
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

# Four consecutive elements as one load or store (16 bytes of float32, 8 of float16/bfloat16), converted to or
# from float32 as the scalar conversions above do; tinyamp_aligned4(p): p may be read or written that way.
VECTOR4 = r"""
__device__ __forceinline__ bool tinyamp_aligned4(const float* p) { return ((unsigned long long)p & 15ull) == 0; }
__device__ __forceinline__ bool tinyamp_aligned4(const unsigned short* p) {
    return ((unsigned long long)p & 7ull) == 0;
}
__device__ __forceinline__ void tinyamp_load4_f32(const float* p, float* v) {
    const float4 a = *reinterpret_cast<const float4*>(p);
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
}
__device__ __forceinline__ void tinyamp_store4_f32(float* p, const float* v) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
}
"""
# The 16-bit loads and stores, one text per format: 4 values packed in a uint2.
_VECTOR4_16 = r"""
__device__ __forceinline__ void tinyamp_load4_FMT(const unsigned short* p, float* v) {
    const uint2 a = *reinterpret_cast<const uint2*>(p);
    v[0] = tinyamp_FMT_to_f32((unsigned short)(a.x & 0xffffu)); v[1] = tinyamp_FMT_to_f32((unsigned short)(a.x >> 16));
    v[2] = tinyamp_FMT_to_f32((unsigned short)(a.y & 0xffffu)); v[3] = tinyamp_FMT_to_f32((unsigned short)(a.y >> 16));
}
__device__ __forceinline__ void tinyamp_store4_FMT(unsigned short* p, const float* v) {
    *reinterpret_cast<uint2*>(p) = make_uint2(
        (unsigned int)tinyamp_f32_to_FMT(v[0]) | ((unsigned int)tinyamp_f32_to_FMT(v[1]) << 16),
        (unsigned int)tinyamp_f32_to_FMT(v[2]) | ((unsigned int)tinyamp_f32_to_FMT(v[3]) << 16));
}
"""
VECTOR4 += "".join(_VECTOR4_16.replace("FMT", fmt) for fmt in ("f16", "bf16"))

# dtype -> (C storage type in a RawKernel, suffix of its tinyamp_*_to_* conversion)
STORAGE = {dt.float32: ("float", "f32"), dt.float16: ("unsigned short", "f16"),
           dt.bfloat16: ("unsigned short", "bf16")}


# ------------------------------------------------------------------ launching
Moved = Callable[[], "tuple[int, int]"]


def count(name: str, moved: "Moved | None" = None) -> None:
    """Count one launch of kernel ``name``, about to be made; ``moved()``: the (read, written) bytes it moves.

    ``moved`` is for a kernel whose array arguments do not say it (it follows a
    pointer table, or updates an array in place): the CUDA stand-in counts it
    for the launch instead of its arguments' bytes. A GPU has no use for it, so
    it is a function, called only on the stand-in.
    """
    launches[name] = launches.get(name, 0) + 1
    if moved is not None:
        counters = backend.provider_counters()
        if counters is not None:
            counters.declare(name, *moved())


def elementwise(spec: KernelSpec, *args: Any, size: "int | None" = None, moved: "Moved | None" = None) -> None:
    """Launch ``spec`` as an ``ElementwiseKernel`` (compiled on first use); ``moved`` as in :func:`count`."""
    kernel = _kernels.get(spec.name)
    if kernel is None:
        kernel = _kernels[spec.name] = _cp().ElementwiseKernel(
            spec.in_params, spec.out_params, spec.body, spec.name, preamble=spec.preamble, options=NVRTC_OPTIONS)
    count(spec.name, moved)
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
        table = _device_constant(chunk_table(list(sizes), chunk))
        if backend.current_capture() is None:  # one a capture writes holds values only once the graph runs
            _chunk_tables[key] = table
    return table


FILL_POINTERS_BATCH = 64  # pointers per launch of the fill kernel (kernel arguments: 4 KiB at most)
FILL_POINTERS_NAME = "tinyamp_fill_pointers"
FILL_POINTERS = ('extern "C" __global__ void tinyamp_fill_pointers(unsigned long long* table, const int count, '
                 + ", ".join(f"const unsigned long long p{k}" for k in range(FILL_POINTERS_BATCH)) + ") {\n"
                 + "    const unsigned long long p[] = {" + ", ".join(f"p{k}" for k in range(FILL_POINTERS_BATCH))
                 + "};\n    for (int k = 0; k < count; ++k) table[k] = p[k];\n}\n")


def pointer_table(dev: Any, pointers: list[int], site: Any = None) -> Any:
    """The pointers as a device array, reused while they repeat.

    Gradients are fresh arrays every step, but the memory pool hands out the
    same addresses in the same order, so after the first steps the table is
    found here. A new set of pointers is written by a kernel that takes them as
    launch arguments (64 a launch): no host-to-device copy, which from pageable
    memory would make the host wait for the stream.

    Each thread keeps its own tables (a table is never rewritten under another
    thread's launch). ``site`` names the call (a kernel and its dtypes): each site keeps its last
    ``SITE_TABLES_KEPT`` tables and rewrites the least recently used one in
    place for a new set, so the tables stop allocating after the first steps
    (a new allocation every step would move the pool's addresses, and with
    them the next step's gradients). Without a site, tables are kept by their
    pointers alone (``POINTER_TABLES_KEPT`` of them).

    A table a CUDA graph capture uses leaves the cache and belongs to the
    graph (``keep_alive``): a replay reads it, so it must never be rewritten
    for other pointers or freed. A table the capture writes is recorded with
    the fill kernel, whose arguments (the pointers) the graph keeps.
    """
    pointers = tuple(pointers)
    capture = backend.current_capture()
    thread = threading.get_ident()
    if site is None:
        tables, kept = _pointer_tables.setdefault((thread, dev.id), {}), POINTER_TABLES_KEPT
    else:
        tables, kept = _site_tables.setdefault((thread, dev.id, site), {}), SITE_TABLES_KEPT
    key = pointers
    table = tables.pop(key, None)
    if table is None:
        if capture is not None:
            table = _cp().empty(max(len(pointers), 1), dtype=np.uint64)  # the graph's own (see the docstring)
        elif len(tables) >= kept:
            table = tables.pop(next(iter(tables)))  # the least recently used: rewritten, or dropped
            if site is None or table.size != max(len(pointers), 1):
                table = None
        if table is None:
            table = _cp().empty(max(len(pointers), 1), dtype=np.uint64)
        _fill_pointers(table, pointers)
    if capture is not None:
        capture.keep_alive(table)  # out of the cache for good: never rewritten for other pointers
    else:
        tables[key] = table
    return table


def _fill_pointers(table: Any, pointers: tuple) -> None:
    """``table[:len(pointers)] = pointers`` (any 8-byte values as uint64 bits) by kernels carrying them as
    arguments: no host copy, so a capture can record it."""
    fill = raw_kernel(FILL_POINTERS_NAME, FILL_POINTERS)
    for start in range(0, len(pointers), FILL_POINTERS_BATCH):
        batch = list(pointers[start:start + FILL_POINTERS_BATCH])
        count(FILL_POINTERS_NAME, lambda: (0, 8 * len(batch)))
        fill((1,), (1,), (table[start:], np.int32(len(batch)),
                          *(np.uint64(p) for p in batch + [0] * (FILL_POINTERS_BATCH - len(batch)))))


def fill_words(array: Any, values: tuple) -> None:
    """``array[:len(values)] = values`` for a uint64 device array, by a kernel launch carrying the values: no
    host copy, so the host never waits and a capture can record it."""
    _fill_pointers(array, tuple(int(v) % 2**64 for v in values))


def _device_constant(host: np.ndarray) -> Any:
    """``host`` (8-byte values) as a new device array: an upload, or during a capture (which cannot copy from
    the host) the fill kernel, recorded with its values; the graph holds the array."""
    capture = backend.current_capture()
    if capture is None:
        return _cp().asarray(host)
    array = _cp().empty(host.shape, dtype=host.dtype)
    _fill_pointers(array.reshape(-1).view(np.uint64), tuple(int(v) for v in host.reshape(-1).view(np.uint64)))
    capture.keep_alive(array)
    return array


class DeviceValues:
    """A few host numbers mirrored in one small device array, uploaded again only when they change.

    Kernels read hyper-parameters (a learning rate a scheduler moves) from here
    rather than as launch arguments, so a steady training step copies nothing
    to the device and a captured CUDA graph sees a new value. The array keeps
    its address; only its contents are rewritten.
    """

    def __init__(self, dtype: Any = np.float64) -> None:
        self.dtype = np.dtype(dtype)
        self._mirrors: dict[int, tuple] = {}  # device id -> (host values, device array)

    def get(self, dev: Any, values: tuple) -> Any:
        """The device array holding ``values`` on ``dev``."""
        mirror = self._mirrors.get(dev.id)
        if mirror is not None and mirror[0] == values:
            return mirror[1]
        host = np.array(values, dtype=self.dtype)
        if mirror is None or mirror[1].shape != host.shape:
            with dev:
                array = _cp().empty(host.shape, dtype=host.dtype)
        else:
            array = mirror[1]
        _upload_into(array, host)
        self._mirrors[dev.id] = (values, array)
        return array


_device_zeros: dict[tuple, Any] = {}


def device_zeros(dev: Any, name: str, size: int, dtype: Any) -> Any:
    """The persistent zeroed array ``name`` on ``dev`` (at least ``size`` elements), made once: a flag, tickets or
    a placeholder that kernels read, or write and put back to zero, launch after launch."""
    array = _device_zeros.get((name, dev.id))
    if array is None or array.size < size:
        with dev:
            array = _device_zeros[(name, dev.id)] = _cp().zeros(size, dtype=dtype)
    return array


def no_inf_found(dev: Any) -> Any:
    """A persistent one-element float32 zero on ``dev``: the ``found_inf`` of a step without AMP."""
    return device_zeros(dev, "no_inf_found", 1, np.float32)


@backend.on_cuda_switch
def _forget_device_state() -> None:
    """Compiled kernels and device arrays belong to one CUDA backend (CuPy or the stand-in): drop them."""
    for cache in (_kernels, _chunk_tables, _pointer_tables, _site_tables, _device_zeros):
        cache.clear()
