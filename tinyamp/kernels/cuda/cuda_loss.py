"""Fused CUDA kernels for cross-entropy of 2-D logits: one launch forward, one launch backward.

``kernels/cross_entropy.py`` hands CuPy arrays over to :func:`forward` and
:func:`backward` (their NumPy twin, operation by operation, is the CPU path in
that file):

- forward, one ``RawKernel``: a thread per row computes the row's maximum, its
  log-sum-exp, the picked log-probability and the row's weight (ignored rows
  weigh 0; an out-of-range target weighs NaN, so the loss and every gradient
  are NaN, without a host check). For ``"mean"``/``"sum"`` the rows are then
  summed in the *same order as NumPy's pairwise summation*, without float
  atomics: NumPy sums blocks of at most 128 elements (the tree's leaves) with
  eight partial sums and combines them in a fixed binary tree. Each CUDA block
  takes one integer ticket once its rows are written; the last one to take it
  sums every leaf at once (a thread a leaf, loads from L2 that overlap), then
  the tree's inner nodes a depth at a time, in shared memory, and writes the
  loss. The order is fixed by the row count alone, so the result is
  deterministic and bit for bit the NumPy path's (given the same
  ``exp``/``log``).
- backward, one ``RawKernel``: a thread per element writes the gradient in the
  logits' dtype, reading the upstream gradient and the "mean" divisor on the
  device.

The ticket is one int32 per device that the last block resets to 0, so
consecutive launches on one stream (and a captured CUDA graph) reuse it; two
forwards running concurrently on different streams must not share it (tinyamp
runs one stream).

With label smoothing the NumPy path promotes part of the backward to float64
(a Python float times a bool array); the kernel does the same arithmetic in
double, so the two agree there too.

Compiling, launching and counting: ``cuda_launch.py``.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Callable

import numpy as np

from ... import backend
from ... import dtypes as dt
from . import cuda_launch as launch
from .cuda_launch import BF16_CONVERSIONS, F16_CONVERSIONS, STORAGE

BLOCK = 256  # threads per block of both kernels
SLOT = 64  # every node of NumPy's pairwise tree over more than 128 elements (PW_BLOCKSIZE) holds 64 or more
SHARED_SLOTS = 1024  # the tree's sums stay in shared memory (8 KB) up to this many slots, else in the work array
REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}


# NumPy's float32 sum (numpy/_core/src/umath/loops_utils.h.src, pairwise_sum),
# written once for any element accessor: blocks of at most 128 elements use
# eight partial sums combined as ((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7)) plus the
# remainder in order; longer runs split at half, rounded down to a multiple of 8.
# A reduction starts from the identity: sum = 0.0f + pairwise(all).
PAIRWISE = r"""
#define TINYAMP_INF __uint_as_float(0x7f800000u)  // no math.h under NVRTC
#define TINYAMP_NAN __uint_as_float(0x7fc00000u)
// Two sums in one pass (row losses and row weights), each in the order of a single one.
struct tinyamp_pair { float a, b; };
__device__ __forceinline__ tinyamp_pair operator+(tinyamp_pair x, tinyamp_pair y) { return {x.a + y.a, x.b + y.b}; }
__device__ __forceinline__ float tinyamp_negative_zero(float) { return -0.0f; }
__device__ __forceinline__ tinyamp_pair tinyamp_negative_zero(tinyamp_pair) { return {-0.0f, -0.0f}; }
template <class At>
__device__ auto tinyamp_pairwise_block(const At& at, long long offset, long long n) -> decltype(at(offset)) {
    using T = decltype(at(offset));
    if (n < 8) {
        T res = tinyamp_negative_zero(T());
        for (long long i = 0; i < n; ++i) res = res + at(offset + i);
        return res;
    }
    T r[8];
    for (int j = 0; j < 8; ++j) r[j] = at(offset + j);
    long long i = 8;
    for (; i < n - (n % 8); i += 8)
        for (int j = 0; j < 8; ++j) r[j] = r[j] + at(offset + i + j);
    T res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) res = res + at(offset + i);
    return res;
}
template <class Block>
__device__ float tinyamp_pairwise_tree(const Block& block, long long offset, long long n) {
    if (n <= 128) return block(offset, n);
    long long half = n / 2;
    half -= half % 8;
    return tinyamp_pairwise_tree(block, offset, half) + tinyamp_pairwise_tree(block, offset + half, n - half);
}
template <class At>
__device__ float tinyamp_numpy_sum(const At& at, long long n) {
    return 0.0f + tinyamp_pairwise_tree(
        [&](long long offset, long long m) { return tinyamp_pairwise_block(at, offset, m); }, 0, n);
}
// The pairwise block (offset, length) holding element i of a sum over n.
__device__ __forceinline__ void tinyamp_block_of(long long i, long long n, long long* offset, long long* len) {
    long long o = 0, m = n;
    while (m > 128) {
        long long half = m / 2;
        half -= half % 8;
        if (i < o + half) m = half; else { o += half; m -= half; }
    }
    *offset = o;
    *len = m;
}
// The node at `depth` of the pairwise tree over n holding element i; false when a leaf above holds it.
__device__ __forceinline__ bool tinyamp_node_of(long long i, long long n, int depth, long long* offset,
                                                long long* len) {
    long long o = 0, m = n;
    for (int d = 0; d < depth; ++d) {
        if (m <= 128) return false;
        long long half = m / 2;
        half -= half % 8;
        if (i < o + half) m = half; else { o += half; m -= half; }
    }
    *offset = o;
    *len = m;
    return true;
}
__device__ __forceinline__ float tinyamp_f64_to_f32(double d) { return (float)d; }
__device__ __forceinline__ unsigned short tinyamp_f64_to_bf16(double d) {
    return tinyamp_f32_to_bf16((float)d);  // ml_dtypes rounds double -> bfloat16 through float32
}
// The target's class, weight and validity, as the NumPy path derives them.
struct tinyamp_ce_row { long long safe; float weight; bool valid; bool bad; };
"""

ROW = r"""
__device__ __forceinline__ tinyamp_ce_row tinyamp_ce_target(const long long* target, const {w}* weight,
        long long i, long long classes, long long ignore_index, int has_weight) {{
    const long long t = target[i];
    tinyamp_ce_row r;
    r.valid = t != ignore_index;
    const bool bad = r.valid && (t < 0 || t >= classes);
    r.bad = bad;
    r.safe = (r.valid && !bad) ? t : 0;
    r.weight = (has_weight ? tinyamp_{wc}_to_f32(weight[r.safe]) : 1.0f) * (r.valid ? 1.0f : 0.0f);
    if (bad) r.weight = TINYAMP_NAN;  // no host check: an out-of-range target makes the loss NaN
    return r;
}}
"""

FORWARD = r"""
extern "C" __global__ void {name}(const {x}* x, const long long* target, const {w}* weight,
        const long long n, const long long classes, const long long ignore_index, const int has_weight,
        const int reduction, const int smoothing, const float hot_c, const float smooth_c,
        float* work, int* tickets, long long* error, {o}* out) {{
    // work: lse (n) | row losses (n) | row weights (n) | the tree's sums past shared memory (2 x slots) | count
    // | weight sum
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long slots = (n + 63) / 64;
    float* const lse_out = work;
    float* const loss_rows = work + n;
    float* const weight_rows = work + 2 * n;
    float* const stats = work + 3 * n + 2 * slots;  // [count, sum of the class weights]
    if (i < n) {{  // no return before the barriers below: every thread of a block reaches them
        const {x}* row = x + i * classes;
        // The row maximum; NaN wins (NumPy's max), an all -inf row shifts by 0.
        float m = -TINYAMP_INF;
        bool nan = false;
        for (long long j = 0; j < classes; ++j) {{
            const float v = tinyamp_{xc}_to_f32(row[j]);
            if (isnan(v)) nan = true; else if (v > m) m = v;
        }}
        if (nan) m = TINYAMP_NAN;
        if (m == -TINYAMP_INF) m = 0.0f;
        const float lse = logf(tinyamp_numpy_sum([&](long long j) {{
            return expf(tinyamp_{xc}_to_f32(row[j]) - m); }}, classes));
        const tinyamp_ce_row r = tinyamp_ce_target(target, weight, i, classes, ignore_index, has_weight);
        if (r.bad) {{  // the device-side error flag, read by the host at its next read that waits anyway
            error[0] = 1;
            error[1] = target[i];
        }}
        const float picked = (tinyamp_{xc}_to_f32(row[r.safe]) - m) - lse;
        float loss = (-r.weight) * picked;
        if (smoothing) {{
            const float total = tinyamp_numpy_sum([&](long long j) {{
                const float w = has_weight ? tinyamp_{wc}_to_f32(weight[j]) : 1.0f;
                return ((tinyamp_{xc}_to_f32(row[j]) - m) - lse) * w; }}, classes);
            const float smooth = (-total) * (r.valid ? 1.0f : 0.0f);
            loss = hot_c * loss + smooth_c * smooth;
            if (i == 0) stats[1] = tinyamp_numpy_sum([&](long long j) {{
                return has_weight ? tinyamp_{wc}_to_f32(weight[j]) : 1.0f; }}, classes);
        }}
        lse_out[i] = lse + m;
        if (reduction == 0) {{
            out[i] = tinyamp_f32_to_{oc}(loss);
        }} else {{
            loss_rows[i] = loss;
            weight_rows[i] = r.weight;
        }}
    }}
    if (reduction == 0) return;  // the same for every thread of the grid
    // One ticket per CUDA block once its rows are written (the barrier, then a fence at device scope before
    // the atomic); the last block to take one sums every row, its fence ordering its reads after the others'.
    __shared__ int last;
    __syncthreads();
    if (threadIdx.x == 0) {{
        __threadfence();
        last = atomicAdd(&tickets[0], 1) == (int)gridDim.x - 1;
        if (last) {{
            tickets[0] = 0;  // for the next launch (or graph replay) on the stream
            __threadfence();
        }}
    }}
    __syncthreads();
    if (!last) return;
    // NumPy's tree with the block's threads. Over more than 128 rows every node holds 64 rows or more, so at
    // any depth each 64-row slot holds at most one node's first row, and that node holds the slot's last row
    // (row_of(s)). A node's sum goes to the slot of its first row: first the leaves, one a thread, loaded from
    // L2 (__ldcg: other blocks wrote the rows; independent loads overlap), then the inner nodes a depth at a
    // time from the deepest, each the sum of its two children's slots.
    __shared__ tinyamp_pair sums_here[{shared_slots}];
    tinyamp_pair* const sums = slots <= {shared_slots} ? sums_here : reinterpret_cast<tinyamp_pair*>(work + 3 * n);
    auto row_of = [&](long long s) {{ return 64 * s + 63 < n ? 64 * s + 63 : n - 1; }};
    for (long long s = threadIdx.x; s < slots; s += blockDim.x) {{
        long long offset, len;
        tinyamp_block_of(row_of(s), n, &offset, &len);
        if (offset >= 64 * s) sums[s] = tinyamp_pairwise_block([&](long long k) {{
            return tinyamp_pair{{__ldcg(loss_rows + k), __ldcg(weight_rows + k)}}; }}, offset, len);
    }}
    __syncthreads();
    int depths = 0;  // inner nodes lie above this depth: a node of m rows has children of at most m / 2 + 8
    for (long long m = n; m > 128; m = m / 2 + 8) ++depths;
    for (int depth = depths - 1; depth >= 0; --depth) {{
        for (long long s = threadIdx.x; s < slots; s += blockDim.x) {{
            long long offset, len;
            if (!tinyamp_node_of(row_of(s), n, depth, &offset, &len) || offset < 64 * s || len <= 128) continue;
            const long long half = len / 2 - (len / 2) % 8;
            sums[s] = sums[s] + sums[(offset + half) / 64];
        }}
        __syncthreads();
    }}
    if (threadIdx.x != 0) return;
    const float total = 0.0f + sums[0].a, count = 0.0f + sums[0].b;
    stats[0] = count;
    out[0] = tinyamp_f32_to_{oc}(reduction == 1 ? total / count : total);
}}
"""

BACKWARD = r"""
extern "C" __global__ void {name}(const {x}* x, const long long* target, const {w}* weight, const {g}* upstream,
        const float* lse, const float* stats, const long long n, const long long classes,
        const long long ignore_index, const int has_weight, const int reduction, const int smoothing,
        const float hot_c, const double smooth_d, const int via_f32, {o}* grad) {{
    const long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= n * classes) return;
    const long long i = k / classes, j = k % classes;
    const tinyamp_ce_row r = tinyamp_ce_target(target, weight, i, classes, ignore_index, has_weight);
    float u = tinyamp_{gc}_to_f32(upstream[reduction == 0 ? i : 0]);
    if (reduction == 1) u = u / (stats[0] == 0.0f ? 1.0f : stats[0]);  // every target ignored: divide by 1
    const float hot = hot_c * r.weight;
    const float e = expf(tinyamp_{xc}_to_f32(x[k]) - lse[i]);
    if (!smoothing) {{
        float g = e * (hot * u);
        if (j == r.safe) g = g - hot * u;
        grad[k] = tinyamp_f32_to_{oc}(g);
        return;
    }}
    // NumPy's dtypes: (eps / C) * valid is float64, so the smoothing terms and g are float64.
    const double spread = smooth_d * (r.valid ? 1.0 : 0.0);
    const double w = has_weight ? (double)tinyamp_{wc}_to_f32(weight[j]) : 1.0;
    const double total = (double)hot + spread * (double)stats[1];
    double g = (double)e * (total * (double)u);
    if (j == r.safe) g = g - (double)(hot * u);
    g = g - (spread * w) * (double)u;
    grad[k] = via_f32 ? tinyamp_f32_to_{oc}((float)g) : tinyamp_f64_to_{oc}(g);
}}
"""


def _suffix(dtype: Any) -> str:
    return STORAGE[np.dtype(dtype)][1]


def _storage(dtype: Any) -> str:
    return STORAGE[np.dtype(dtype)][0]


def _prelude(weight_dtype: Any) -> str:
    return (F16_CONVERSIONS + BF16_CONVERSIONS + PAIRWISE
            + ROW.format(w=_storage(weight_dtype), wc=_suffix(weight_dtype)))


@lru_cache(maxsize=None)
def forward_source(x_dtype: Any, weight_dtype: Any, out_dtype: Any) -> tuple[str, str]:
    """(kernel name, CUDA source) of the forward for one (logits, class weight, loss) dtype triple."""
    xc, wc, oc = _suffix(x_dtype), _suffix(weight_dtype), _suffix(out_dtype)
    name = f"tinyamp_ce_forward_{xc}_{wc}_{oc}"
    return name, _prelude(weight_dtype) + FORWARD.format(
        name=name, shared_slots=SHARED_SLOTS, x=_storage(x_dtype), xc=xc, w=_storage(weight_dtype), wc=wc,
        o=_storage(out_dtype), oc=oc)


@lru_cache(maxsize=None)
def backward_source(x_dtype: Any, weight_dtype: Any, gy_dtype: Any, out_dtype: Any) -> tuple[str, str]:
    """(kernel name, CUDA source) of the backward for one dtype combination."""
    xc, wc, gc, oc = (_suffix(d) for d in (x_dtype, weight_dtype, gy_dtype, out_dtype))
    name = f"tinyamp_ce_backward_{xc}_{wc}_{gc}_{oc}"
    return name, _prelude(weight_dtype) + BACKWARD.format(
        name=name, x=_storage(x_dtype), xc=xc, w=_storage(weight_dtype), wc=wc, g=_storage(gy_dtype), gc=gc,
        o=_storage(out_dtype), oc=oc)


def raw_sources() -> list[tuple[str, str]]:
    """(name, source) of every kernel variant (for the source checks)."""
    fused = launch.FUSED_DTYPES
    return ([forward_source(x, w, o) for x in fused for w in fused for o in fused]
            + [backward_source(x, w, g, o) for x in fused for w in fused for g in fused for o in fused])


def work_size(n: int) -> int:
    """float32 elements of the forward's work array for ``n`` rows (see FORWARD)."""
    return 3 * n + 2 * ((n + SLOT - 1) // SLOT) + 2


def _ticket_array(dev: Any) -> Any:
    """The device's persistent, zeroed ticket: how many CUDA blocks of the running forward are done."""
    return launch.device_zeros(dev, "ce_forward_ticket", 1, np.int32)


def forward(x: Any, target: Any, weight: Any, *, ignore_index: int, reduction: str, hot_c: Any, smooth_c: Any,
            smoothing: bool, out_dtype: Any, out_of_range: "Callable[[int], Exception] | None" = None
            ) -> tuple[Any, Any]:
    """(loss, work) for 2-D logits on the device; ``work`` holds what :func:`backward` reads.

    ``hot_c`` and ``smooth_c`` are the float32 factors ``1 - eps`` and ``eps / C``
    of the NumPy path; ``weight`` is None or the (C,) class weights. An
    out-of-range target sets the device's error flag (and makes the loss NaN);
    ``out_of_range(value)`` makes the exception the next host read raises.
    """
    cp = launch._cp()
    n, classes = x.shape
    w_dtype = dt.float32 if weight is None else weight.dtype
    name, source = forward_source(x.dtype, w_dtype, np.dtype(out_dtype))
    kernel = launch.raw_kernel(name, source)
    dev = launch._device(x)
    with dev:
        work = cp.empty(work_size(n), dtype=np.float32)
        out = cp.empty((n,) if reduction == "none" else (), dtype=out_dtype)
        tickets = _ticket_array(dev)
        error = _error_flag(dev)
        backend.defer_device_check(("cross_entropy", dev.id), _error_check(error, out_of_range))
        w_arg = weight if weight is not None else _placeholder(dev)
        launch.count(name)
        kernel(((n + BLOCK - 1) // BLOCK,), (BLOCK,),
               (x, target, w_arg, np.int64(n), np.int64(classes), np.int64(ignore_index),
                np.int32(weight is not None), np.int32(REDUCTIONS[reduction]), np.int32(smoothing),
                np.float32(hot_c), np.float32(smooth_c), work, tickets, error, out))
    return out, work


def stats_of(work: Any, n: int) -> Any:
    """The (count, class-weight sum) pair in a forward's work array."""
    return work[work_size(n) - 2:]


def backward(x: Any, target: Any, weight: Any, gy: Any, work: Any, *, ignore_index: int, reduction: str,
             hot_c: Any, smooth_d: float, smoothing: bool, out_dtype: Any, via_float32: bool) -> Any:
    """The logits' gradient (``out_dtype``) from the forward's ``work``; one launch."""
    cp = launch._cp()
    n, classes = x.shape
    w_dtype = dt.float32 if weight is None else weight.dtype
    name, source = backward_source(x.dtype, w_dtype, gy.dtype, np.dtype(out_dtype))
    kernel = launch.raw_kernel(name, source)
    dev = launch._device(x)
    with dev:
        gy = cp.ascontiguousarray(gy)  # the kernel indexes it densely ("none": a sum's gradient is a broadcast view)
        gx = cp.empty((n, classes), dtype=out_dtype)
        w_arg = weight if weight is not None else _placeholder(dev)
        total = n * classes
        launch.count(name)
        kernel(((total + BLOCK - 1) // BLOCK,), (BLOCK,),
               (x, target, w_arg, gy, work[:n], stats_of(work, n), np.int64(n), np.int64(classes),
                np.int64(ignore_index), np.int32(weight is not None), np.int32(REDUCTIONS[reduction]),
                np.int32(smoothing), np.float32(hot_c), np.float64(smooth_d), np.int32(via_float32), gx))
    return gx


def _error_flag(dev: Any) -> Any:
    """The device's persistent error flag: (1 if a target was out of range, that target), reset when read."""
    return launch.device_zeros(dev, "ce_target_error", 2, np.int64)


def _error_check(flag: Any, out_of_range: "Callable[[int], Exception] | None") -> Callable[[], "Exception | None"]:
    """What the next host read runs: copy the flag (16 bytes; that read waited for the device already, so
    this copy waits for nothing: ``blocking=False``), and reset it if set."""
    def check() -> "Exception | None":
        found, value = (int(v) for v in flag.get(blocking=False))
        if not found:
            return None
        flag.fill(0)
        if out_of_range is not None:
            return out_of_range(value)
        return IndexError(f"cross_entropy: target value {value} is out of range")
    return check


def _placeholder(dev: Any) -> Any:
    """A one-element float32 device array standing for "no class weight" (never read)."""
    return launch.device_zeros(dev, "no_class_weight", 1, np.float32)
