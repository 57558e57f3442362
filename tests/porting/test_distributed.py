"""ta.distributed, DistributedDataParallel, DistributedSampler and the launcher, run on real MPI ranks.

Each test starts ``mpiexec -n N`` (MPICH's, from the mpich wheel) on a script in
``tests/support/distributed_scripts/`` as a subprocess with a timeout and mpi4py's CI
settings (fork launcher, MPIEXEC_TIMEOUT, MPICH's polling throttled so ranks
yield the 2-core CI machine, one OpenMP thread). A script checks many things per
launch and prints "OK ..." lines; a failed check raises, which aborts the job.
Needs mpi4py and mpich (the ``test`` extra): without them these tests fail.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tinyamp.utils.data import DistributedSampler
from tests.support import REPO, SUPPORT

REPO = REPO
SCRIPTS = SUPPORT / "distributed_scripts"
MPIEXEC = str(Path(sys.executable).with_name("mpiexec"))


def mpi_env(**extra: str) -> dict:
    env = dict(os.environ)
    # Hang guards only (a job takes seconds to a minute; a loaded machine may take several times that).
    env.update({"MPIEXEC_TIMEOUT": "900", "HYDRA_LAUNCHER": "fork", "OMP_NUM_THREADS": "1",
                "MPIR_CVAR_CH4_PROGRESS_THROTTLE": "1", "PYTHONPATH": str(REPO)})
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "TINYAMP_CUDA"):
        env.pop(name, None)
    env.update(extra)
    return env


def run(command: list, timeout: float = 960, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=REPO, env=mpi_env(**env), capture_output=True, text=True, timeout=timeout)


def mpiexec(n: int, script: str, *args: str, **env: str) -> str:
    done = run([MPIEXEC, "-n", str(n), sys.executable, str(SCRIPTS / script), *args], **env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return done.stdout


def test_the_mpi_packages_are_installed() -> None:
    import mpi4py  # noqa: F401,PLC0415 - the test extra's; a missing one must fail, not skip

    assert Path(MPIEXEC).exists(), "mpiexec from the mpich wheel is missing: pip install mpich"


CONFIGS = [f"{d} {l} {o} " for d in ("float16", "bfloat16") for l in ("O1", "O2") for o in ("sgd", "adam")]
# On NCCL, one configuration per bucket dtype (O1: float32 and found_inf's MAX; O2: float16, bfloat16):
# the optimizer and level do not change the NCCL calls, which MPI's runs above already cover in all 8.
NCCL_CONFIGS = ["float16 O1 sgd ", "float16 O2 adam ", "bfloat16 O2 sgd ", "bfloat16 O1 adam "]


@pytest.mark.parametrize("ranks", [2, 3])
def test_collectives_and_ddp_following_one_process_with_bitwise_equal_replicas(ranks: int) -> None:
    """One launch per world size: collectives.py's checks, then every AMP configuration over 50 steps
    (and, on 2 ranks, the overflow injected on rank 1 only)."""
    extra = ["--inject"] if ranks == 2 else []
    out = mpiexec(ranks, "ddp_training.py", "--backend", "gloo", "--collectives", *extra)
    assert out.count(f"OK collectives {ranks}") == ranks, out
    for config in CONFIGS:
        assert out.count(f"OK {ranks} ranks {config}") == ranks, out
    if ranks == 2:
        assert out.count("OK inject eager 2 ranks skipped=[5, 17]") == 2, out


@pytest.mark.parametrize("graphed", [False, True], ids=["eager", "graphed"])
def test_nccl_backend_on_the_nccl_standin(graphed: bool) -> None:
    """The NCCL backend's code on 2 CPU ranks under the CUDA stand-in (one device per local rank, through the
    launcher): its collectives and the stand-in's refusals, then every AMP configuration and the injected
    overflow, eager or as a graphed step whose replays repeat the NCCL calls (counted per step)."""
    args = ["--graphed"] if graphed else ["--collectives"]
    configs = ",".join(c.strip().replace(" ", "-") for c in NCCL_CONFIGS)
    done = run([sys.executable, "-m", "tinyamp.distributed.run", "--nproc-per-node", "2",
                str(SCRIPTS / "ddp_training.py"), "--backend", "nccl", "--inject", "--configs", configs, *args],
               TINYAMP_CUDA="standin")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    out = done.stdout
    if not graphed:
        assert out.count("OK strict nccl 2") == 2, out
    for config in NCCL_CONFIGS:
        assert out.count(f"OK 2 ranks {config}") == 2, out
    mode = "graphed" if graphed else "eager"
    assert out.count(f"OK inject {mode} 2 ranks skipped=[5, 17]") == 2, out


def test_two_nccl_ranks_on_one_device_are_refused() -> None:
    out = mpiexec(2, "nccl_checks.py", "duplicate", TINYAMP_CUDA="standin")  # no launcher: both on cuda:0
    assert out.count("OK duplicate") == 2


# A job that should end ends long before this bound (it takes a few seconds), and one that hangs fails the
# test by it, never by a wall-time measurement: mpiexec's own MPIEXEC_TIMEOUT (900 s) is later still, so a
# hang cannot pass as "ended with an error".
JOB_BOUND_S = 300


def _launch(*args: str) -> subprocess.CompletedProcess:
    """The launcher on launched.py with 2 ranks; fails the test if the job has not ended within JOB_BOUND_S."""
    command = [sys.executable, "-m", "tinyamp.distributed.run", "--nproc-per-node", "2",
               str(SCRIPTS / "launched.py"), *args]
    job = subprocess.Popen(command, cwd=REPO, env=mpi_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, start_new_session=True)
    try:
        stdout, stderr = job.communicate(timeout=JOB_BOUND_S)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)  # the launcher, mpiexec and every rank
        stdout, stderr = job.communicate()
        pytest.fail(f"the job {args} still ran after {JOB_BOUND_S} s:\n{stdout[-2000:]}\n{stderr[-3000:]}")
    return subprocess.CompletedProcess(command, job.returncode, stdout, stderr)


def test_the_launcher_sets_torchruns_variables_and_passes_arguments() -> None:
    done = _launch("--flag", "value")
    assert done.returncode == 0, done.stderr[-3000:]
    for rank in (0, 1):
        assert f"rank {rank} local_rank {rank} world_size 2 local_world_size 2 master 127.0.0.1:29500 " \
               f"args ['--flag', 'value'] sum 3.0" in done.stdout, done.stdout


@pytest.mark.parametrize("how, message", [
    ("raise", "ValueError: rank 1 fails on purpose"),
    ("kill", "BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES"),  # mpiexec ends the others
    ("exit", "all_reduce: this rank waits in its collective number 1, but rank 1 after 0 collective(s) ended"),
    ("short", "all_reduce: this rank waits in its collective number 2, but rank 1 after 1 collective(s) ended"),
    ("timeout", "all_reduce: collective number 1 did not complete within the process group's timeout of "
                "0:00:02 (init_process_group(timeout=...))"),
])
def test_a_failing_stuck_or_departed_rank_ends_the_job_with_an_error(how: str, message: str) -> None:
    # Rank 0 waits in all_reduce for rank 1, which raises, is killed, exits cleanly without the collective,
    # runs out of batches first, or is stuck past the group's timeout: each ends the whole job with an error
    # naming what happened (PyTorch 2.13's gloo job exits 1 too). The bound is the launch's JOB_BOUND_S.
    done = _launch(how)
    assert done.returncode != 0, done.stdout + done.stderr
    assert message in done.stdout + done.stderr, done.stdout[-2000:] + done.stderr[-3000:]


# ------------------------------------------------------------ in one process: the sampler's partition rules
# Values from torch 2.13.0: [list(DistributedSampler(range(L), num_replicas=n, rank=r, shuffle=False,
# drop_last=d)) for r in range(n)].
TORCH_PARTITIONS = {(5, 2, False): [[0], [1], [0], [1], [0]],
                    (4, 7, False): [[0, 4], [1, 5], [2, 6], [3, 0]],
                    (4, 7, True): [[0], [1], [2], [3]],
                    (3, 11, True): [[0, 3, 6], [1, 4, 7], [2, 5, 8]],
                    (3, 11, False): [[0, 3, 6, 9], [1, 4, 7, 10], [2, 5, 8, 0]],
                    (3, 10, False): [[0, 3, 6, 9], [1, 4, 7, 0], [2, 5, 8, 1]]}


@pytest.mark.parametrize("case", sorted(TORCH_PARTITIONS))
def test_distributed_sampler_partitions_as_pytorch(case: tuple) -> None:
    replicas, length, drop_last = case
    got = [list(DistributedSampler(range(length), num_replicas=replicas, rank=r, shuffle=False,
                                   drop_last=drop_last)) for r in range(replicas)]
    assert got == TORCH_PARTITIONS[case]


def test_distributed_sampler_shuffles_by_seed_and_epoch_into_a_padded_permutation() -> None:
    def epoch_order(seed: int, epoch: int) -> list:
        samplers = [DistributedSampler(range(10), num_replicas=3, rank=r, seed=seed) for r in range(3)]
        for s in samplers:
            s.set_epoch(epoch)
        shares = [list(s) for s in samplers]
        return [shares[p % 3][p // 3] for p in range(12)]

    order = epoch_order(0, 0)
    assert sorted(order[:10]) == list(range(10)) and order[10:] == order[:2]
    assert epoch_order(0, 0) == order and epoch_order(0, 1) != order and epoch_order(1, 0) != order


def _losses(stdout: str) -> list:
    return [float(line.split()[2]) for line in stdout.splitlines() if line.startswith("loss ")]


def test_a_nanogpt_style_script_on_two_nccl_ranks_follows_one_process() -> None:
    """gpt_style.py has nanoGPT train.py's structure (RANK detection, init_process_group before set_device,
    DDP(device_ids=[local_rank]), require_backward_grad_sync toggled for accumulation, GradScaler with
    unscale_ and clipping). One process with 2 micro-batches and 2 NCCL ranks (stand-in) with one each see
    the same examples per micro-batch; only the order of float32 sums differs, so the losses agree to 2e-4
    (observed 1e-5 over 6 iterations)."""
    script = str(SCRIPTS / "gpt_style.py")
    one = run([sys.executable, script, "--backend=nccl", "--accum=2"], TINYAMP_CUDA="standin")
    two = run([sys.executable, "-m", "tinyamp.distributed.run", "--nproc-per-node", "2", script, "--backend=nccl",
               "--accum=2"], TINYAMP_CUDA="standin")
    assert one.returncode == 0 and two.returncode == 0, one.stderr[-3000:] + two.stderr[-3000:]
    alone, ranks = _losses(one.stdout), _losses(two.stdout)
    assert len(alone) == len(ranks) == 6 and alone[-1] < alone[0] - 0.3, (alone, ranks)
    assert max(abs(a - b) for a, b in zip(alone, ranks)) < 2e-4, (alone, ranks)


def test_find_unused_parameters_leaves_a_parameter_no_rank_used_without_a_gradient() -> None:
    # PyTorch 2.13's values, in the script's docstring: a globally unused parameter's .grad stays None
    # (AdamW then skips it), a locally unused one gets the average.
    out = mpiexec(2, "ddp_unused.py")
    assert out.count("OK unused") == 2, out


@pytest.mark.parametrize("value, words", [("abc", "Unsupported nproc_per_node value: abc (an integer >= 1, 'cpu' or "
                                                  "'auto')"),
                                          ("0", "must be >= 1, got 0"),
                                          ("gpu", "'gpu' is not supported: give the number of GPUs explicitly")])
def test_a_bad_process_count_is_a_usage_error_naming_the_flag(value: str, words: str) -> None:
    # torchrun says "ValueError: Unsupported nproc_per_node value: abc" (a traceback); the launcher says it as a
    # usage error, before starting anything.
    done = run([sys.executable, "-m", "tinyamp.distributed.run", "--nproc-per-node", value, "script.py"], timeout=300)
    assert done.returncode == 2, done.stderr
    assert f"error: --nproc-per-node: {words}" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
