"""benchmarks/run_gpu.sh, the one script a GPU session runs: its benchmark and example steps on the CUDA stand-in.

The script's commands (flags, paths, output files) are the GPU run's; ``GPU_SMALL=1`` only shrinks the sizes.
The GPU tests and the two slowest benchmarks (bench_cublas_call, bench_mnist: about 30 s here) are left out
with ``GPU_STEPS``; ``TINYAMP_CUDA=standin GPU_SMALL=1 benchmarks/run_gpu.sh`` runs them all.
Needs bash, coreutils' ``timeout``, tar and g++ (the stand-in's kernels).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
from tests.support import REPO

REPO = str(REPO)
SCRIPT = os.path.join(REPO, "benchmarks", "run_gpu.sh")
STEPS = ("bench-gpu-issue20", "bench-gpu", "bench-host-waits", "bench-host-waits-against", "bench-graph-replay",
         "bench-gemm", "mnist-amp", "mnist-amp-graph")
JSONS = ("bench_gpu_issue20.json", "bench_gpu.json", "bench_host_waits.json", "bench_host_waits_against.json",
         "bench_graph_replay.json", "bench_gemm.json", "mnist_amp.json", "mnist_amp_graph.json")


def run_script(tmp_path, steps: tuple, cuda: "str | None") -> tuple[subprocess.CompletedProcess, str]:
    out = tmp_path / "out"
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("TINYAMP_CUDA", "OUT", "GPU_BUDGET_S")}
    # The script's 450 s budget is a GPU machine's: here the steps take 46 s at load 3 and 77 s inside the
    # suite at load 6; at load 20 on 2 cores they may take several times that, so the budget and the hang
    # guard are 900 s and 960 s (the step limits, 60-150 s, are 10x the steps' times at load 3).
    env |= {"OUT": str(out), "GPU_SMALL": "1", "GPU_STEPS": " ".join(steps), "PYTHON": sys.executable,
            "TMPDIR": str(tmp_path), "HOST_AGAINST": REPO, "HOST_PAIRS": "1",  # this tree against itself
            "GPU_BUDGET_S": "900"}
    if cuda:
        env["TINYAMP_CUDA"] = cuda
    with subprocess.Popen(["bash", SCRIPT], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=960)  # a hang guard only
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the script and every step it started
            raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr), str(out)


def test_the_benchmark_and_example_steps_run_and_come_back_as_two_files(tmp_path) -> None:
    done, out = run_script(tmp_path, STEPS, "standin")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    # The device tool brings back at most 8 files from $OUT: the summary and one archive of everything.
    assert sorted(os.listdir(out)) == ["results.tgz", "summary.txt"]
    summary = open(os.path.join(out, "summary.txt")).read()
    for name in STEPS:
        assert f"{name}: exit 0," in summary, summary
    assert "tinyamp_convert_f16_f32_by8 (before)" in summary  # the widening beside the layout it replaced
    assert "mnist-amp-graph: test accuracy:" in summary
    with tarfile.open(os.path.join(out, "results.tgz")) as archive:
        names = {os.path.basename(n) for n in archive.getnames()}
        assert {f"{name}.log" for name in STEPS} | set(JSONS) <= names
        kernels = json.load(archive.extractfile("results/bench_gpu_issue20.json"))["kernels"]
        rest = json.load(archive.extractfile("results/bench_gpu.json"))
    assert rest["mlp"] and rest["gemm"] and not rest["kernels"]  # --no-issue20: the kernel table ran once
    assert {"tinyamp_convert_f16_f32", "tinyamp_convert_f16_f32_by8 (before)"} <= {r["kernel"] for r in kernels}
    assert done.stdout.rstrip().endswith(summary.rstrip())  # printed last: the end of the device tool's output


def test_a_failing_step_is_recorded_and_the_next_one_still_runs(tmp_path) -> None:
    done, out = run_script(tmp_path, ("bench-host-waits", "bench-gemm"), None)  # no CUDA: host_waits refuses
    summary = open(os.path.join(out, "summary.txt")).read()
    assert done.returncode == 1, summary
    assert "bench-host-waits: exit 1," in summary and "bench-gemm: exit 0," in summary, summary
