"""Benchmark tinyamp's fp8: CPU casts, the emulated fp8 Linear step, and (``--gpu``) the Hopper targets.

``python benchmarks/bench_fp8.py`` prints tables and writes ``--json``
(default ``benchmarks/bench_fp8.json``):

- ``casts``: ns/element of the float32 -> E4M3 encoder (saturating; scaled),
  the table decoder, amax, against ml_dtypes' ``astype`` (and clip + astype,
  the saturating rule) and a float32 copy, on 4M elements. Process CPU time
  (the work is single-threaded; the machine is shared), min and median of
  interleaved rounds. Targets: encode <= 1.5 ns, decode <= 1 ns.
- ``linear``: one training step (forward, backward, SGD) of an MLP of two
  ``nn.Linear`` layers under ``autocast(bfloat16)`` alone and inside
  ``fp8_autocast`` for each recipe; the ratio fp8 / bf16 (target <= 2).
- ``--gpu``: the Hopper targets for a session with a GPU (not run without
  one): the cuBLASLt fp8 GEMM at 8192^3 against tinyamp's float16 GEMM
  (FAST_ACCUM on and off; targets >= 1.2 PFLOP/s and >= 1.6x), its normwise
  error against the CPU's float32 sum of the same operands (< 1e-3 split),
  and a Linear(8192, 8192) step on 16k tokens in fp8 against bfloat16
  (vs_float16 is then "vs bfloat16"; target >= 1.4x).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

# One BLAS thread: the timings are process CPU time, which a spinning BLAS thread on a shared machine inflates.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import machine, table, write_json  # noqa: E402
from tinyamp.kernels import fp8  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def cpu_time(fn: Callable[[], Any], rounds: int = 7, inner: int = 3) -> dict:
    """Per-call process CPU seconds of ``fn``: min and median over ``rounds`` (after two warm-up calls)."""
    fn()
    fn()
    samples = []
    for _ in range(rounds):
        start = time.process_time()
        for _ in range(inner):
            fn()
        samples.append((time.process_time() - start) / inner)
    return {"min": min(samples), "median": statistics.median(samples)}


def bench_casts(n: int) -> list[dict]:
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(n) * 40).astype(np.float32)
    codes = fp8.encode(x, fp8.E4M3.dtype)
    copy_out = np.empty_like(x)
    scale = np.array([np.float32(448 / 100)])
    cases = {
        "float32 copy (memory floor)": lambda: np.copyto(copy_out, x),
        "ml_dtypes astype float32 -> e4m3fn": lambda: x.astype(ml_dtypes.float8_e4m3fn),
        "clip + ml_dtypes astype (saturating)": lambda: np.clip(x, -448, 448).astype(ml_dtypes.float8_e4m3fn),
        "tinyamp encode e4m3 (saturating)": lambda: fp8.encode(x, fp8.E4M3.dtype),
        "tinyamp encode e4m3 x scale": lambda: fp8.encode(x, fp8.E4M3.dtype, scale),
        "tinyamp encode e5m2 (saturating)": lambda: fp8.encode(x, fp8.E5M2.dtype),
        "ml_dtypes astype e4m3fn -> float32": lambda: codes.view(ml_dtypes.float8_e4m3fn).astype(np.float32),
        "tinyamp decode e4m3 (table)": lambda: fp8.decode(codes, fp8.E4M3.dtype),
        "tinyamp decode e4m3 x scale_inv": lambda: fp8.decode(codes, fp8.E4M3.dtype, scale),
        "tinyamp amax": lambda: fp8.amax(x),
    }
    rows = []
    for name, fn in cases.items():
        t = cpu_time(fn)
        rows.append({"case": name, "ns_per_element_min": t["min"] / n * 1e9,
                     "ns_per_element_median": t["median"] / n * 1e9})
    return rows


def bench_linear(batch: int, width: int, recipes: list[str]) -> list[dict]:
    import tinyamp as ta

    def make_step(recipe: "Any | None") -> Callable[[], Any]:
        ta.manual_seed(0)
        model = ta.nn.Sequential(ta.nn.Linear(width, width), ta.nn.ReLU(), ta.nn.Linear(width, width))
        opt = ta.optim.SGD(model.parameters(), lr=0.01)
        x = ta.randn(batch, width)

        def step() -> None:
            opt.zero_grad()
            with ta.autocast(dtype=ta.bfloat16):
                if recipe is None:
                    loss = model(x).float().square().mean()
                else:
                    with ta.amp.fp8_autocast(enabled=True, fp8_recipe=recipe):
                        y = model(x)
                    loss = y.float().square().mean()
            loss.backward()
            opt.step()
        return step

    made = {"bfloat16": None, **{name: RECIPES[name]() for name in recipes}}
    steps = {name: make_step(recipe) for name, recipe in made.items()}
    times = {name: [] for name in steps}
    for _ in range(5):  # interleaved rounds: a load change hits every case alike
        for name, step in steps.items():
            times[name].append(cpu_time(step, rounds=1, inner=3)["min"])
    base = statistics.median(times["bfloat16"])
    return [{"case": name, "ms_median": statistics.median(t) * 1e3,
             "vs_bfloat16": statistics.median(t) / base} for name, t in times.items()]


def _recipes() -> dict:
    import tinyamp as ta
    r = ta.amp.recipe
    return {"delayed": lambda: r.DelayedScaling(fp8_format=r.Format.HYBRID, amax_history_len=16),
            "current": lambda: r.Float8CurrentScaling(),
            "block": lambda: r.Float8BlockScaling(),
            "mxfp8": lambda: r.MXFP8BlockScaling()}


RECIPES: dict = {}


def bench_gpu(size: int) -> list[dict]:  # pragma: no cover - needs a GPU with compute capability 8.9+
    """The Hopper targets: fp8 GEMM at size^3 (cuBLASLt, FAST_ACCUM on/off) vs tinyamp's float16 GEMM."""
    import tinyamp as ta
    from benchmarks.common import timeit
    from tinyamp import backend
    from tinyamp.kernels import fp8_gemm, fp8_quantize
    from tinyamp.kernels.cuda import cublaslt_fp8
    from tinyamp.kernels.gemm import gemm

    cp = backend.cupy()
    if backend.standin_active() or not ta.cuda.is_available():
        raise SystemExit("--gpu needs a real GPU (this is the Hopper run; nothing was timed)")
    if cublaslt_fp8.compute_capability() < cublaslt_fp8.MIN_COMPUTE_CAPABILITY:
        raise SystemExit(f"--gpu needs compute capability 8.9+ for cuBLASLt's fp8 GEMM, this GPU has "
                         f"{cublaslt_fp8.compute_capability()}")
    sync = cp.cuda.Stream.null.synchronize
    rng = np.random.default_rng(0)
    a16 = cp.asarray(rng.standard_normal((size, size)).astype(np.float16))
    b16 = cp.asarray(rng.standard_normal((size, size)).astype(np.float16))
    qa, _ = fp8_quantize.quantize_current(a16, fp8.E4M3)
    qb, _ = fp8_quantize.quantize_current(b16, fp8.E4M3)
    flops = 2.0 * size ** 3
    rows = []
    t16 = timeit(lambda: gemm(a16, b16, trans_b=True), sync=sync)["median"]
    rows.append({"case": f"float16 GEMM {size}^3", "ms": t16 * 1e3, "tflops": flops / t16 / 1e12})
    bf16 = np.dtype(ml_dtypes.bfloat16)
    for model in ("hopper_fast", "promote_128"):  # FAST_ACCUM on, then the split accumulator
        t8 = timeit(lambda: fp8_gemm.fp8_gemm(qa, qb, bf16, trans_b=True, accumulate=model), sync=sync)["median"]
        rows.append({"case": f"fp8 E4M3 GEMM {size}^3, {model}", "ms": t8 * 1e3, "tflops": flops / t8 / 1e12,
                     "vs_float16": t16 / t8})
    # Accuracy against the CPU emulation of the same operands (target: normwise < 1e-3 with the split accumulator).
    cpu = fp8_gemm.fp8_gemm(*(fp8_quantize.Fp8Array(cp.asnumpy(q.data), cp.asnumpy(q.scale_inv), q.fmt, q.dtype)
                              for q in (qa, qb)), np.float32, trans_b=True)
    for model in ("hopper_fast", "promote_128"):
        got = cp.asnumpy(fp8_gemm.fp8_gemm(qa, qb, np.float32, trans_b=True, accumulate=model))
        rows.append({"case": f"normwise error vs the CPU's float32 sum, {model}", "ms": 0.0, "tflops": 0.0,
                     "vs_float16": float(np.linalg.norm(got - cpu) / np.linalg.norm(cpu))})
    # The Linear-heavy step (target: fp8 >= 1.4x bfloat16): Linear(size, size) on 16k tokens, forward + backward.
    layer = ta.nn.Linear(size, size, device="cuda")
    x = ta.randn(16384, size, device="cuda")

    def linear_step(recipe: Any) -> None:
        layer.zero_grad()
        with ta.autocast("cuda", dtype=ta.bfloat16):
            with ta.amp.fp8_autocast(enabled=recipe is not None, fp8_recipe=recipe):
                y = layer(x)
        y.backward(y.detach())

    base = timeit(lambda: linear_step(None), sync=sync)["median"]
    rows.append({"case": f"Linear({size}, {size}) step, 16k tokens, bfloat16", "ms": base * 1e3,
                 "tflops": 3 * 2.0 * 16384 * size * size / base / 1e12})
    for name, recipe in (("current", ta.amp.recipe.Float8CurrentScaling()),
                         ("delayed", ta.amp.recipe.DelayedScaling(amax_history_len=16))):
        t = timeit(lambda: linear_step(recipe), sync=sync)["median"]
        rows.append({"case": f"Linear({size}, {size}) step, 16k tokens, fp8 {name}", "ms": t * 1e3,
                     "tflops": 3 * 2.0 * 16384 * size * size / t / 1e12, "vs_float16": base / t})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1 << 22, help="elements of the cast benchmarks")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--skip-linear", action="store_true")
    parser.add_argument("--gpu", action="store_true", help="the Hopper targets (needs a GPU)")
    parser.add_argument("--gpu-size", type=int, default=8192)
    parser.add_argument("--json", default=str(ROOT / "benchmarks" / "bench_fp8.json"))
    args = parser.parse_args()
    if not args.skip_linear:
        RECIPES.update(_recipes())
    payload: dict = {"machine": machine()}
    if args.gpu:
        payload["gpu"] = bench_gpu(args.gpu_size)
        print(table([[r["case"], f"{r['ms']:.3f}", f"{r['tflops']:.0f}", f"{r.get('vs_float16', 1):.2f}"]
                     for r in payload["gpu"]], ["case", "ms", "TFLOP/s", "vs float16"]))
        write_json(args.json, payload)
        return
    payload["casts"] = bench_casts(args.n)
    print(f"casts, {args.n} elements, process CPU time per element")
    print(table([[r["case"], f"{r['ns_per_element_min']:.2f}", f"{r['ns_per_element_median']:.2f}"]
                 for r in payload["casts"]], ["case", "ns min", "ns median"]))
    if not args.skip_linear:
        payload["linear"] = bench_linear(args.batch, args.width, list(RECIPES))
        print(f"\nMLP step ({args.batch}x{args.width}, two Linear layers, bf16 autocast; fp8 inside fp8_autocast)")
        print(table([[r["case"], f"{r['ms_median']:.1f}", f"{r['vs_bfloat16']:.2f}"] for r in payload["linear"]],
                    ["case", "ms median", "vs bfloat16"]))
    write_json(args.json, payload)


if __name__ == "__main__":
    main()
