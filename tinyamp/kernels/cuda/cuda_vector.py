"""CUDA kernels at memory speed: ReLU forward and backward, conversions, a column sum.

Each is a ``RawKernel`` whose threads move 16 bytes per load and store
(``uint4``: eight float16/bfloat16 or four float32 values; the widening
conversions load 8 and store 16) when every array it touches is aligned for
it, with a scalar loop for the elements after the last
full vector (and for everything when an array is not aligned). A grid-stride
loop gives each thread several vectors (``VECTORS_PER_THREAD``). No float64
arithmetic and no CuPy type (RawKernels see 16-bit storage as ``unsigned short``
and convert with ``cuda_launch``'s PTX/bit conversions).

- :func:`relu`: ``maximum(x, 0)`` on the bits, as the CPU path
  (``elementwise_cpu.relu_lowp``) gives it: a negative number or -0.0 becomes
  +0.0, everything else is kept bit for bit (a NaN with its sign and payload).
  NumPy's float32 and bfloat16 ``maximum`` agree; its float16 loop, which the
  stand-in used for CuPy's ``maximum``, keeps -0.0.
- :func:`relu_backward`: ``gy * (y > 0)`` computed in float32 and rounded to
  ``gy``'s dtype, the rounding sequence of ``cuda_epilogue.relu_backward``
  (same bits; an inf/nan in ``gy`` at a dead unit gives nan).
- :func:`convert`: float32 <-> float16/bfloat16 (and between the two),
  ``astype``'s bits (a bfloat16 NaN may carry another payload than CuPy's, as
  ``cuda_launch``'s conversion notes). Narrowing and 16 <-> 16 bits: eight
  elements a step (16-byte loads and stores, both arrays 16-byte aligned).
  Widening (16 bits to float32): four elements a step, an 8-byte load and one
  16-byte store (``cuda_launch.VECTOR4``), so a warp's loads and its stores
  are each one contiguous run (256 and 512 bytes); it needs the input 8-byte
  and the output 16-byte aligned.
- :func:`column_sum`: a bias gradient, ``g.sum(axis=0)`` accumulated in float32
  in one launch: the rows in chunks of ``SUM_ROWS``, each chunk summed row by
  row into a float32 partial; the last chunk of a column to finish (an integer
  ticket per column group) adds the partials in chunk order and rounds once,
  to the output dtype or through the gradient's 16-bit dtype. With at most
  ``SUM_ROWS`` rows this is NumPy's order for a C-contiguous array with two or
  more columns (row by row into each column), bit for bit; with more rows the
  order is the chunked one (a GPU needs the rows split to read at memory speed;
  CuPy's own reduction order was not NumPy's either).

Compiling, launching and counting: ``cuda_launch.py``.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from ... import dtypes as dt
from . import cuda_launch as launch

BLOCK = 256
VECTORS_PER_THREAD = 4  # 64 bytes a thread at least, before the grid-stride loop repeats
MAX_BLOCKS = 65535
SUM_ROWS = 128  # rows per chunk of the column sum
ALIGN = 16  # bytes of a uint4

# dtype -> (storage type, conversion suffix, bits type, elements per uint4). A kernel works on an element's
# bits (unsigned short, or unsigned int for float32, whose storage stays float: CuPy passes float32 arrays
# to float pointers) and converts them with tinyamp_{suffix}_to_f32 / tinyamp_f32_to_{suffix}.
_STORAGE = {dt.float16: ("unsigned short", "f16", "unsigned short", 8),
            dt.bfloat16: ("unsigned short", "bf16", "unsigned short", 8),
            dt.float32: ("float", "u32", "unsigned int", 4)}
VECTOR_DTYPES = tuple(_STORAGE)

_PRELUDE = launch.F16_CONVERSIONS + launch.BF16_CONVERSIONS + r"""
// A uint4's 32-bit words as the 16-bit or 32-bit values they hold (the low half first: little-endian).
__device__ __forceinline__ unsigned int tinyamp_lo(unsigned int u) { return u & 0xffffu; }
__device__ __forceinline__ unsigned int tinyamp_hi(unsigned int u) { return u >> 16; }
__device__ __forceinline__ float tinyamp_u32_to_f32(unsigned int u) { return __uint_as_float(u); }
__device__ __forceinline__ unsigned int tinyamp_f32_to_u32(float f) { return __float_as_uint(f); }
__device__ __forceinline__ unsigned short tinyamp_bits(unsigned short h) { return h; }
__device__ __forceinline__ unsigned int tinyamp_bits(float f) { return __float_as_uint(f); }
__device__ __forceinline__ void tinyamp_put(unsigned short* p, unsigned short h) { *p = h; }
__device__ __forceinline__ void tinyamp_put(float* p, unsigned int u) { *p = __uint_as_float(u); }
"""

# {fn}_word maps one 32-bit word of a uint4: two 16-bit elements, or one float32.
_WORD_UNARY = {
    8: "__device__ __forceinline__ unsigned int {fn}_word(unsigned int a) {{\n"
       "    return (unsigned int){fn}_one((unsigned short)tinyamp_lo(a))\n"
       "        | ((unsigned int){fn}_one((unsigned short)tinyamp_hi(a)) << 16);\n}}\n",
    4: "__device__ __forceinline__ unsigned int {fn}_word(unsigned int a) {{ return {fn}_one(a); }}\n",
}
_WORD_BINARY = {
    8: "__device__ __forceinline__ unsigned int {fn}_word(unsigned int a, unsigned int b) {{\n"
       "    return (unsigned int){fn}_one((unsigned short)tinyamp_lo(a), (unsigned short)tinyamp_lo(b))\n"
       "        | ((unsigned int){fn}_one((unsigned short)tinyamp_hi(a), (unsigned short)tinyamp_hi(b)) << 16);\n}}\n",
    4: "__device__ __forceinline__ unsigned int {fn}_word(unsigned int a, unsigned int b) {{ return {fn}_one(a, b); }}\n",
}

# relu on the bits: a set sign bit on anything but a NaN (magnitude above the infinity's) gives +0.0.
_RELU_ONE = {
    "f16": "return ((h & 0x8000u) && (h & 0x7fffu) <= 0x7c00u) ? 0u : h;",
    "bf16": "return ((h & 0x8000u) && (h & 0x7fffu) <= 0x7f80u) ? 0u : h;",
    "u32": "return ((h & 0x80000000u) && (h & 0x7fffffffu) <= 0x7f800000u) ? 0u : h;",
}

_UNARY = r"""
__device__ __forceinline__ {b} {fn}_one({b} h) {{
    {body}
}}
{word}
extern "C" __global__ void {fn}(const {s}* x, {s}* y, const long long n, const long long nvec) {{
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const uint4* xv = reinterpret_cast<const uint4*>(x);
    uint4* yv = reinterpret_cast<uint4*>(y);
    for (long long v = first; v < nvec; v += stride) {{
        uint4 a = xv[v];
        a.x = {fn}_word(a.x); a.y = {fn}_word(a.y); a.z = {fn}_word(a.z); a.w = {fn}_word(a.w);
        yv[v] = a;
    }}
    for (long long i = nvec * {per} + first; i < n; i += stride) tinyamp_put(y + i, {fn}_one(tinyamp_bits(x[i])));
}}
"""

_BINARY = r"""
__device__ __forceinline__ {b} {fn}_one({b} g, {b} h) {{
    {body}
}}
{word}
extern "C" __global__ void {fn}(const {s}* grad, const {s}* x, {s}* y, const long long n, const long long nvec) {{
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const uint4* gv = reinterpret_cast<const uint4*>(grad);
    const uint4* xv = reinterpret_cast<const uint4*>(x);
    uint4* yv = reinterpret_cast<uint4*>(y);
    for (long long v = first; v < nvec; v += stride) {{
        const uint4 g = gv[v];
        uint4 a = xv[v];
        a.x = {fn}_word(g.x, a.x); a.y = {fn}_word(g.y, a.y); a.z = {fn}_word(g.z, a.z); a.w = {fn}_word(g.w, a.w);
        yv[v] = a;
    }}
    for (long long i = nvec * {per} + first; i < n; i += stride)
        tinyamp_put(y + i, {fn}_one(tinyamp_bits(grad[i]), tinyamp_bits(x[i])));
}}
"""

# dx = float32(gy) * (float32(y) > 0 ? 1 : 0), rounded to gy's dtype.
_RELU_BACKWARD_ONE = "return tinyamp_f32_to_{c}(tinyamp_{c}_to_f32(g) * (tinyamp_{c}_to_f32(h) > 0.0f ? 1.0f : 0.0f));"


# One thread per (column group, chunk of rows): a group is `per` adjacent columns read as one uint4 when
# vec, else one column. The chunk's sum goes to partial[chunk][column]; the group's last chunk to finish
# adds the partials in chunk order and writes out[column] (mode 0: rounded to the 16-bit out dtype;
# 1: float32; 2: float32 rounded through the gradient's 16-bit dtype).
_COLUMN_SUM = r"""
extern "C" __global__ void {fn}(const {s}* g, float* partial, int* tickets, {o}* out, const long long rows,
        const long long cols, const long long chunk_rows, const int nchunks, const int vec) {{
    const long long width = vec ? {per} : 1;
    const long long groups = (cols + width - 1) / width;
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= groups * nchunks) return;
    const long long group = t % groups, chunk = t / groups;
    const long long c0 = group * width;
    const long long r0 = chunk * chunk_rows;
    const long long r1 = r0 + chunk_rows < rows ? r0 + chunk_rows : rows;
    float acc[{per}];
    for (int k = 0; k < {per}; ++k) acc[k] = 0.0f;  // NumPy starts from the identity: -0.0 rows sum to +0.0
    if (vec) {{
#pragma unroll 8
        for (long long r = r0; r < r1; ++r) {{  // unrolled: eight rows' loads in flight, summed in row order
            const uint4 a = *reinterpret_cast<const uint4*>(g + r * cols + c0);
            const unsigned int w[4] = {{a.x, a.y, a.z, a.w}};
            float v[{per}];
            {unpack}
            for (int k = 0; k < {per}; ++k) acc[k] = acc[k] + v[k];  // row by row
        }}
    }} else {{
#pragma unroll 8
        for (long long r = r0; r < r1; ++r) {{
            const float v = tinyamp_{c}_to_f32(tinyamp_bits(g[r * cols + c0]));
            acc[0] = acc[0] + v;
        }}
    }}
    for (int k = 0; k < {per}; ++k)  // constant bounds keep acc in registers
        if (k < width) partial[chunk * cols + c0 + k] = acc[k];
    __threadfence();
    if (atomicAdd(&tickets[group], 1) != nchunks - 1) return;
    tickets[group] = 0;
    // The partials in chunk order, each column its own chain: a column group's loads are issued together.
    const volatile float* const seen = partial;  // the other chunks' writes: read past the cache
    float total[{per}];
    for (int k = 0; k < {per}; ++k) total[k] = k < width ? seen[c0 + k] : 0.0f;
#pragma unroll 4
    for (long long q = 1; q < nchunks; ++q) {{
        float v[{per}];
        for (int k = 0; k < {per}; ++k) v[k] = k < width ? seen[q * cols + c0 + k] : 0.0f;
        for (int k = 0; k < {per}; ++k) total[k] = total[k] + v[k];
    }}
    for (int k = 0; k < {per}; ++k) {{
        const float s = total[k];
        if (k < width) out[c0 + k] = {store};
    }}
}}
"""
_UNPACK = {
    8: "for (int k = 0; k < 4; ++k) { v[2 * k] = tinyamp_{c}_to_f32((unsigned short)tinyamp_lo(w[k])); "
       "v[2 * k + 1] = tinyamp_{c}_to_f32((unsigned short)tinyamp_hi(w[k])); }",
    4: "for (int k = 0; k < 4; ++k) v[k] = tinyamp_u32_to_f32(w[k]);",
}
_STORE = {"round": "tinyamp_f32_to_{c}(s)", "float32": "s", "through": "tinyamp_{c}_to_f32(tinyamp_f32_to_{c}(s))"}
COLUMN_SUM_MODES = tuple(_STORE)


# Conversions, eight elements a step: 32 bytes of float32 (two uint4) or 16 bytes of 16-bit values (one).
_LOAD8 = {
    "f32": "    const uint4* q = reinterpret_cast<const uint4*>(x) + 2 * v;\n"
           "    const uint4 a = q[0], b = q[1];\n"
           "    const unsigned int w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};\n"
           "    for (int k = 0; k < 8; ++k) f[k] = __uint_as_float(w[k]);\n",
    "16": "    const uint4 a = reinterpret_cast<const uint4*>(x)[v];\n"
          "    const unsigned int w[4] = {a.x, a.y, a.z, a.w};\n"
          "    for (int k = 0; k < 4; ++k) {\n"
          "        f[2 * k] = tinyamp_{a}_to_f32((unsigned short)tinyamp_lo(w[k]));\n"
          "        f[2 * k + 1] = tinyamp_{a}_to_f32((unsigned short)tinyamp_hi(w[k]));\n    }\n",
}
_STORE8 = {
    "f32": "    uint4* q = reinterpret_cast<uint4*>(y) + 2 * v;\n"
           "    q[0] = make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]), "
           "__float_as_uint(f[3]));\n"
           "    q[1] = make_uint4(__float_as_uint(f[4]), __float_as_uint(f[5]), __float_as_uint(f[6]), "
           "__float_as_uint(f[7]));\n",
    "16": "    unsigned int o[4];\n"
          "    for (int k = 0; k < 4; ++k)\n"
          "        o[k] = (unsigned int)tinyamp_f32_to_{b}(f[2 * k]) | ((unsigned int)tinyamp_f32_to_{b}(f[2 * k + 1]) << 16);\n"
          "    reinterpret_cast<uint4*>(y)[v] = make_uint4(o[0], o[1], o[2], o[3]);\n",
}
_CONVERT = r"""
extern "C" __global__ void {fn}(const {sa}* __restrict__ x, {sb}* __restrict__ y, const long long n,
        const long long nvec) {{
    // nvec: groups of eight elements read and written as whole uint4s; the rest one at a time.
    // x and y never overlap (restrict), so a thread's next loads need not wait for its stores.
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
#pragma unroll 4
    for (long long v = first; v < nvec; v += stride) {{
        float f[8];
{load}{store}    }}
    for (long long i = nvec * 8 + first; i < n; i += stride) y[i] = tinyamp_f32_to_{b}(tinyamp_{a}_to_f32(x[i]));
}}
"""
# Widening, four elements a step: one uint2 load (8 bytes of 16-bit values) and one float4 store (16 bytes), so
# consecutive threads load and store consecutive bytes. The same per-element conversion as _CONVERT's.
_WIDEN = r"""
extern "C" __global__ void {fn}(const unsigned short* __restrict__ x, float* __restrict__ y, const long long n,
        const long long nvec) {{
    // nvec: groups of four elements loaded as a uint2 and stored as a float4; the rest one at a time.
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
#pragma unroll 4
    for (long long v = first; v < nvec; v += stride) {{
        float f[4];
        tinyamp_load4_{a}(x + 4 * v, f);
        tinyamp_store4_f32(y + 4 * v, f);
    }}
    for (long long i = nvec * 4 + first; i < n; i += stride) y[i] = tinyamp_f32_to_f32(tinyamp_{a}_to_f32(x[i]));
}}
"""
_CONVERT_NAME = {dt.float32: "f32", dt.float16: "f16", dt.bfloat16: "bf16"}
CONVERT_PAIRS = tuple((a, b) for a in _CONVERT_NAME for b in _CONVERT_NAME if a != b)
WIDENING_PAIRS = tuple((a, b) for a, b in CONVERT_PAIRS if b == dt.float32)


@lru_cache(maxsize=None)
def convert_step(source: Any, target: Any) -> tuple[int, int, int]:
    """(elements a step, input alignment, output alignment in bytes) of the conversion kernel of this pair."""
    return (4, 8, ALIGN) if (np.dtype(source), np.dtype(target)) in WIDENING_PAIRS else (8, ALIGN, ALIGN)


@lru_cache(maxsize=None)
def convert_source(source: Any, target: Any, *, eight: bool = False) -> tuple[str, str]:
    """(name, source) of the conversion from ``source`` to ``target`` dtype (two of float32/16/bfloat16).

    ``eight``: a widening pair in the eight-elements-a-step layout (a 16-byte
    load, two 16-byte stores), the layout the four-a-step kernel replaced, kept
    under its own name (``..._by8``) for ``bench_gpu`` to time beside it.
    """
    a, b = _CONVERT_NAME[np.dtype(source)], _CONVERT_NAME[np.dtype(target)]
    fn = f"tinyamp_convert_{a}_{b}"
    if convert_step(source, target)[0] == 4:
        if not eight:
            return fn, _PRELUDE + launch.VECTOR4 + _WIDEN.format(fn=fn, a=a)
        fn += "_by8"
    load = _LOAD8["f32" if a == "f32" else "16"].replace("{a}", a)
    store = _STORE8["f32" if b == "f32" else "16"].replace("{b}", b)
    return fn, _PRELUDE + _CONVERT.format(fn=fn, sa=_STORAGE[np.dtype(source)][0], sb=_STORAGE[np.dtype(target)][0],
                                          a=a, b=b, load=load, store=store)


@lru_cache(maxsize=None)
def relu_source(dtype: Any) -> tuple[str, str]:
    """(name, source) of the vectorised ReLU for ``dtype``."""
    s, c, b, per = _STORAGE[np.dtype(dtype)]
    fn = f"tinyamp_relu_{c if c != 'u32' else 'f32'}"
    return fn, _PRELUDE + _UNARY.format(fn=fn, s=s, b=b, per=per, body=_RELU_ONE[c],
                                        word=_WORD_UNARY[per].format(fn=fn))


@lru_cache(maxsize=None)
def relu_backward_source(dtype: Any) -> tuple[str, str]:
    """(name, source) of the vectorised ReLU backward for ``gy`` and ``y`` of ``dtype``."""
    s, c, b, per = _STORAGE[np.dtype(dtype)]
    fn = f"tinyamp_relu_backward_{c if c != 'u32' else 'f32'}"
    return fn, _PRELUDE + _BINARY.format(fn=fn, s=s, b=b, per=per, body=_RELU_BACKWARD_ONE.replace("{c}", c),
                                         word=_WORD_BINARY[per].format(fn=fn))


@lru_cache(maxsize=None)
def column_sum_source(dtype: Any, mode: str) -> tuple[str, str]:
    """(name, source) of the column sum of a ``dtype`` gradient, finished as ``mode`` says."""
    s, c, _, per = _STORAGE[np.dtype(dtype)]
    if mode not in _STORE or (mode != "float32" and c == "u32"):
        raise ValueError(f"column_sum: no mode {mode!r} for {np.dtype(dtype).name}")
    fn = f"tinyamp_column_sum_{c if c != 'u32' else 'f32'}_{mode}"
    return fn, _PRELUDE + _COLUMN_SUM.format(fn=fn, s=s, c=c, per=per, o=s if mode == "round" else "float",
                                             store=_STORE[mode].replace("{c}", c),
                                             unpack=_UNPACK[per].replace("{c}", c))


def sources() -> list[tuple[str, str]]:
    """(name, source) of every kernel of this module (each dtype and mode), for the NVRTC check."""
    out = []
    for dtype in VECTOR_DTYPES:
        out += [relu_source(dtype), relu_backward_source(dtype)]
        out += [column_sum_source(dtype, mode) for mode in COLUMN_SUM_MODES
                if mode == "float32" or dtype != dt.float32]
    out += [convert_source(a, b) for a, b in CONVERT_PAIRS]
    out += [convert_source(a, b, eight=True) for a, b in WIDENING_PAIRS]
    return out


# ------------------------------------------------------------------ launching
def aligned(*arrays: Any) -> bool:
    """Every array starts on a 16-byte boundary (uint4 loads and stores are legal)."""
    return all(launch._pointer(a) % ALIGN == 0 for a in arrays)


def _grid(work: int) -> tuple[int]:
    per_block = BLOCK * VECTORS_PER_THREAD
    return (max(1, min(MAX_BLOCKS, (work + per_block - 1) // per_block)),)


def takes(*arrays: Any) -> bool:
    """Whether these kernels take the arrays: on a GPU, one dtype of ``VECTOR_DTYPES``, C-contiguous."""
    first = arrays[0]
    return (launch.on_gpu(first) and first.dtype in VECTOR_DTYPES
            and all(a.dtype == first.dtype and a.flags.c_contiguous for a in arrays))


def relu(x: Any) -> Any:
    """``maximum(x, 0)`` as a new array (one launch); ``x`` C-contiguous, a ``VECTOR_DTYPES`` dtype."""
    name, source = relu_source(x.dtype)
    per = _STORAGE[x.dtype][3]
    with launch._device(x):
        y = launch._cp().empty(x.shape, dtype=x.dtype)
        n = x.size
        nvec = n // per if aligned(x, y) else 0
        launch.count(name)
        launch.raw_kernel(name, source)(_grid(max(nvec, n - nvec * per)), (BLOCK,),
                                        (x, y, np.int64(n), np.int64(nvec)))
    return y


def relu_backward(gy: Any, y: Any) -> Any:
    """``gy * (y > 0)`` in ``gy``'s dtype (one launch); both C-contiguous, one ``VECTOR_DTYPES`` dtype."""
    name, source = relu_backward_source(gy.dtype)
    per = _STORAGE[gy.dtype][3]
    with launch._device(gy):
        out = launch._cp().empty(gy.shape, dtype=gy.dtype)
        n = gy.size
        nvec = n // per if aligned(gy, y, out) else 0
        launch.count(name)
        launch.raw_kernel(name, source)(_grid(max(nvec, n - nvec * per)), (BLOCK,),
                                        (gy, y, out, np.int64(n), np.int64(nvec)))
    return out


