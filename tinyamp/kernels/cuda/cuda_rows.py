"""Row kernels' shared pieces: a CUDA block's deterministic sums and maxima, and the block size for a row length.

LayerNorm and softmax give each row (or chunk of rows) one CUDA block; the
block's threads stride over the row and combine their partial values with
:data:`BLOCK_REDUCE`, a tree in shared memory (thread ``t`` adds ``t + s`` for
``s`` = half the block, a quarter, ...): a fixed order set by the block size
alone, so a result never depends on timing. No warp shuffles: the CUDA
stand-in runs a block's threads one after another (fibers at each barrier).
"""

from __future__ import annotations

from typing import Any

MAX_THREADS = 256  # BLOCK_REDUCE's shared arrays hold this many values
MIN_THREADS = 32

BLOCK_REDUCE = r"""
#define TINYAMP_ROW_THREADS 256
// The sum (or maximum) of every thread's v over the block: a tree in shared memory, blockDim.x a power of two.
// Every thread of the block must call it (it holds barriers); each gets the result.
__device__ float tinyamp_block_sum(float v) {
    __shared__ float cells[TINYAMP_ROW_THREADS];
    const unsigned t = threadIdx.x;
    cells[t] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) cells[t] = cells[t] + cells[t + s];
        __syncthreads();
    }
    const float total = cells[0];
    __syncthreads();  // the cells are reused by the next call
    return total;
}
// Two sums in one tree (LayerNorm's backward: sum g and sum g * xhat), each in the order of a single one.
__device__ void tinyamp_block_sum2(float* a, float* b) {
    __shared__ float cells_a[TINYAMP_ROW_THREADS], cells_b[TINYAMP_ROW_THREADS];
    const unsigned t = threadIdx.x;
    cells_a[t] = *a;
    cells_b[t] = *b;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) {
            cells_a[t] = cells_a[t] + cells_a[t + s];
            cells_b[t] = cells_b[t] + cells_b[t + s];
        }
        __syncthreads();
    }
    *a = cells_a[0];
    *b = cells_b[0];
    __syncthreads();
}
// The maximum: NaN wins (NumPy's max), so a row holding NaN gives NaN.
__device__ float tinyamp_block_max(float v) {
    __shared__ float cells[TINYAMP_ROW_THREADS];
    const unsigned t = threadIdx.x;
    cells[t] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s) {
            const float o = cells[t + s];
            if (isnan(o) || o > cells[t]) cells[t] = o;
        }
        __syncthreads();
    }
    const float m = cells[0];
    __syncthreads();
    return m;
}
"""


def threads_for(cols: int) -> int:
    """Threads of a block that reduces a row of ``cols``: a power of two near a quarter of it, 32 to 256."""
    want = max(1, -(-cols // 4))
    threads = MIN_THREADS
    while threads < want and threads < MAX_THREADS:
        threads *= 2
    return threads


def rows_and_cols(shape: Any, trailing: int) -> tuple[int, int]:
    """(rows, cols) of an array of ``shape`` whose last ``trailing`` dims make one row."""
    rows = cols = 1
    for i, size in enumerate(shape):
        if i < len(shape) - trailing:
            rows *= size
        else:
            cols *= size
    return rows, cols
