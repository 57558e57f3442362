"""The default process group: ``init_process_group`` and friends, ``ReduceOp``, the work handle.

One process group per process (PyTorch's default group, ``group=None``),
carried by a backend object: :mod:`.mpi_backend` (``"mpi"``, and ``"gloo"``,
the name PyTorch CPU code asks for) or :mod:`.nccl_backend` (``"nccl"``). The
rank and world size are MPI's: ``RANK``/``WORLD_SIZE`` from the environment
(torchrun's variables, set by ``python -m tinyamp.distributed.run``) and the
``rank``/``world_size`` arguments are checked against them, never trusted over
them, so a script started rank by rank instead of by a launcher fails at once
instead of waiting for peers that are not there.
"""

from __future__ import annotations

import datetime
import enum
import importlib.util
import os
from typing import Any, Callable

from . import mpi_backend, nccl_backend

_BACKENDS = ("mpi", "gloo", "nccl")


class ReduceOp(enum.Enum):
    """``torch.distributed.ReduceOp``: how ``all_reduce`` and ``reduce_scatter_tensor`` combine values."""

    SUM = "sum"
    AVG = "avg"
    PRODUCT = "product"
    MIN = "min"
    MAX = "max"
    BAND = "band"
    BOR = "bor"
    BXOR = "bxor"
    PREMUL_SUM = "premul_sum"

    def __repr__(self) -> str:
        return f"<RedOpType.{self.name}: {list(ReduceOp).index(self)}>"


SUPPORTED_OPS = (ReduceOp.SUM, ReduceOp.AVG, ReduceOp.PRODUCT, ReduceOp.MIN, ReduceOp.MAX)


class Work:
    """The handle ``async_op=True`` returns: ``wait()`` finishes the collective (the tensor holds the result)."""

    def __init__(self, wait: "Callable[[], None] | None" = None) -> None:
        self._wait, self._done = wait, wait is None

    def wait(self, timeout: Any = None) -> bool:
        if not self._done:
            self._done = True
            self._wait()  # type: ignore[misc]
        return True

    def is_completed(self) -> bool:
        return self._done

    def is_success(self) -> bool:
        return self._done


_state: dict[str, Any] = {"backend": None}


def _not_initialized() -> ValueError:
    return ValueError("Default process group has not been initialized, please make sure to call "
                      "init_process_group.")


def default_backend() -> Any:
    """The default group's backend object (ValueError, PyTorch's, before ``init_process_group``)."""
    backend = _state["backend"]
    if backend is None:
        raise _not_initialized()
    return backend


def _env_int(name: str) -> "int | None":
    value = os.environ.get(name)
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"init_process_group: environment variable {name}={value!r} is not an integer") from None


def _check_matches(what: str, given: "int | None", mpi_value: int) -> None:
    if given is not None and given != -1 and given != mpi_value:
        raise RuntimeError(
            f"init_process_group: {what} is {given} but MPI started this process as {what} {mpi_value}. "
            "tinyamp's ranks are MPI's: start the job with `python -m tinyamp.distributed.run "
            "--nproc-per-node N script.py` (or mpiexec -n N), not one process at a time")


def init_process_group(backend: "str | None" = None, init_method: "str | None" = None, timeout: Any = None,
                       world_size: int = -1, rank: int = -1, store: Any = None, group_name: str = "",
                       pg_options: Any = None, device_id: Any = None) -> None:
    """``torch.distributed.init_process_group``: join the job's default group over MPI (or NCCL)."""
    if _state["backend"] is not None:
        raise ValueError("trying to initialize the default process group twice!")
    if backend is None:
        backend = "mpi"
    if not isinstance(backend, str):
        raise ValueError(f"Backend name must be a string, but got: {backend}")
    name = backend.lower()
    if name not in _BACKENDS:
        raise ValueError(f"Invalid backend: '{backend}' (tinyamp.distributed offers 'mpi', 'gloo' (the MPI "
                         "backend under the name PyTorch's CPU code uses) and 'nccl')")
    if store is not None:
        raise ValueError("init_process_group: store= is not supported; tinyamp's processes meet through MPI "
                         "(start them with python -m tinyamp.distributed.run)")
    if timeout is None:
        timeout = mpi_backend.DEFAULT_TIMEOUT
    if not isinstance(timeout, datetime.timedelta):
        raise TypeError(f"Expected timeout argument to be of type datetime.timedelta, got {timeout}")
    if timeout.total_seconds() <= 0:
        raise ValueError(f"init_process_group: timeout must be positive, got {timeout}")
    if init_method not in (None, "env://"):
        raise ValueError(f"init_process_group: init_method={init_method!r} is not supported; tinyamp's "
                         "processes meet through MPI (init_method None or 'env://')")
    comm = mpi_backend.world_communicator()
    mpi_rank, mpi_size = comm.Get_rank(), comm.Get_size()
    _check_matches("WORLD_SIZE", _env_int("WORLD_SIZE"), mpi_size)
    _check_matches("RANK", _env_int("RANK"), mpi_rank)
    _check_matches("world_size", world_size, mpi_size)
    _check_matches("rank", rank, mpi_rank)
    if name == "nccl":
        made = nccl_backend.NCCLBackend(comm, device_id)
    else:
        made = mpi_backend.MPIBackend(comm, name, timeout)
    _state["backend"] = made


def destroy_process_group(group: Any = None) -> None:
    """Leave the default group (its communicators are freed); ``init_process_group`` may be called again."""
    backend = _state["backend"]
    if backend is None:
        raise _not_initialized()
    _state["backend"] = None
    backend.destroy()


def is_initialized() -> bool:
    return _state["backend"] is not None


def is_available() -> bool:
    """True when the MPI engine (mpi4py) can be imported: the ``dist`` extra is installed."""
    return importlib.util.find_spec("mpi4py") is not None


def is_mpi_available() -> bool:
    return is_available()


def is_nccl_available() -> bool:
    """True when CuPy's NCCL bindings load (or the CUDA stand-in, whose NCCL stand-in runs over MPI, is active)."""
    return is_available() and nccl_backend.nccl_available()


def is_gloo_available() -> bool:
    return is_available()


def get_rank(group: Any = None) -> int:
    return default_backend().rank


def get_world_size(group: Any = None) -> int:
    return default_backend().size


def get_backend(group: Any = None) -> str:
    return default_backend().name