def convert_vectors(x: Any, y: Any, *, eight: bool = False) -> int:
    """How many whole steps the conversion kernel of ``x`` into ``y`` takes as vectors (0: the scalar loop only,
    when an array is not aligned for them)."""
    per, x_align, y_align = (8, ALIGN, ALIGN) if eight else convert_step(x.dtype, y.dtype)
    return x.size // per if launch._pointer(x) % x_align == 0 and launch._pointer(y) % y_align == 0 else 0


def convert(x: Any, dtype: Any, *, eight: bool = False) -> Any:
    """``x.astype(dtype)`` for a C-contiguous ``x`` and a pair of ``CONVERT_PAIRS`` (one launch): float32 to
    16 bits rounds to nearest even once, as CuPy's astype; 16 bits to float32 is exact; between the two
    16-bit formats through float32 (exact), then one rounding. ``eight``: as :func:`convert_source`'s."""
    dtype = np.dtype(dtype)
    eight = eight and (x.dtype, dtype) in WIDENING_PAIRS
    name, source = convert_source(x.dtype, dtype, eight=eight)
    per = 8 if eight else convert_step(x.dtype, dtype)[0]
    with launch._device(x):
        y = launch._cp().empty(x.shape, dtype=dtype)
        n = x.size
        nvec = convert_vectors(x, y, eight=eight)
        launch.count(name)
        launch.raw_kernel(name, source)(_grid(max(nvec, n - nvec * per)), (BLOCK,), (x, y, np.int64(n), np.int64(nvec)))
    return y


