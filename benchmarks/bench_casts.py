"""Benchmark CPU float32/float16/bfloat16 conversions and the AMP fused ops.

Prints a table of ns/element (median and min over repeats) for every
candidate on 1024x1024 and 128x1024 arrays and writes it as JSON
(``--json``, default ``benchmarks/bench_casts.json``).

Candidates per conversion: ``astype``; ``np.copyto`` into a preallocated
buffer; a 65536-entry lookup table (float16 -> float32 only); the numba
kernels (serial, as shipped, plus an experimental ``parallel=True`` variant);
and ``convert`` itself (allocating and with ``out=``). Then ReLU, ReLU backward
and linear's bias epilogue (bias + downcast: ``gemm_bias``'s CPU pass), and a
128x784 @ 784x1024 sgemm followed by each epilogue. (The NumPy bit recipes
that once stood between ``astype`` and numba were removed with the path: numba
is a dependency; figures of them in benchmarks/RESULTS.md.)

Run with ``MALLOC_MMAP_THRESHOLD_=4294967296 MALLOC_TRIM_THRESHOLD_=4294967296``
for stable numbers (glibc otherwise returns large buffers to the OS and every
fresh output page-faults). The script re-executes itself with them set unless
``--raw-malloc`` is given. The machine should be otherwise idle: the load
average is printed before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import timeit
from pathlib import Path

import ml_dtypes
import numpy as np

from tinyamp import kernels
from tinyamp.kernels import convert
from tinyamp.kernels.cpu import cpu_numba, cpu_path, elementwise_cpu

ROOT = Path(__file__).resolve().parents[1]
BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
F32 = np.dtype(np.float32)
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "4294967296", "MALLOC_TRIM_THRESHOLD_": "4294967296"}


def bench(fn, n, repeats, min_time):
    """Median and min ns/element of fn over ``repeats`` timed repeats."""
    fn()
    fn()
    timer = timeit.Timer(fn)
    number = 1
    while True:
        t = timer.timeit(number)
        if t >= min_time or number >= 1 << 20:
            break
        number *= 2 if t <= 0 else max(2, min(int(min_time / t * 1.2), 100))
    times = [timer.timeit(number) / number for _ in range(repeats)]
    return float(np.median(times)) / n * 1e9, float(np.min(times)) / n * 1e9


def chunked(fn, chunk):
    def run(src, dst):
        for s in range(0, src.size, chunk):
            fn(src[s : s + chunk], dst[s : s + chunk])

    return run


def make_parallel_kernels(nbk):
    """Experimental parallel=True variants of the shipped numba kernels."""
    from numba import njit, prange  # noqa: PLC0415

    f2h_hw, f2h_int, h2f, f2b = nbk._f2h_hw, nbk._f2h_int, nbk._h2f_hw, nbk._f2b_bits

    @njit(parallel=True)
    def par_f32_to_f16_hw(src, dst):
        for i in prange(src.size):
            dst[i] = np.uint16(f2h_hw(src[i]))

    @njit(parallel=True)
    def par_f32_to_f16_int(src, dst):
        for i in prange(src.size):
            dst[i] = np.uint16(f2h_int(src[i]))

    @njit(parallel=True)
    def par_f16_to_f32(src, dst):
        for i in prange(src.size):
            dst[i] = h2f(np.uint32(src[i]))

    @njit(parallel=True)
    def par_f32_to_bf16(src, dst):
        for i in prange(src.size):
            dst[i] = np.uint16(f2b(src[i]))

    @njit(parallel=True)
    def par_epi_f16(y, bias, dst):
        rows, cols = y.shape
        for r in prange(rows):
            for c in range(cols):
                dst[r, c] = np.uint16(f2h_hw(nbk._nb_fbits(y[r, c] + bias[c])))

    return dict(
        f32_to_f16_hw=par_f32_to_f16_hw,
        f32_to_f16_int=par_f32_to_f16_int,
        f16_to_f32=par_f16_to_f32,
        f32_to_bf16=par_f32_to_bf16,
        epi_f16=par_epi_f16,
    )


def run(args):
    cv, ew, nbk = convert, elementwise_cpu, cpu_numba
    have_numba = cpu_path.numba_available() if cpu_path.BACKEND == "numba" else False
    t0 = time.time()
    kernels.warmup()
    warm_s = time.time() - t0
    par = None
    if have_numba:
        nbk.select_f16_impl("int")
        kernels.warmup()
        nbk.select_f16_impl("hw" if cpu_path.F16C else "int")
        if not args.no_parallel:
            par = make_parallel_kernels(nbk)
    rng = np.random.default_rng(0)
    results = []

    def add(group, shape, name, fn, n):
        med, mn = bench(fn, n, args.repeats, args.min_time)
        row = dict(group=group, shape=list(shape), candidate=name, ns_per_elem_median=med, ns_per_elem_min=mn)
        results.append(row)
        print(f"{group:18s} {str(shape):12s} {name:44s} {med:8.3f} {mn:8.3f}", flush=True)

    print(f"{'group':18s} {'shape':12s} {'candidate':44s} {'median':>8s} {'min':>8s}   (ns/element)")
    sizes = [tuple(s) for s in args.shapes]
    for shape in sizes:
        n = int(np.prod(shape))
        x32 = rng.standard_normal(shape).astype(np.float32)
        x16 = x32.astype(F16)
        xb = x32.astype(BF16)
        o16 = np.empty(shape, F16)
        ob = np.empty(shape, BF16)
        o32 = np.empty(shape, F32)
        f32 = x32.reshape(-1)
        u32 = f32.view(np.uint32)
        h16 = x16.reshape(-1).view(np.uint16)
        hb = xb.reshape(-1).view(np.uint16)
        o16u = o16.reshape(-1).view(np.uint16)
        obu = ob.reshape(-1).view(np.uint16)
        o32f = o32.reshape(-1)
        o32u = o32f.view(np.uint32)

        # ---- float16 -> float32
        g = "f16->f32"
        table = np.arange(65536, dtype=np.uint16).view(F16).astype(F32)
        add(g, shape, "astype", lambda: x16.astype(F32), n)
        add(g, shape, "copyto(out)", lambda: np.copyto(o32, x16), n)
        add(g, shape, "LUT np.take(table, u16, out)", lambda: np.take(table, h16, out=o32f), n)
        add(g, shape, "LUT table[u16]", lambda: table[h16], n)
        if have_numba:
            add(g, shape, "numba serial (out)", lambda: nbk.KERNELS["f16_to_f32"](h16, o32u), n)
            if par:
                add(g, shape, "numba parallel (out)", lambda: par["f16_to_f32"](h16, o32u), n)
            add(g, shape, "convert numba (alloc)", lambda: cv.convert(x16, F32, backend="numba"), n)
            add(g, shape, "convert numba (out)", lambda: cv.convert(x16, F32, out=o32, backend="numba"), n)

        # ---- float32 -> float16
        g = "f32->f16"
        add(g, shape, "astype", lambda: x32.astype(F16), n)
        add(g, shape, "copyto(out)", lambda: np.copyto(o16, x32, casting="same_kind"), n)
        if have_numba:
            add(g, shape, "numba serial F16C (out)", lambda: nbk.KERNELS["f32_to_f16_hw"](u32, o16u), n)
            add(g, shape, "numba serial int (out)", lambda: nbk.KERNELS["f32_to_f16_int"](u32, o16u), n)
            if par:
                add(g, shape, "numba parallel F16C (out)", lambda: par["f32_to_f16_hw"](u32, o16u), n)
                add(g, shape, "numba parallel int (out)", lambda: par["f32_to_f16_int"](u32, o16u), n)
            add(g, shape, "convert numba (alloc)", lambda: cv.convert(x32, F16, backend="numba"), n)
            add(g, shape, "convert numba (out)", lambda: cv.convert(x32, F16, out=o16, backend="numba"), n)

        # ---- float32 -> bfloat16
        g = "f32->bf16"

        def bf_bits(src=u32, dst=obu):
            t = np.right_shift(src, np.uint32(16))
            np.bitwise_and(t, np.uint32(1), out=t)
            np.add(t, np.uint32(0x7FFF), out=t)
            np.add(t, src, out=t)
            np.right_shift(t, np.uint32(16), out=t)
            np.copyto(dst, t, casting="unsafe")  # (NaN fix-up omitted: lower bound)

        add(g, shape, "astype (ml_dtypes)", lambda: x32.astype(BF16), n)
        add(g, shape, "copyto(out)", lambda: np.copyto(ob, x32, casting="unsafe"), n)
        if have_numba:
            add(g, shape, "numba serial (out)", lambda: nbk.KERNELS["f32_to_bf16"](u32, obu), n)
            if par:
                add(g, shape, "numba parallel (out)", lambda: par["f32_to_bf16"](u32, obu), n)
            add(g, shape, "convert numba (alloc)", lambda: cv.convert(x32, BF16, backend="numba"), n)

        # ---- bfloat16 -> float32
        g = "bf16->f32"
        add(g, shape, "astype (ml_dtypes)", lambda: xb.astype(F32), n)
        add(g, shape, "copyto(out)", lambda: np.copyto(o32, xb), n)
        if have_numba:
            add(g, shape, "numba serial (out)", lambda: nbk.KERNELS["bf16_to_f32"](hb, o32u), n)
            add(g, shape, "convert numba (alloc)", lambda: cv.convert(xb, F32, backend="numba"), n)

        # ---- float16 <-> bfloat16
        g = "f16->bf16"
        add(g, shape, "astype (ml_dtypes)", lambda: x16.astype(BF16), n)
        if have_numba:
            add(g, shape, "convert numba (alloc)", lambda: cv.convert(x16, BF16, backend="numba"), n)
        g = "bf16->f16"
        add(g, shape, "astype (ml_dtypes)", lambda: xb.astype(F16), n)
        if have_numba:
            add(g, shape, "convert numba (alloc)", lambda: cv.convert(xb, F16, backend="numba"), n)

        # ---- ReLU forward on float16
        g = "relu f16"
        v = x16.reshape(-1).view(np.int16)
        ov = o16.reshape(-1).view(np.int16)
        add(g, shape, "np.maximum(x, 0) float16", lambda: np.maximum(x16, 0), n)
        add(g, shape, "np.maximum(x, 0) float32 (reference)", lambda: np.maximum(x32, 0), n)
        add(g, shape, "np.maximum(int16 view, 0) (no NaN fix)", lambda: np.maximum(v, 0, out=ov), n)
        if have_numba:
            add(g, shape, "relu_lowp numba (alloc)", lambda: ew.relu_lowp(x16, backend="numba"), n)
            add(g, shape, "relu_lowp numba (out)", lambda: ew.relu_lowp(x16, out=o16, backend="numba"), n)

        # ---- ReLU backward on float16
        g = "relu-bwd f16"
        gr = rng.standard_normal(shape).astype(F16)
        add(g, shape, "np.where(x > 0, g, 0) float16", lambda: np.where(x16 > 0, gr, 0), n)
        add(g, shape, "g * (x > 0) float16", lambda: gr * (x16 > 0), n)
        mask16 = (x16 > 0).astype(F16)
        add(g, shape, "g * mask (mask precomputed f16)", lambda: gr * mask16, n)
        add(g, shape, "np.where(x > 0, g, 0) float32 (reference)", lambda: np.where(x32 > 0, x32, 0), n)
        if have_numba:
            add(g, shape, "relu_backward_lowp numba (alloc)", lambda: ew.relu_backward_lowp(gr, x16, backend="numba"), n)
            add(g, shape, "relu_backward_lowp numba (out)", lambda: ew.relu_backward_lowp(gr, x16, out=o16, backend="numba"), n)

        # ---- epilogue on a float32 GEMM output: bias + downcast (linear's)
        g = "epilogue f16"
        b32 = rng.standard_normal(shape[-1]).astype(np.float32)
        b16 = b32.astype(F16)

        def epi_f16_ufuncs():  # naive AMP: downcast, then a float16 add (two roundings)
            h = x32.astype(F16)
            h += b16
            return h

        def epi_f32_astype():  # fp32 epilogue, one astype downcast (gemm_bias without numba)
            t = x32 + b32
            return t.astype(F16)

        add(g, shape, "astype + f16 add", epi_f16_ufuncs, n)
        add(g, shape, "f32 add + astype", epi_f32_astype, n)
        if have_numba:
            add(g, shape, "bias_round numba (out)", lambda: nbk.KERNELS["bias_round_f16"](x32, b32, o16u.reshape(shape)), n)
            if par:
                add(g, shape, "numba parallel epilogue (out)", lambda: par["epi_f16"](x32, b32, o16u.reshape(shape)), n)

    # ---- small arrays: where the fixed per-call cost decides (SMALL threshold)
    for n in (256, 1024, 4096, 16384):
        x32 = rng.standard_normal(n).astype(np.float32)
        x16 = x32.astype(F16)
        shape = (n,)
        add("small f32->f16", shape, "astype", lambda: x32.astype(F16), n)
        add("small f16->f32", shape, "astype", lambda: x16.astype(F32), n)
        if have_numba:
            add("small f32->f16", shape, "convert numba", lambda: cv.convert(x32, F16, backend="numba"), n)
            add("small f16->f32", shape, "convert numba", lambda: cv.convert(x16, F32, backend="numba"), n)

    # ---- sgemm followed by the epilogue (interaction with OpenBLAS threads)
    g = "sgemm+epilogue"
    xa = rng.random((128, 784), dtype=np.float32)
    w = (rng.standard_normal((784, 1024)) * 0.03).astype(np.float32)
    b = np.zeros(1024, np.float32)
    y = np.empty((128, 1024), np.float32)
    out16 = np.empty((128, 1024), F16)
    n = y.size
    shape = (128, 784, 1024)
    b16 = b.astype(F16)

    def gemm_only():
        np.matmul(xa, w, out=y)

    def gemm_f16_ufuncs():
        np.matmul(xa, w, out=y)
        h = y.astype(F16)
        h += b16
        return h

    def gemm_f32_astype():
        np.matmul(xa, w, out=y)
        np.add(y, b, out=y)
        return y.astype(F16)

    add(g, shape, "sgemm only (ns per output element)", gemm_only, n)
    add(g, shape, "sgemm + astype + f16 ufuncs", gemm_f16_ufuncs, n)
    add(g, shape, "sgemm + f32 epilogue + astype", gemm_f32_astype, n)
    if have_numba:
        add(g, shape, "sgemm + bias_round numba", lambda: (gemm_only(), nbk.KERNELS["bias_round_f16"](y, b, out16.view(np.uint16))), n)
        if par:
            add(g, shape, "sgemm + numba parallel epilogue", lambda: (gemm_only(), par["epi_f16"](y, b, out16.view(np.uint16))), n)

    return dict(
        results=results,
        backend=cpu_path.BACKEND,
        f16c=cpu_path.F16C,
        numba=_version("numba"),
        numpy=np.__version__,
        ml_dtypes=ml_dtypes.__version__,
        python=platform.python_version(),
        machine=platform.machine(),
        cpu=_cpu_name(),
        warmup_s=warm_s,
        malloc_env={k: os.environ.get(k) for k in MALLOC_ENV},
        repeats=args.repeats,
    )


def _version(mod):
    try:
        return __import__(mod).__version__
    except Exception:
        return None


def _cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default=str(ROOT / "benchmarks" / "bench_casts.json"))
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--min-time", type=float, default=0.02, help="seconds per timed repeat")
    ap.add_argument("--shapes", type=lambda s: tuple(int(v) for v in s.split("x")), nargs="+",
                    default=[(1024, 1024), (128, 1024)], help="e.g. 1024x1024 128x1024")
    ap.add_argument("--no-parallel", action="store_true", help="skip the parallel=True numba variants")
    ap.add_argument("--raw-malloc", action="store_true", help="do not set the glibc malloc thresholds")
    args = ap.parse_args(argv)
    if not args.raw_malloc and any(os.environ.get(k) != v for k, v in MALLOC_ENV.items()):
        env = dict(os.environ, **MALLOC_ENV)
        return subprocess.call([sys.executable, *sys.argv], env=env)
    load0 = os.getloadavg()
    out = run(args)
    load1 = os.getloadavg()
    out["loadavg_before"], out["loadavg_after"] = load0, load1
    print(f"backend={out['backend']} f16c={out['f16c']} numba={out['numba']} loadavg before {load0} after {load1}")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
