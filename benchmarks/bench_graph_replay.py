"""Host time of each phase of a graphed step's call (``ta.cuda.make_graphed_step``), the GPU kept busy.

What the host does before a replay's launch delays the replay by as much when
the GPU is idle, so it adds to the captured step's wall time (issue 20: at
most PyTorch's captured step). A spin kernel keeps the GPU busy while each
phase is timed, so no phase waits for the device; each phase is called alone,
many times:

  * ``check inputs``, ``check replay state`` (autocast, the arrays the graph
    uses, hyper-parameters), ``refresh hyper-parameters``: tinyamp's Python;
  * ``load inputs``: the batch copied into the static inputs, as the step does
    it (``cupy.copyto``: one ``cudaMemcpyAsync`` per contiguous input), next to
    ``load by setitem`` (``static[...] = x``, CuPy's copy kernel) and
    ``load by memcpy`` (``MemoryPointer.copy_from_device_async`` called directly) for comparison;
  * ``replay launch``: ``CUDAGraph.replay`` (``cudaGraphLaunch``);
  * ``whole call``: the graphed step's ``__call__``.

MLP 784-H-10, SGD momentum, float16 autocast + GradScaler.

    python benchmarks/bench_graph_replay.py [--batch 4096] [--hidden 8192] [--json out.json]

On a machine without a GPU, ``TINYAMP_CUDA=standin`` runs it on the stand-in
(a smoke test: the stand-in's copies and launches are Python, not CuPy's).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any, Callable


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import tinyamp as ta  # noqa: E402
from tinyamp import backend  # noqa: E402

import common  # noqa: E402

CALLS = 50  # calls of a phase timed per GPU-busy window


def graphed_step(batch: int, hidden: int) -> tuple[Any, tuple]:
    """A captured AMP training step and a batch (other arrays than its static inputs)."""
    run = common.mlp_training(ta, batch, hidden, "cuda")
    inputs = (run.x, run.y)
    graphed = ta.cuda.make_graphed_step(run.step, inputs)
    for _ in range(graphed.num_warmup_iters + 2):  # warm-up, capture, replays
        graphed(*inputs)
    return graphed, inputs


def phase_us(cp: Any, fn: Callable[[], Any], rounds: int) -> list[float]:
    """Host microseconds per call of ``fn``, one median per round; the GPU busy throughout."""
    medians = []
    for _ in range(rounds):
        cp.cuda.Device().synchronize()
        if not backend.standin_active():
            common.gpu_spin(cp, 200_000_000)
        times = []
        for _ in range(CALLS):
            start = time.perf_counter()
            fn()
            times.append((time.perf_counter() - start) * 1e6)
        medians.append(statistics.median(times))
    cp.cuda.Device().synchronize()
    return medians


def main(argv: "list[str] | None" = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4096)
    parser.add_argument("--hidden", type=int, default=8192)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if not ta.cuda.is_available():
        raise SystemExit("bench_graph_replay: needs CUDA (a GPU, or TINYAMP_CUDA=standin for a smoke run)")
    cp = backend.cupy()
    graphed, inputs = graphed_step(args.batch, args.hidden)
    statics = [s.array for s in graphed.static_inputs]
    arrays = [x.array for x in inputs]

    def load_by_setitem() -> None:
        for static, x in zip(statics, arrays):
            static[...] = x

    def load_by_memcpy() -> None:
        for static, x in zip(statics, arrays):
            static.data.copy_from_device_async(x.data, x.nbytes)

    phases = {
        "check inputs": lambda: graphed._check_inputs(inputs),
        "check replay state": graphed._check_replay_state,
        "refresh hyper-parameters": graphed._refresh_hyper_parameters,
        "load inputs": lambda: graphed._load(inputs),
        "load by setitem": load_by_setitem,
        "load by memcpy": load_by_memcpy,
        "replay launch": graphed.cuda_graph.replay,
        "whole call": lambda: graphed(*inputs),
    }
    rows = []
    for name, fn in phases.items():
        medians = phase_us(cp, fn, args.rounds)
        rows.append({"phase": name, "median_us": statistics.median(medians), "min_us": min(medians),
                     "max_us": max(medians)})
    print(common.table([[r["phase"], f"{r['median_us']:.1f}", f"{r['min_us']:.1f}", f"{r['max_us']:.1f}"]
                        for r in rows], ["phase", "median host us", "min", "max"]))
    print(f"(batch {args.batch}, hidden {args.hidden}; medians of {args.rounds} rounds of {CALLS} calls, "
          f"the GPU busy; {'stand-in' if backend.standin_active() else 'GPU'})")
    result = {"benchmark": "graph_replay", "machine": common.machine(), "batch": args.batch,
              "hidden": args.hidden, "standin": backend.standin_active(), "rows": rows}
    if args.json:
        common.write_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