def _ticket_array(dev: Any, groups: int) -> Any:
    """The device's persistent, zeroed tickets (the kernel puts each back to 0), one per column group."""
    return launch.device_zeros(dev, "column_sum_tickets", max(groups, 4096), np.int32)


def column_sum(g: Any, out_dtype: Any, *, through: bool = False, chunk_rows: int = SUM_ROWS) -> Any:
    """``g.sum(axis=0)`` of a 2-D C-contiguous ``g`` (rows >= 1, cols >= 2) accumulated in float32, one launch.

    The result is ``out_dtype``: ``g``'s own 16-bit dtype (rounded once),
    float32, or with ``through`` float32 rounded through ``g``'s 16-bit dtype
    (a float32 parameter's gradient that autocast lowered). ``chunk_rows``
    (rows per chunk, which sets the summation order) is for benchmarks to
    compare chunk sizes; tinyamp's ops use ``SUM_ROWS``.
    """
    if chunk_rows < 1:
        raise ValueError(f"column_sum: chunk_rows must be at least 1, got {chunk_rows}")
    rows, cols = g.shape
    if cols < 2:  # NumPy sums a single column pairwise, not row by row
        raise ValueError(f"column_sum: needs two or more columns, got {g.dtype.name} {list(g.shape)}")
    out_dtype = np.dtype(out_dtype)
    mode = "through" if through else "float32" if out_dtype == dt.float32 else "round"
    if (mode == "round" and out_dtype != g.dtype) or (through and (out_dtype != dt.float32 or g.dtype == dt.float32)):
        raise ValueError(f"column_sum: cannot sum {g.dtype.name} {list(g.shape)} into {out_dtype.name}"
                         + (" through 16 bits" if through else ""))
    name, source = column_sum_source(g.dtype, mode)
    per = _STORAGE[g.dtype][3]
    vec = cols % per == 0 and aligned(g)
    groups = cols // per if vec else cols
    nchunks = (rows + chunk_rows - 1) // chunk_rows
    dev = launch._device(g)
    with dev:
        cp = launch._cp()
        out = cp.empty((cols,), dtype=out_dtype)
        partial = cp.empty((nchunks, cols), dtype=np.float32)
        tickets = _ticket_array(dev, groups)
        threads = groups * nchunks
        launch.count(name, lambda: (g.nbytes + partial.nbytes + 4 * groups, partial.nbytes + out.nbytes + 4 * groups))
        launch.raw_kernel(name, source)(((threads + BLOCK - 1) // BLOCK,), (BLOCK,),
                                        (g, partial, tickets, out, np.int64(rows), np.int64(cols),
                                         np.int64(chunk_rows), np.int32(nchunks), np.int32(vec)))
    return out
