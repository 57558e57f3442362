"""``tinyamp.distributed``: ``torch.distributed``'s default process group over MPI (CPU) or NCCL (GPU).

``from torch.distributed import init_process_group, destroy_process_group``
ports by the import. Processes are started by ``python -m
tinyamp.distributed.run`` (torchrun's flags and variables) through MPICH's
``mpiexec``; ``init_process_group(backend="mpi" | "gloo" | "nccl")`` joins
them. See ``process_group.py`` (the group), ``collectives.py`` (the
collectives), ``mpi_backend.py`` and ``nccl_backend.py`` (the engines).
"""

from __future__ import annotations

from . import found_inf  # GradScaler's found_inf all-reduce, installed on import
from .collectives import all_gather_into_tensor, all_reduce, barrier, broadcast, reduce_scatter_tensor
from .process_group import (ReduceOp, Work, destroy_process_group, get_backend, get_rank, get_world_size,
                            init_process_group, is_available, is_gloo_available, is_initialized,
                            is_mpi_available, is_nccl_available)

__all__ = ["init_process_group", "destroy_process_group", "is_initialized", "is_available", "is_mpi_available",
           "is_nccl_available", "is_gloo_available", "get_rank", "get_world_size", "get_backend", "barrier",
           "all_reduce", "broadcast", "all_gather_into_tensor", "reduce_scatter_tensor", "ReduceOp", "Work"]
