"""LayerNorm forward and backward as one CUDA launch each: float32 statistics, 16-bit or float32 in and out.

``kernels/layer_norm.py`` hands over C-contiguous GPU arrays viewed as
(rows, cols), the normalised dims flattened into cols:

- :func:`forward`, one block per row: the row's mean (a block sum over cols),
  its variance ``mean((x - mean)^2)`` (a second pass: no cancellation) and
  ``rstd = 1 / sqrt(var + eps)`` in float32, saved; then
  ``y = ((x - mean) * rstd) * w + b`` in float32, the composed path's order,
  rounded once to the output dtype. Weight and bias are optional, float32 or
  the input's dtype.
- :func:`backward`, one launch: block ``k`` takes a chunk of rows; for each
  row, with ``g = gy * w`` and ``xhat = (x - mean) * rstd`` (float32),
  ``dx = rstd * ((g - mean(g)) - xhat * mean(g * xhat))`` (both means from
  one block tree), and it adds ``gy * xhat`` and ``gy`` into its chunk's
  float32 partial sums of every column. The last block to finish (an integer
  ticket) adds the chunks' partials in chunk order and writes ``dweight`` and
  ``dbias`` in the weight's dtype, rounded once: the weight and bias
  gradients come from the same launch, in an order fixed by the row count.

The sums are trees over a block's threads (``cuda_rows.BLOCK_REDUCE``), not
NumPy's pairwise order: the statistics agree with the composed path to a few
float32 ulp, not bit for bit. The ticket is one int32 per device that the last
block puts back to 0 (as ``cuda_loss``'s): launches on one stream reuse it.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from . import cuda_launch as launch
from . import cuda_rows

CHUNKS = 256  # at most this many row chunks in the backward (the weight gradients' partial sums)
CHUNK_ROWS_MIN = 8  # rows per chunk at least: fewer partials to write and read back

_PRELUDE = launch.F16_CONVERSIONS + launch.BF16_CONVERSIONS + cuda_rows.BLOCK_REDUCE

_FORWARD = r"""
extern "C" __global__ void {fn}(const {sx}* __restrict__ x, const {sw}* __restrict__ weight,
        const {sw}* __restrict__ bias, {sy}* __restrict__ y, float* __restrict__ mean_out,
        float* __restrict__ rstd_out, const long long cols, const float eps, const int has_weight,
        const int has_bias) {{
    const long long row = blockIdx.x;
    const {sx}* const xr = x + row * cols;
    {sy}* const yr = y + row * cols;
    float s = 0.0f;
    for (long long j = threadIdx.x; j < cols; j += blockDim.x) s = s + tinyamp_{cx}_to_f32(xr[j]);
    const float mean = tinyamp_block_sum(s) / (float)cols;
    float q = 0.0f;
    for (long long j = threadIdx.x; j < cols; j += blockDim.x) {{
        const float d = tinyamp_{cx}_to_f32(xr[j]) - mean;
        q = q + d * d;
    }}
    const float var = tinyamp_block_sum(q) / (float)cols;
    const float rstd = 1.0f / sqrtf(var + eps);
    if (threadIdx.x == 0) {{
        mean_out[row] = mean;
        rstd_out[row] = rstd;
    }}
    for (long long j = threadIdx.x; j < cols; j += blockDim.x) {{
        float v = (tinyamp_{cx}_to_f32(xr[j]) - mean) * rstd;
        if (has_weight) v = v * tinyamp_{cw}_to_f32(weight[j]);
        if (has_bias) v = v + tinyamp_{cw}_to_f32(bias[j]);
        yr[j] = tinyamp_f32_to_{cy}(v);
    }}
}}
"""

_BACKWARD = r"""
extern "C" __global__ void {fn}(const {sg}* __restrict__ grad, const {sx}* __restrict__ x,
        const {sw}* __restrict__ weight, const float* __restrict__ mean, const float* __restrict__ rstd,
        {sx}* __restrict__ grad_x, float* partial, int* ticket, {sw}* __restrict__ dweight, {sw}* __restrict__ dbias,
        const long long rows, const long long cols, const long long chunk_rows, const int has_weight,
        const int need_dx, const int need_dw, const int need_db) {{
    // partial: dweight's partial sums (chunk x cols) | dbias's (chunk x cols), float32.
    const long long chunk = blockIdx.x;
    const long long nchunks = gridDim.x;
    float* const pw = partial + chunk * cols;
    float* const pb = partial + (nchunks + chunk) * cols;
    for (long long j = threadIdx.x; j < cols; j += blockDim.x) {{
        pw[j] = 0.0f;  // NumPy's sums start from the identity: -0.0 rows sum to +0.0
        pb[j] = 0.0f;
    }}
    const long long r0 = chunk * chunk_rows;
    const long long r1 = r0 + chunk_rows < rows ? r0 + chunk_rows : rows;
    const float inv_cols = 1.0f / (float)cols;
    for (long long r = r0; r < r1; ++r) {{
        const {sg}* const gr = grad + r * cols;
        const {sx}* const xr = x + r * cols;
        const float m = mean[r], s = rstd[r];
        float sum_g = 0.0f, sum_gx = 0.0f;
        for (long long j = threadIdx.x; j < cols; j += blockDim.x) {{
            const float gy = tinyamp_{cg}_to_f32(gr[j]);
            const float xhat = (tinyamp_{cx}_to_f32(xr[j]) - m) * s;
            const float g = has_weight ? gy * tinyamp_{cw}_to_f32(weight[j]) : gy;
            sum_g = sum_g + g;
            sum_gx = sum_gx + g * xhat;
            pw[j] = pw[j] + gy * xhat;
            pb[j] = pb[j] + gy;
        }}
        if (!need_dx) continue;  // the same for every thread of the block: no barrier is skipped by some
        tinyamp_block_sum2(&sum_g, &sum_gx);
        const float mean_g = sum_g * inv_cols, mean_gx = sum_gx * inv_cols;
        for (long long j = threadIdx.x; j < cols; j += blockDim.x) {{
            const float gy = tinyamp_{cg}_to_f32(gr[j]);
            const float xhat = (tinyamp_{cx}_to_f32(xr[j]) - m) * s;
            const float g = has_weight ? gy * tinyamp_{cw}_to_f32(weight[j]) : gy;
            grad_x[r * cols + j] = tinyamp_f32_to_{cx}(s * ((g - mean_g) - xhat * mean_gx));
        }}
    }}
    if (!need_dw && !need_db) return;  // the same for every thread of the grid
    // One ticket per block once its partials are written; the last block sums them in chunk order.
    __shared__ int last;
    __syncthreads();
    if (threadIdx.x == 0) {{
        __threadfence();
        last = atomicAdd(ticket, 1) == (int)nchunks - 1;
        if (last) {{
            ticket[0] = 0;  // for the next launch (or graph replay) on the stream
            __threadfence();
        }}
    }}
    __syncthreads();
    if (!last) return;
    const volatile float* const seen = partial;  // the other blocks' writes: read past the cache
    for (long long j = threadIdx.x; j < cols; j += blockDim.x) {{
        float tw = seen[j], tb = seen[nchunks * cols + j];
        for (long long k = 1; k < nchunks; ++k) {{
            tw = tw + seen[k * cols + j];
            tb = tb + seen[(nchunks + k) * cols + j];
        }}
        if (need_dw) dweight[j] = tinyamp_f32_to_{cw}(tw);
        if (need_db) dbias[j] = tinyamp_f32_to_{cw}(tb);
    }}
}}
"""


def _suffix(dtype: Any) -> str:
    return launch.STORAGE[np.dtype(dtype)][1]


def _storage(dtype: Any) -> str:
    return launch.STORAGE[np.dtype(dtype)][0]


@lru_cache(maxsize=None)
def forward_source(x_dtype: Any, w_dtype: Any, y_dtype: Any) -> tuple[str, str]:
    """(name, source) of the forward for one (input, weight, output) dtype triple."""
    cx, cw, cy = _suffix(x_dtype), _suffix(w_dtype), _suffix(y_dtype)
    fn = f"tinyamp_layer_norm_{cx}_{cw}_{cy}"
    return fn, _PRELUDE + _FORWARD.format(fn=fn, sx=_storage(x_dtype), sw=_storage(w_dtype), sy=_storage(y_dtype),
                                          cx=cx, cw=cw, cy=cy)


@lru_cache(maxsize=None)
def backward_source(g_dtype: Any, x_dtype: Any, w_dtype: Any) -> tuple[str, str]:
    """(name, source) of the backward for one (gradient, input, weight) dtype triple."""
    cg, cx, cw = _suffix(g_dtype), _suffix(x_dtype), _suffix(w_dtype)
    fn = f"tinyamp_layer_norm_backward_{cg}_{cx}_{cw}"
    return fn, _PRELUDE + _BACKWARD.format(fn=fn, sg=_storage(g_dtype), sx=_storage(x_dtype), sw=_storage(w_dtype),
                                           cg=cg, cx=cx, cw=cw)


def _pairs() -> list[tuple[Any, Any]]:
    """(input dtype, parameter dtype) pairs the op allows: the same, or float32 parameters beside 16 bits."""
    fused = launch.FUSED_DTYPES
    return [(x, w) for x in fused for w in fused if w == x or w == np.dtype(np.float32)]


def sources() -> list[tuple[str, str]]:
    """(name, source) of every kernel of this module, for the NVRTC check."""
    return ([forward_source(x, w, y) for x, w in _pairs() for y in (x, np.dtype(np.float32))]
            + [backward_source(g, x, w) for x, w in _pairs() for g in (x, np.dtype(np.float32))])


def takes(x: Any, *params: Any) -> bool:
    """Whether the kernels take ``x`` and the parameters given: C-contiguous GPU arrays of the fused dtypes."""
    return (launch.on_gpu(x) and x.dtype in launch.FUSED_DTYPES and x.flags.c_contiguous
            and all(p is None or (p.dtype in launch.FUSED_DTYPES and p.flags.c_contiguous) for p in params))


def _placeholder(dev: Any, dtype: Any) -> Any:
    """A one-element device array of ``dtype`` standing for an absent weight, bias or output (never touched)."""
    dtype = np.dtype(dtype)
    return launch.device_zeros(dev, f"layer_norm_absent_{dtype.name}", 1, dtype)


def forward(x: Any, weight: Any, bias: Any, eps: float, trailing: int, out_dtype: Any) -> tuple[Any, Any, Any]:
    """(y in ``out_dtype``, mean, rstd): LayerNorm over the last ``trailing`` dims of ``x``, one launch.

    ``weight`` and ``bias`` are None or C-contiguous arrays of the normalised
    shape, of one dtype (float32 or ``x``'s); ``mean`` and ``rstd`` are float32
    of shape (rows,).
    """
    rows, cols = cuda_rows.rows_and_cols(x.shape, trailing)
    w_dtype = (weight if weight is not None else bias if bias is not None else x).dtype
    if weight is not None and bias is not None and weight.dtype != bias.dtype:
        w_dtype = np.dtype(np.float32)
        weight, bias = weight.astype(w_dtype, copy=False), bias.astype(w_dtype, copy=False)
    name, source = forward_source(x.dtype, w_dtype, np.dtype(out_dtype))
    dev = launch._device(x)
    with dev:
        cp = launch._cp()
        y = cp.empty(x.shape, dtype=out_dtype)
        mean = cp.empty((rows,), dtype=np.float32)
        rstd = cp.empty((rows,), dtype=np.float32)
        if rows and cols:
            none = _placeholder(dev, w_dtype)
            launch.count(name)
            launch.raw_kernel(name, source)(
                (rows,), (cuda_rows.threads_for(cols),),
                (x, weight if weight is not None else none, bias if bias is not None else none, y, mean, rstd,
                 np.int64(cols), np.float32(eps), np.int32(weight is not None), np.int32(bias is not None)))
    return y, mean, rstd


def chunking(rows: int) -> tuple[int, int]:
    """(rows per chunk, chunks) of the backward for ``rows`` rows."""
    nchunks = max(1, min(CHUNKS, -(-rows // CHUNK_ROWS_MIN)))
    chunk_rows = -(-rows // nchunks)
    return chunk_rows, -(-rows // chunk_rows)


def backward(gy: Any, x: Any, weight: Any, mean: Any, rstd: Any, trailing: int, w_dtype: Any, *,
             need_dx: bool = True, need_dw: bool = True, need_db: bool = True) -> tuple[Any, Any, Any]:
    """(dx in ``x``'s dtype, dweight, dbias in ``w_dtype``), one launch; None for what is not needed.

    ``gy`` has ``x``'s shape; ``mean``/``rstd`` are the forward's; ``weight``
    is None (then ``g = gy``) or of ``w_dtype``. dweight and dbias are the
    column sums of ``gy * xhat`` and ``gy`` (made whenever asked for, with or
    without a weight).
    """
    rows, cols = cuda_rows.rows_and_cols(x.shape, trailing)
    w_dtype = np.dtype(w_dtype)
    name, source = backward_source(gy.dtype, x.dtype, w_dtype)
    chunk_rows, nchunks = chunking(rows)
    dev = launch._device(x)
    pshape = x.shape[x.ndim - trailing:]
    with dev:
        cp = launch._cp()
        dx = cp.empty(x.shape, dtype=x.dtype) if need_dx else None
        dw = cp.empty(pshape, dtype=w_dtype) if need_dw else None
        db = cp.empty(pshape, dtype=w_dtype) if need_db else None
        if rows == 0 or cols == 0:
            for out in (dw, db):
                if out is not None:
                    out.fill(0)
            return dx, dw, db
        none_w, none_x = _placeholder(dev, w_dtype), _placeholder(dev, x.dtype)
        partial = cp.empty((2 * nchunks * cols,), dtype=np.float32)
        ticket = launch.device_zeros(dev, "layer_norm_backward_ticket", 1, np.int32)
        elements = rows * cols

        def moved() -> tuple[int, int]:
            read = (gy.itemsize + x.itemsize) * elements + 8 * rows + partial.nbytes + 4
            read += weight.nbytes if weight is not None else 0
            written = (dx.nbytes if dx is not None else 0) + partial.nbytes + 4
            written += sum(out.nbytes for out in (dw, db) if out is not None)
            return read, written

        launch.count(name, moved)
        launch.raw_kernel(name, source)(
            (nchunks,), (cuda_rows.threads_for(cols),),
            (gy, x, weight if weight is not None else none_w, mean, rstd, dx if dx is not None else none_x, partial,
             ticket, dw if dw is not None else none_w, db if db is not None else none_w, np.int64(rows),
             np.int64(cols), np.int64(chunk_rows), np.int32(weight is not None), np.int32(need_dx),
             np.int32(need_dw), np.int32(need_db)))
    return dx, dw, db
