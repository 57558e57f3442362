"""One rank of ``python -m tinyamp.distributed.run``: torchrun's variables from MPI's, then the script.

mpiexec runs this file (by path: it must not import tinyamp before the
variables are set, since the CUDA stand-in reads ``LOCAL_WORLD_SIZE`` when it
loads) as ``launch_worker.py MODE MASTER_ADDR MASTER_PORT [-m] script args...``.
MPICH's process manager tells each process its place (``PMI_RANK``,
``PMI_SIZE``, ``MPI_LOCALRANKID``, ``MPI_LOCALNRANKS``); they become
``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE`` and the rest of
torchrun's set. MPI is initialised, then the script runs as ``__main__``
(``mpi4py.run``); an uncaught exception, ``SystemExit`` with a non-zero
status or ``KeyboardInterrupt`` aborts the whole job (``MPI_Abort``), as
``python -m mpi4py`` does, so the other ranks never wait for this one.
"""

from __future__ import annotations

import os
import sys


def torchrun_environment(environ: "dict[str, str]", master_addr: str, master_port: str) -> dict[str, str]:
    """torchrun's variables for this process, from MPICH's (a single node: group 0)."""
    rank = environ.get("PMI_RANK", "0")
    size = environ.get("PMI_SIZE", "1")
    return {"RANK": rank, "WORLD_SIZE": size, "LOCAL_RANK": environ.get("MPI_LOCALRANKID", rank),
            "LOCAL_WORLD_SIZE": environ.get("MPI_LOCALNRANKS", size), "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1",
            "ROLE_RANK": rank, "ROLE_WORLD_SIZE": size, "ROLE_NAME": "default", "MASTER_ADDR": master_addr,
            "MASTER_PORT": master_port, "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "0",
            "TORCHELASTIC_RUN_ID": "none"}


def main(argv: list[str]) -> None:
    mode, master_addr, master_port, *program = argv
    os.environ.update(torchrun_environment(dict(os.environ), master_addr, master_port))
    if mode == "exec":
        os.execvp(program[0], program)
    from mpi4py import MPI  # noqa: F401,PLC0415 - optional 'dist' extra; initialises MPI (the abort needs it)
    from mpi4py.run import run_command_line, set_abort_status  # noqa: PLC0415
    try:
        run_command_line(program)
    except SystemExit as exc:
        set_abort_status(exc)
        raise
    except BaseException as exc:
        set_abort_status(exc)
        raise


if __name__ == "__main__":
    main(sys.argv[1:])
