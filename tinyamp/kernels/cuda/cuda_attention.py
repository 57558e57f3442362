"""Scaled dot-product attention in the flash-attention manner: one CUDA launch forward, two backward.

``kernels/attention.py`` hands over q (..., L, E), k (..., S, E), v (..., S, Ev)
of one 16-bit or float32 dtype and one batch shape (at most three batch dims;
strided views are read in place, the last dim contiguous), an optional boolean
mask broadcastable to (..., L, S) (True: attend), ``is_causal`` (query i sees
keys 0..i, PyTorch's top-left alignment) and the scale. Nothing of size L x S
is ever stored:

- forward (:func:`forward`): a block of ``BM`` threads takes ``BM`` query rows
  of one batch entry, a row a thread (its q row in registers, widened to
  float32); the block walks the keys in tiles of ``BN`` (K and V tiles
  widened into shared memory), each thread scoring its row against the tile
  (``s = (q . k) * scale``, the dot product in order over E), and keeps an
  online softmax: the running maximum ``m``, the running sum ``l`` and the
  output accumulator ``o``, rescaled by ``exp(m_old - m_new)`` when the
  maximum grows. It writes ``o / l`` rounded once and the row's log-sum-exp
  ``m + log(l)`` (float32). Causal blocks stop at their last row's key. A row
  with no key to attend to gives zeros (PyTorch's) and a log-sum-exp of -inf
  (``kernels/attention.py``'s mark of a dead row), and no gradient.
- backward (:func:`backward`), recomputing the probabilities
  ``p = exp(s - lse)`` from q, k and the saved log-sum-exp, with
  ``D_i = dO_i . O_i`` (the rounded output, as flash attention):
  ``ds = p * (dO_i . v_j - D_i)``; one launch for dK and dV (a thread per key
  row, walking query tiles: ``dv_j += p dO_i``, ``dk_j += ds q_i``) and one for
  dQ (a thread per query row, walking key tiles: ``dq_i += ds k_j``), each
  computing ``D`` for the rows it reads; dq and dk are scaled once at the end.

All arithmetic is float32 (the probabilities stay float32 in the products
with V: no 16-bit rounding of P, unlike flash attention's tensor-core path);
every sum runs in a fixed order, so a result is deterministic, but it is not
the composed path's order (``ops/attention.py``: cuBLAS products, a NumPy
softmax): the two agree within float32 rounding. Outputs of 4-D inputs
(batch, heads, L, E) are laid out (batch, L, heads, E) in memory and returned
as the transposed view, as PyTorch's flash attention does, so merging the
heads back (``y.transpose(1, 2).reshape(B, L, C)``) copies nothing; dq, dk, dv
likewise.

Head dims are compile-time constants (registers hold a row): a kernel per
(dtype, E, Ev), E and Ev at most ``MAX_HEAD_DIM``.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from . import cuda_launch as launch

BM = 64  # query rows a block of the forward and of dQ (a thread each)
BN = 32  # keys a shared-memory tile of the forward and of dQ
BKV = 64  # key rows a block of dK/dV (a thread each)
BQ = 32  # query rows a shared-memory tile of dK/dV
MAX_HEAD_DIM = 128
MAX_BATCH_DIMS = 3
NVRTC_HEAD_DIMS = (64, 128)  # the variants the NVRTC test compiles (any E, Ev <= MAX_HEAD_DIM works)

_PRELUDE = launch.F16_CONVERSIONS + launch.BF16_CONVERSIONS + r"""
#define TINYAMP_INF __uint_as_float(0x7f800000u)
// A tensor's element offset for flat batch index b over batch dims (nb0, nb1, nb2), strides s0, s1, s2.
__device__ __forceinline__ long long tinyamp_batch_offset(long long b, long long nb1, long long nb2, long long s0,
                                                          long long s1, long long s2) {
    return (b / (nb1 * nb2)) * s0 + ((b / nb2) % nb1) * s1 + (b % nb2) * s2;
}
// Rows first .. first + count - 1 of a matrix (row stride `stride`, `width` contiguous values a row) widened into a
// shared tile of `width` floats a row; rows from `limit` on are zeros. Every thread of the block takes part.
template <class T, class Widen>
__device__ __forceinline__ void tinyamp_load_tile(float* tile, const T* base, long long first, long long limit,
                                                  long long stride, int width, int count, Widen widen) {
    for (long long t = threadIdx.x; t < (long long)count * width; t += blockDim.x) {
        const long long r = first + t / width;
        tile[t] = r < limit ? widen(base[r * stride + t % width]) : 0.0f;
    }
}
"""

# Per tensor: three batch strides and a row stride (elements); the mask also has a column stride.
_LAYOUT = {name: ", ".join(f"const long long {name}{s}" for s in ("0", "1", "2", "r"))
           for name in ("q", "k", "v", "o", "g", "dq", "dk", "dv")}
_MASK_LAYOUT = "const long long m0, const long long m1, const long long m2, const long long mr, const long long mc"

_FORWARD = r"""
#define BM {bm}
#define BN {bn}
#define E {e}
#define EV {ev}
extern "C" __global__ void {fn}(const {s}* __restrict__ q, const {s}* __restrict__ k, const {s}* __restrict__ v,
        const bool* __restrict__ mask, {s}* __restrict__ out, float* __restrict__ lse, const long long L,
        const long long S, const float scale, const int causal, const int has_mask, const long long nb1,
        const long long nb2, {ql}, {kl}, {vl}, {ml}, {ol}) {{
    const long long tiles = (L + BM - 1) / BM;
    const long long b = blockIdx.x / tiles, tile = blockIdx.x % tiles;
    const long long i = tile * BM + threadIdx.x;  // this thread's query row
    const bool row = i < L;
    const {s}* const qb = q + tinyamp_batch_offset(b, nb1, nb2, q0, q1, q2);
    const {s}* const kb = k + tinyamp_batch_offset(b, nb1, nb2, k0, k1, k2);
    const {s}* const vb = v + tinyamp_batch_offset(b, nb1, nb2, v0, v1, v2);
    const bool* const mb = mask + tinyamp_batch_offset(b, nb1, nb2, m0, m1, m2);
    __shared__ float ks[BN][E];
    __shared__ float vs[BN][EV];
    float qi[E], o[EV];
    for (int d = 0; d < E; ++d) qi[d] = row ? tinyamp_{c}_to_f32(qb[i * qr + d]) : 0.0f;
    for (int d = 0; d < EV; ++d) o[d] = 0.0f;
    float m = -TINYAMP_INF, l = 0.0f;
    const long long last = (tile + 1) * BM < L ? (tile + 1) * BM : L;  // one past the block's last row
    const long long keys = causal ? (last < S ? last : S) : S;  // the keys any row of the block may see
    for (long long j0 = 0; j0 < keys; j0 += BN) {{
        tinyamp_load_tile(&ks[0][0], kb, j0, S, kr, E, BN, tinyamp_{c}_to_f32);
        tinyamp_load_tile(&vs[0][0], vb, j0, S, vr, EV, BN, tinyamp_{c}_to_f32);
        __syncthreads();
        float s[BN];
        float top = -TINYAMP_INF;  // the tile's maximum score (NaN, once seen, stays)
        for (int jj = 0; jj < BN; ++jj) {{
            const long long key = j0 + jj;
            const bool ok = row && key < keys && (!causal || key <= i) && (!has_mask || mb[i * mr + key * mc]);
            float acc = 0.0f;
            if (ok) for (int d = 0; d < E; ++d) acc = acc + qi[d] * ks[jj][d];
            s[jj] = ok ? acc * scale : -TINYAMP_INF;
            if (isnan(s[jj]) || s[jj] > top) top = s[jj];
        }}
        if (top != -TINYAMP_INF) {{  // no barrier inside: threads may differ here
            const float m_new = m > top ? m : top;
            const float alpha = expf(m - m_new);  // 0 for the first tile a row sees
            l = l * alpha;
            for (int d = 0; d < EV; ++d) o[d] = o[d] * alpha;
            for (int jj = 0; jj < BN; ++jj) {{
                const float p = expf(s[jj] - m_new);  // a masked key: exp(-inf) = 0
                l = l + p;
                for (int d = 0; d < EV; ++d) o[d] = o[d] + p * vs[jj][d];
            }}
            m = m_new;
        }}
        __syncthreads();
    }}
    if (!row) return;
    {s}* const ob = out + tinyamp_batch_offset(b, nb1, nb2, o0, o1, o2) + i * orr;
    for (int d = 0; d < EV; ++d) ob[d] = tinyamp_f32_to_{c}(l == 0.0f ? 0.0f : o[d] / l);
    lse[b * L + i] = l == 0.0f ? -TINYAMP_INF : m + logf(l);
}}
"""

_BACKWARD_DQ = r"""
#define BM {bm}
#define BN {bn}
#define E {e}
#define EV {ev}
extern "C" __global__ void {fn}(const {s}* __restrict__ q, const {s}* __restrict__ k, const {s}* __restrict__ v,
        const bool* __restrict__ mask, const {s}* __restrict__ out, const {sg}* __restrict__ gout,
        const float* __restrict__ lse, {s}* __restrict__ dq, const long long L, const long long S, const float scale,
        const int causal, const int has_mask, const long long nb1, const long long nb2, {ql}, {kl}, {vl}, {ml}, {ol},
        {gl}, {dql}) {{
    const long long tiles = (L + BM - 1) / BM;
    const long long b = blockIdx.x / tiles, tile = blockIdx.x % tiles;
    const long long i = tile * BM + threadIdx.x;
    const bool row = i < L;
    const {s}* const qb = q + tinyamp_batch_offset(b, nb1, nb2, q0, q1, q2);
    const {s}* const kb = k + tinyamp_batch_offset(b, nb1, nb2, k0, k1, k2);
    const {s}* const vb = v + tinyamp_batch_offset(b, nb1, nb2, v0, v1, v2);
    const bool* const mb = mask + tinyamp_batch_offset(b, nb1, nb2, m0, m1, m2);
    const {s}* const ob = out + tinyamp_batch_offset(b, nb1, nb2, o0, o1, o2);
    const {sg}* const gb = gout + tinyamp_batch_offset(b, nb1, nb2, g0, g1, g2);
    __shared__ float ks[BN][E];
    __shared__ float vs[BN][EV];
    float qi[E], gi[EV], acc[E];
    for (int d = 0; d < E; ++d) {{
        qi[d] = row ? tinyamp_{c}_to_f32(qb[i * qr + d]) : 0.0f;
        acc[d] = 0.0f;
    }}
    float dsum = 0.0f;  // D_i = dO_i . O_i
    for (int d = 0; d < EV; ++d) {{
        gi[d] = row ? tinyamp_{cg}_to_f32(gb[i * gr + d]) : 0.0f;
        dsum = dsum + gi[d] * (row ? tinyamp_{c}_to_f32(ob[i * orr + d]) : 0.0f);
    }}
    const float li = row ? lse[b * L + i] : -TINYAMP_INF;
    const bool live = li != -TINYAMP_INF;  // a dead row (nothing attended) sends no gradient
    const long long last = (tile + 1) * BM < L ? (tile + 1) * BM : L;
    const long long keys = causal ? (last < S ? last : S) : S;
    for (long long j0 = 0; j0 < keys; j0 += BN) {{
        tinyamp_load_tile(&ks[0][0], kb, j0, S, kr, E, BN, tinyamp_{c}_to_f32);
        tinyamp_load_tile(&vs[0][0], vb, j0, S, vr, EV, BN, tinyamp_{c}_to_f32);
        __syncthreads();
        for (int jj = 0; jj < BN; ++jj) {{
            const long long key = j0 + jj;
            const bool ok = live && key < keys && (!causal || key <= i) && (!has_mask || mb[i * mr + key * mc]);
            if (!ok) continue;
            float sc = 0.0f, dp = 0.0f;
            for (int d = 0; d < E; ++d) sc = sc + qi[d] * ks[jj][d];
            const float p = expf(sc * scale - li);
            for (int d = 0; d < EV; ++d) dp = dp + gi[d] * vs[jj][d];
            const float ds = p * (dp - dsum);
            for (int d = 0; d < E; ++d) acc[d] = acc[d] + ds * ks[jj][d];
        }}
        __syncthreads();
    }}
    if (!row) return;
    {s}* const dqb = dq + tinyamp_batch_offset(b, nb1, nb2, dq0, dq1, dq2) + i * dqr;
    for (int d = 0; d < E; ++d) dqb[d] = tinyamp_f32_to_{c}(acc[d] * scale);
}}
"""

_BACKWARD_DKV = r"""
#define BKV {bkv}
#define BQ {bq}
#define E {e}
#define EV {ev}
extern "C" __global__ void {fn}(const {s}* __restrict__ q, const {s}* __restrict__ k, const {s}* __restrict__ v,
        const bool* __restrict__ mask, const {s}* __restrict__ out, const {sg}* __restrict__ gout,
        const float* __restrict__ lse, {s}* __restrict__ dk, {s}* __restrict__ dv, const long long L,
        const long long S, const float scale, const int causal, const int has_mask, const long long nb1,
        const long long nb2, {ql}, {kl}, {vl}, {ml}, {ol}, {gl}, {dkl}, {dvl}) {{
    const long long tiles = (S + BKV - 1) / BKV;
    const long long b = blockIdx.x / tiles, tile = blockIdx.x % tiles;
    const long long j = tile * BKV + threadIdx.x;  // this thread's key row
    const bool key_row = j < S;
    const {s}* const qb = q + tinyamp_batch_offset(b, nb1, nb2, q0, q1, q2);
    const {s}* const kb = k + tinyamp_batch_offset(b, nb1, nb2, k0, k1, k2);
    const {s}* const vb = v + tinyamp_batch_offset(b, nb1, nb2, v0, v1, v2);
    const bool* const mb = mask + tinyamp_batch_offset(b, nb1, nb2, m0, m1, m2);
    const {s}* const ob = out + tinyamp_batch_offset(b, nb1, nb2, o0, o1, o2);
    const {sg}* const gb = gout + tinyamp_batch_offset(b, nb1, nb2, g0, g1, g2);
    __shared__ float qs[BQ][E];
    __shared__ float gs[BQ][EV];
    __shared__ float ls[BQ], dsums[BQ];
    float kj[E], vj[EV], dkj[E], dvj[EV];
    for (int d = 0; d < E; ++d) {{
        kj[d] = key_row ? tinyamp_{c}_to_f32(kb[j * kr + d]) : 0.0f;
        dkj[d] = 0.0f;
    }}
    for (int d = 0; d < EV; ++d) {{
        vj[d] = key_row ? tinyamp_{c}_to_f32(vb[j * vr + d]) : 0.0f;
        dvj[d] = 0.0f;
    }}
    // Causal: rows before the block's first key see none of its keys.
    const long long first = causal ? (tile * BKV / BQ) * BQ : 0;
    for (long long i0 = first; i0 < L; i0 += BQ) {{
        tinyamp_load_tile(&qs[0][0], qb, i0, L, qr, E, BQ, tinyamp_{c}_to_f32);
        tinyamp_load_tile(&gs[0][0], gb, i0, L, gr, EV, BQ, tinyamp_{cg}_to_f32);
        if (threadIdx.x < BQ) {{  // D and the log-sum-exp of the tile's rows, as the dQ kernel computes them
            const long long r = i0 + threadIdx.x;
            float dsum = 0.0f;
            if (r < L)
                for (int d = 0; d < EV; ++d)
                    dsum = dsum + tinyamp_{cg}_to_f32(gb[r * gr + d]) * tinyamp_{c}_to_f32(ob[r * orr + d]);
            dsums[threadIdx.x] = dsum;
            ls[threadIdx.x] = r < L ? lse[b * L + r] : -TINYAMP_INF;
        }}
        __syncthreads();
        for (int ii = 0; ii < BQ; ++ii) {{
            const long long i = i0 + ii;
            const bool ok = key_row && i < L && ls[ii] != -TINYAMP_INF && (!causal || j <= i)
                            && (!has_mask || mb[i * mr + j * mc]);
            if (!ok) continue;
            float sc = 0.0f, dp = 0.0f;
            for (int d = 0; d < E; ++d) sc = sc + qs[ii][d] * kj[d];
            const float p = expf(sc * scale - ls[ii]);
            for (int d = 0; d < EV; ++d) {{
                dvj[d] = dvj[d] + p * gs[ii][d];
                dp = dp + gs[ii][d] * vj[d];
            }}
            const float ds = p * (dp - dsums[ii]);
            for (int d = 0; d < E; ++d) dkj[d] = dkj[d] + ds * qs[ii][d];
        }}
        __syncthreads();
    }}
    if (!key_row) return;
    {s}* const dkb = dk + tinyamp_batch_offset(b, nb1, nb2, dk0, dk1, dk2) + j * dkr;
    {s}* const dvb = dv + tinyamp_batch_offset(b, nb1, nb2, dv0, dv1, dv2) + j * dvr;
    for (int d = 0; d < E; ++d) dkb[d] = tinyamp_f32_to_{c}(dkj[d] * scale);
    for (int d = 0; d < EV; ++d) dvb[d] = tinyamp_f32_to_{c}(dvj[d]);
}}
"""


def _suffix(dtype: Any) -> str:
    return launch.STORAGE[np.dtype(dtype)][1]


def _storage(dtype: Any) -> str:
    return launch.STORAGE[np.dtype(dtype)][0]


def _fill(template: str, **kw: Any) -> str:
    # "or" is not a C identifier clash, but "or" is an alternative token for || in C++: the output's row stride
    # is "orr" (see _LAYOUT's "o" entry, renamed here).
    layouts = {f"{n}l": text for n, text in _LAYOUT.items()}
    layouts["ol"] = layouts["ol"].replace("const long long or", "const long long orr")
    return template.format(ml=_MASK_LAYOUT, bm=BM, bn=BN, bkv=BKV, bq=BQ, **layouts, **kw)


@lru_cache(maxsize=None)
def forward_source(dtype: Any, e: int, ev: int) -> tuple[str, str]:
    """(name, source) of the forward for ``dtype`` and head dims ``e`` (q, k) and ``ev`` (v)."""
    c = _suffix(dtype)
    fn = f"tinyamp_attention_{c}_{e}_{ev}"
    return fn, _PRELUDE + _fill(_FORWARD, fn=fn, s=_storage(dtype), c=c, e=e, ev=ev)


@lru_cache(maxsize=None)
def backward_sources(dtype: Any, g_dtype: Any, e: int, ev: int) -> tuple[tuple[str, str], tuple[str, str]]:
    """((name, source) of dQ, (name, source) of dK/dV) for ``dtype`` operands and a ``g_dtype`` output gradient."""
    c, cg = _suffix(dtype), _suffix(g_dtype)
    fq, fkv = f"tinyamp_attention_dq_{c}_{cg}_{e}_{ev}", f"tinyamp_attention_dkv_{c}_{cg}_{e}_{ev}"
    common = dict(s=_storage(dtype), c=c, sg=_storage(g_dtype), cg=cg, e=e, ev=ev)
    return ((fq, _PRELUDE + _fill(_BACKWARD_DQ, fn=fq, **common)),
            (fkv, _PRELUDE + _fill(_BACKWARD_DKV, fn=fkv, **common)))


def sources() -> list[tuple[str, str]]:
    """(name, source) of the kernels for every dtype and the common head dims, for the NVRTC check."""
    out = []
    for dtype in launch.FUSED_DTYPES:
        for e in NVRTC_HEAD_DIMS:
            out.append(forward_source(dtype, e, e))
            out.extend(backward_sources(dtype, dtype, e, e))
    out.append(forward_source(np.dtype(np.float16), 24, 40))  # E != Ev
    out.extend(backward_sources(np.dtype(np.float16), np.dtype(np.float32), 24, 40))
    return out


# ------------------------------------------------------------------ layouts
def _elements(strides: tuple, itemsize: int) -> tuple:
    return tuple(s // itemsize for s in strides)


def _batch_strides(a: Any, batch_ndim: int) -> tuple[int, int, int]:
    """``a``'s batch strides in elements, padded at the front to three (size-1 dims: 0)."""
    strides = _elements(a.strides[:batch_ndim], a.itemsize)
    strides = tuple(0 if size == 1 else s for size, s in zip(a.shape[:batch_ndim], strides))
    return (0,) * (MAX_BATCH_DIMS - batch_ndim) + strides


