"""Embedding on the GPU: the row gather forward and the scatter-add backward, one CUDA launch each.

``kernels/embedding.py`` hands over a 2-D weight (rows, dim) of a fused dtype
and integer indices of any shape (int64 or int32):

- :func:`gather`: ``y[n] = weight[idx[n]]``; an index outside ``[0, rows)``
  reads nothing and gives a NaN row (no host check here: a GPU step never waits
  for the host; ``kernels/embedding.py`` flags the index on the device).
- :func:`scatter_add`: ``dweight[r] = sum of gy[n] over idx[n] == r`` in
  float32, rounded once to ``gy``'s dtype; the ``padding_idx`` row stays 0; an
  out-of-range index reaches no row (``kernels/embedding.py`` flags it for the
  next host read). Deterministic, without atomics: thread (c, g) owns column
  c of the rows of group g (``ROW_GROUPS`` groups), zeroes them, then walks
  every index in order and adds the ones that land in its rows. Each row's
  sum is therefore taken in index order from 0.0, which is the order of
  ``numpy.add.at`` on a zeroed float32 array: the NumPy path's bits. Every
  thread reads every index (a broadcast load shared by a warp's adjacent
  columns), ``ROW_GROUPS`` times the index array in all; at GPT-2 sizes
  (50304 x 768, 8192 indices) that is about 0.1 ms of issue on an H200, near
  the time of writing the gradient itself, and one launch where atomics need a
  zeroing launch first.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from . import cuda_launch as launch

BLOCK = 128
ROW_GROUPS = 64  # row groups of the scatter: threads = dim x groups
INDEX_TYPES = {np.dtype(np.int64): "long long", np.dtype(np.int32): "int"}

_PRELUDE = launch.F16_CONVERSIONS + launch.BF16_CONVERSIONS + r"""
#define TINYAMP_NAN __uint_as_float(0x7fc00000u)
"""

_GATHER = r"""
extern "C" __global__ void {fn}(const {si}* __restrict__ idx, const {s}* __restrict__ weight, {s}* __restrict__ y,
        const long long n, const long long rows, const long long dim) {{
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < n * dim; e += stride) {{
        const long long r = (long long)idx[e / dim];
        y[e] = (r >= 0 && r < rows) ? weight[r * dim + e % dim] : tinyamp_f32_to_{c}(TINYAMP_NAN);
    }}
}}
"""

_SCATTER = r"""
extern "C" __global__ void {fn}(const {si}* __restrict__ idx, const {sg}* __restrict__ grad, float* __restrict__ acc,
        {sg}* __restrict__ out, const long long n, const long long rows, const long long dim,
        const long long group_rows, const long long padding, const int round_out) {{
    // acc: the float32 sums (the output itself when it is float32).
    const long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= dim * {groups}) return;
    const long long c = t % dim, g = t / dim;
    const long long r0 = g * group_rows;
    const long long r1 = r0 + group_rows < rows ? r0 + group_rows : rows;
    for (long long r = r0; r < r1; ++r) acc[r * dim + c] = 0.0f;
    for (long long k = 0; k < n; ++k) {{
        const long long r = (long long)idx[k];  // an out-of-range index lies in no group: it reaches no row
        if (r < r0 || r >= r1 || r == padding) continue;
        acc[r * dim + c] = acc[r * dim + c] + tinyamp_{cg}_to_f32(grad[k * dim + c]);
    }}
    if (round_out)
        for (long long r = r0; r < r1; ++r) out[r * dim + c] = tinyamp_f32_to_{cg}(acc[r * dim + c]);
}}
"""


def _suffix(dtype: Any) -> str:
    return launch.STORAGE[np.dtype(dtype)][1]


def _storage(dtype: Any) -> str:
    return launch.STORAGE[np.dtype(dtype)][0]


def _index_suffix(dtype: Any) -> str:
    return "i64" if np.dtype(dtype) == np.int64 else "i32"


@lru_cache(maxsize=None)
def gather_source(index_dtype: Any, dtype: Any) -> tuple[str, str]:
    """(name, source) of the gather of ``dtype`` rows by ``index_dtype`` indices."""
    fn = f"tinyamp_embedding_{_index_suffix(index_dtype)}_{_suffix(dtype)}"
    return fn, _PRELUDE + _GATHER.format(fn=fn, si=INDEX_TYPES[np.dtype(index_dtype)], s=_storage(dtype),
                                         c=_suffix(dtype))


@lru_cache(maxsize=None)
def scatter_source(index_dtype: Any, dtype: Any) -> tuple[str, str]:
    """(name, source) of the scatter-add of a ``dtype`` gradient by ``index_dtype`` indices."""
    fn = f"tinyamp_embedding_backward_{_index_suffix(index_dtype)}_{_suffix(dtype)}"
    return fn, _PRELUDE + _SCATTER.format(fn=fn, si=INDEX_TYPES[np.dtype(index_dtype)], sg=_storage(dtype),
                                          cg=_suffix(dtype), groups=ROW_GROUPS)


def sources() -> list[tuple[str, str]]:
    """(name, source) of every kernel of this module, for the NVRTC check."""
    return [make(i, d) for make in (gather_source, scatter_source) for i in INDEX_TYPES for d in launch.FUSED_DTYPES]


def takes(idx: Any, values: Any) -> bool:
    """Whether the kernels take these: GPU arrays, int64/int32 indices, C-contiguous values of a fused dtype."""
    return (launch.on_gpu(values) and values.dtype in launch.FUSED_DTYPES and values.flags.c_contiguous
            and launch.on_gpu(idx) and idx.dtype in INDEX_TYPES)


def gather(weight: Any, idx: Any) -> Any:
    """``weight[idx]`` (shape idx.shape + (dim,)), NaN rows for out-of-range indices: one launch."""
    rows, dim = weight.shape
    name, source = gather_source(idx.dtype, weight.dtype)
    with launch._device(weight):
        cp = launch._cp()
        idx = cp.ascontiguousarray(idx)
        y = cp.empty(idx.shape + (dim,), dtype=weight.dtype)
        n = idx.size
        if n and dim:
            # Reads the indices and the rows they pick (not the whole weight).
            launch.count(name, lambda: (idx.nbytes + y.nbytes, y.nbytes))
            launch.raw_kernel(name, source)((max(1, min(65535, -(-n * dim // BLOCK))),), (BLOCK,),
                                            (idx, weight, y, np.int64(n), np.int64(rows), np.int64(dim)))
    return y


def scatter_add(gy: Any, idx: Any, rows: int, padding_idx: "int | None") -> Any:
    """The weight's gradient (rows, dim) in ``gy``'s dtype: ``gy`` (..., dim) summed into the rows ``idx``
    names, one launch (see the module docstring)."""
    dim = gy.shape[-1]
    name, source = scatter_source(idx.dtype, gy.dtype)
    with launch._device(gy):
        cp = launch._cp()
        idx = cp.ascontiguousarray(idx)
        out = cp.empty((rows, dim), dtype=gy.dtype)
        if rows == 0 or dim == 0:
            return out
        acc = out if gy.dtype == np.float32 else cp.empty((rows, dim), dtype=np.float32)
        group_rows = -(-rows // ROW_GROUPS)
        threads = dim * ROW_GROUPS

        def moved() -> tuple[int, int]:
            read = idx.nbytes + gy.nbytes + (acc.nbytes if acc is not out else 0)
            return read, out.nbytes + (acc.nbytes if acc is not out else 0)

        launch.count(name, moved)
        launch.raw_kernel(name, source)(
            (-(-threads // BLOCK),), (BLOCK,),
            (idx, gy, acc, out, np.int64(idx.size), np.int64(rows), np.int64(dim), np.int64(group_rows),
             np.int64(-1 if padding_idx is None else padding_idx), np.int32(acc is not out)))
    return out
