"""``python -m tinyamp.distributed.run``: torchrun's command line, starting the ranks through MPICH's mpiexec.

``python -m tinyamp.distributed.run --nproc-per-node 2 train.py --lr 0.1``
starts two processes of ``train.py`` on this machine with torchrun's
environment (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``,
``GROUP_RANK``, ``ROLE_RANK``, ``ROLE_WORLD_SIZE``, ``MASTER_ADDR``,
``MASTER_PORT``), so a torchrun script runs unmodified; its
``init_process_group`` then joins over MPI. Each rank runs under
``launch_worker.py``, which aborts the whole MPI job when the script raises
(``python -m mpi4py``'s rule), and mpiexec ends the job when a rank dies, so a
failing rank never leaves the others waiting in a collective. The launcher
exits with mpiexec's status.

One node only (``--nnodes 1``); ``--max-restarts`` must be 0 (no elastic
restarts). Flags of torchrun's rendezvous are accepted and ignored.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

_WORKER = Path(__file__).resolve().with_name("launch_worker.py")
_PACKAGE_PARENT = str(Path(__file__).resolve().parents[3])  # the directory holding the tinyamp package


def parse_args(argv: "list[str] | None" = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tinyamp.distributed.run",
                                     description="Start a torchrun-style training script on N local processes "
                                                 "(through MPICH's mpiexec).")
    parser.add_argument("--nnodes", default="1", help="number of nodes: only 1 (or 1:1) is supported")
    parser.add_argument("--nproc-per-node", "--nproc_per_node", default="1",
                        help="processes on this node: an integer, or 'cpu'/'auto' (the CPU count), 'gpu' (GPUs)")
    parser.add_argument("--node-rank", "--node_rank", type=int, default=0)
    parser.add_argument("--master-addr", "--master_addr", default="127.0.0.1")
    parser.add_argument("--master-port", "--master_port", type=int, default=29500)
    parser.add_argument("--standalone", action="store_true")
    parser.add_argument("--max-restarts", "--max_restarts", type=int, default=0)
    parser.add_argument("--rdzv-backend", "--rdzv_backend", default="static")
    parser.add_argument("--rdzv-endpoint", "--rdzv_endpoint", default="")
    parser.add_argument("--rdzv-id", "--rdzv_id", default="none")
    parser.add_argument("--monitor-interval", "--monitor_interval", type=float, default=0.1)
    parser.add_argument("-m", "--module", action="store_true", help="run the script as a module (python -m)")
    parser.add_argument("--no-python", "--no_python", action="store_true",
                        help="run the script as an executable, not through python")
    parser.add_argument("training_script", help="the script (or module, with -m) each rank runs")
    parser.add_argument("training_script_args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.nnodes not in ("1", "1:1"):
        parser.error(f"--nnodes {args.nnodes}: tinyamp's launcher starts processes on this node only")
    if args.node_rank != 0:
        parser.error("--node-rank must be 0 (one node)")
    if args.max_restarts != 0:
        parser.error("--max-restarts must be 0: tinyamp's launcher has no elastic restarts")
    if args.no_python and args.module:
        parser.error("--no-python and -m cannot be used together")
    try:
        args.nproc = nproc(args.nproc_per_node)
    except ValueError as exc:
        parser.error(f"--nproc-per-node: {exc}")
    return args


def nproc(value: str) -> int:
    """The process count ``--nproc-per-node`` asks for (torchrun's words when it cannot be one)."""
    if value in ("cpu", "auto"):
        return os.cpu_count() or 1
    if value == "gpu":
        raise ValueError("'gpu' is not supported: give the number of GPUs explicitly")
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"Unsupported nproc_per_node value: {value} (an integer >= 1, 'cpu' or 'auto')") from None
    if number < 1:
        raise ValueError(f"must be >= 1, got {number}")
    return number


def find_mpiexec() -> str:
    """The mpiexec beside this Python (the mpich wheel puts it in the environment's bin), else on PATH."""
    beside = Path(sys.executable).with_name("mpiexec")
    if beside.exists():
        return str(beside)
    found = shutil.which("mpiexec")
    if found is None:
        raise RuntimeError("tinyamp.distributed.run needs MPICH's mpiexec: pip install mpi4py mpich "
                           "(tinyamp's 'dist' extra)")
    return found


def command(args: argparse.Namespace) -> list[str]:
    """The mpiexec command line that starts every rank under the worker."""
    size = args.nproc if hasattr(args, "nproc") else nproc(args.nproc_per_node)
    program = [args.training_script, *args.training_script_args]
    if args.module:
        program = ["-m", *program]
    mode = "exec" if args.no_python else "python"
    return [find_mpiexec(), "-n", str(size), sys.executable, str(_WORKER), mode, args.master_addr,
            str(args.master_port), *program]


def main(argv: "list[str] | None" = None) -> int:
    args = parse_args(argv)
    env = dict(os.environ)
    env.setdefault("HYDRA_LAUNCHER", "fork")  # one node: no ssh
    env.setdefault("OMP_NUM_THREADS", "1")    # torchrun's default for several processes per node
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_PARENT, env.get("PYTHONPATH", "")) if p)
    return subprocess.call(command(args), env=env)


if __name__ == "__main__":
    sys.exit(main())