def _batch_sizes(shape: tuple) -> tuple[int, int]:
    """(nb1, nb2): the sizes of the last two of three batch dims (the first is implied)."""
    padded = (1,) * (MAX_BATCH_DIMS - len(shape)) + tuple(shape)
    return padded[1], padded[2]


def _span(a: Any) -> Any:
    """A 1-D array over the memory ``a`` covers (from its first element to its last): a kernel argument that
    reads a strided view in place (CuPy's kernels take the pointer of any array; this keeps the stand-in's
    bounds checks)."""
    if a.flags.c_contiguous:
        return a
    extent = 1 + sum((n - 1) * s for n, s in zip(a.shape, _elements(a.strides, a.itemsize)))
    return launch._cp().ndarray((extent,), dtype=a.dtype, memptr=a.data)


def _layout(a: Any, batch_ndim: int) -> tuple:
    """The kernel's layout arguments of ``a``: three batch strides and the row stride, in elements."""
    return tuple(np.int64(s) for s in _batch_strides(a, batch_ndim) + (a.strides[-2] // a.itemsize,))


def _readable(a: Any) -> Any:
    """``a`` itself when its last dim is contiguous and no stride is negative, else a C-contiguous copy."""
    if a.shape[-1] > 1 and a.strides[-1] != a.itemsize or any(s < 0 for s in a.strides):
        return launch._cp().ascontiguousarray(a)
    return a


def _heads_last(shape: tuple, dtype: Any) -> Any:
    """A new array of ``shape``; a 4-D one (batch, heads, rows, dim) laid out (batch, rows, heads, dim) in memory."""
    cp = launch._cp()
    if len(shape) != 4:
        return cp.empty(shape, dtype=dtype)
    b, h, rows, d = shape
    return cp.empty((b, rows, h, d), dtype=dtype).transpose(0, 2, 1, 3)


def takes(q: Any, k: Any, v: Any, mask: Any) -> bool:
    """Whether the kernels take these operands: GPU arrays of one fused dtype and one batch shape (at most three
    batch dims), head dims of 1 to ``MAX_HEAD_DIM``, non-empty, and a boolean mask (or none) that broadcasts to
    the scores."""
    if not (launch.on_gpu(q) and q.dtype in launch.FUSED_DTYPES and q.dtype == k.dtype == v.dtype):
        return False
    if not (2 <= q.ndim == k.ndim == v.ndim <= 2 + MAX_BATCH_DIMS and q.shape[:-2] == k.shape[:-2] == v.shape[:-2]):
        return False
    if not (0 < q.shape[-1] <= MAX_HEAD_DIM and q.shape[-1] == k.shape[-1] and 0 < v.shape[-1] <= MAX_HEAD_DIM):
        return False
    if q.size == 0 or k.size == 0 or v.size == 0:
        return False
    if mask is None:
        return True
    scores = q.shape[:-1] + (k.shape[-2],)
    try:
        return mask.dtype == np.bool_ and np.broadcast_shapes(mask.shape, scores) == scores
    except ValueError:
        return False


def _mask_args(mask: Any, scores: tuple, dev: Any) -> tuple:
    """(mask array, has_mask, its five layout arguments): the mask broadcast to the scores' shape, read in place."""
    if mask is None:
        return (launch.device_zeros(dev, "attention_no_mask", 1, np.bool_), np.int32(0)) + (np.int64(0),) * 5
    full = launch._cp().broadcast_to(mask, scores)
    batch_ndim = len(scores) - 2
    strides = _batch_strides(full, batch_ndim) + _elements(full.strides[-2:], 1)
    return (_span(full), np.int32(1)) + tuple(np.int64(s) for s in strides)


def _mask_bytes(mask: Any) -> int:
    return 0 if mask is None else int(np.prod([n for n, s in zip(mask.shape, mask.strides) if s] or [1]))


def forward(q: Any, k: Any, v: Any, mask: Any, is_causal: bool, scale: float) -> tuple[Any, Any]:
    """(output (..., L, Ev) in q's dtype, log-sum-exp (batch, L) float32): one launch. See the module docstring."""
    q, k, v = _readable(q), _readable(k), _readable(v)
    batch, length, source_len = q.shape[:-2], q.shape[-2], k.shape[-2]
    e, ev = q.shape[-1], v.shape[-1]
    nbatch = int(np.prod(batch)) if batch else 1
    name, source = forward_source(q.dtype, e, ev)
    dev = launch._device(q)
    with dev:
        out = _heads_last(batch + (length, ev), q.dtype)
        lse = launch._cp().empty(batch + (length,), dtype=np.float32)
        mask_args = _mask_args(mask, batch + (length, source_len), dev)
        nb1, nb2 = _batch_sizes(batch)
        nd = len(batch)
        launch.count(name, lambda: (q.size * q.itemsize + k.size * k.itemsize + v.size * v.itemsize
                                    + _mask_bytes(mask), out.nbytes + lse.nbytes))
        launch.raw_kernel(name, source)(
            (nbatch * -(-length // BM),), (BM,),
            (_span(q), _span(k), _span(v), mask_args[0], _span(out), lse, np.int64(length), np.int64(source_len),
             np.float32(scale), np.int32(bool(is_causal)), mask_args[1], np.int64(nb1), np.int64(nb2),
             *_layout(q, nd), *_layout(k, nd), *_layout(v, nd), *mask_args[2:], *_layout(out, nd)))
    return out, lse


def backward(q: Any, k: Any, v: Any, mask: Any, is_causal: bool, scale: float, out: Any, gy: Any, lse: Any, *,
             need_dq: bool = True, need_dkv: bool = True) -> tuple[Any, Any, Any]:
    """(dq, dk, dv) in the operands' dtype from the forward's output and log-sum-exp: a launch for dq and one for
    dk and dv (None for what is not needed)."""
    q, k, v, out, gy = (_readable(a) for a in (q, k, v, out, gy))
    batch, length, source_len = q.shape[:-2], q.shape[-2], k.shape[-2]
    e, ev = q.shape[-1], v.shape[-1]
    nbatch = int(np.prod(batch)) if batch else 1
    (fq, sq), (fkv, skv) = backward_sources(q.dtype, gy.dtype, e, ev)
    dev = launch._device(q)
    nd = len(batch)
    with dev:
        mask_args = _mask_args(mask, batch + (length, source_len), dev)
        nb1, nb2 = _batch_sizes(batch)
        common = (np.int64(length), np.int64(source_len), np.float32(scale), np.int32(bool(is_causal)), mask_args[1],
                  np.int64(nb1), np.int64(nb2), *_layout(q, nd), *_layout(k, nd), *_layout(v, nd), *mask_args[2:],
                  *_layout(out, nd), *_layout(gy, nd))
        operands = (_span(q), _span(k), _span(v), mask_args[0], _span(out), _span(gy), lse)
        read = sum(a.size * a.itemsize for a in (q, k, v, out, gy)) + lse.nbytes + _mask_bytes(mask)
        dq = dk = dv = None
        if need_dq:
            dq = _heads_last(q.shape, q.dtype)
            launch.count(fq, lambda: (read, dq.nbytes))
            launch.raw_kernel(fq, sq)((nbatch * -(-length // BM),), (BM,),
                                      operands + (_span(dq),) + common + _layout(dq, nd))
        if need_dkv:
            dk, dv = _heads_last(k.shape, k.dtype), _heads_last(v.shape, v.dtype)
            launch.count(fkv, lambda: (read, dk.nbytes + dv.nbytes))
            launch.raw_kernel(fkv, skv)((nbatch * -(-source_len // BKV),), (BKV,),
                                        operands + (_span(dk), _span(dv)) + common + _layout(dk, nd) + _layout(dv, nd))
    return dq, dk, dv
