"""The MPI backend (``"mpi"``, also ``"gloo"``): collectives on NumPy arrays through mpi4py.

mpi4py (with the ``mpich`` wheel) is imported on first use: importing it
initialises MPI, which only a distributed job should pay for. Collectives are
MPI's non-blocking ones (``Iallreduce``, ``Ibcast``, ...), so ``async_op=True``
returns a handle whose ``wait()`` completes the request.

16-bit floats. mpi4py refuses ml_dtypes' bfloat16 buffers, and MPI's float16
support is an extension, so a reduction of a float16 or bfloat16 array runs on
a float32 copy and is rounded once back (each value is then what a float32
reduction of the same inputs gives); broadcast and all-gather move the bits
as uint16. ``ReduceOp.AVG`` (which MPI lacks) is a SUM divided by the world
size in the reduction's dtype.

MPICH's reductions give bitwise-identical results on every rank, which is what
keeps data-parallel replicas bitwise equal after each step.
"""

from __future__ import annotations

from typing import Any, Callable

import ml_dtypes
import numpy as np

_BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
_SIXTEEN_BIT_FLOATS = (np.dtype(np.float16), _BFLOAT16)
_MPI: Any = None


def mpi() -> Any:
    """``mpi4py.MPI``, imported (and MPI initialised) on first use."""
    global _MPI
    if _MPI is None:
        try:
            from mpi4py import MPI  # noqa: PLC0415 - optional 'dist' extra; importing it initialises MPI
        except ImportError as exc:
            raise RuntimeError("tinyamp.distributed needs mpi4py and an MPI library: pip install mpi4py mpich "
                               "(tinyamp's 'dist' extra)") from exc
        _MPI = MPI
    return _MPI


def world_communicator() -> Any:
    """``MPI.COMM_WORLD``: every process the launcher (mpiexec) started."""
    return mpi().COMM_WORLD


def mpi_op(op: Any) -> Any:
    """The MPI operation for a ``ReduceOp`` (AVG is reduced as SUM, then divided)."""
    MPI = mpi()
    return {"sum": MPI.SUM, "avg": MPI.SUM, "product": MPI.PROD, "min": MPI.MIN, "max": MPI.MAX}[op.value]


class MPIBackend:
    """One communicator (a duplicate of ``COMM_WORLD``) and the collectives on host arrays."""

    def __init__(self, comm: Any, name: str = "mpi") -> None:
        self.comm = self.mpi_comm = comm.Dup()
        self.name = name
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.collectives = 0  # started so far (tests count them per step)

    def destroy(self) -> None:
        self.comm.Free()

    # ------------------------------------------------------------ collectives
    def all_reduce(self, array: np.ndarray, op: Any) -> "Callable[[], None]":
        """Start reducing ``array`` in place across ranks; returns the function that completes it."""
        self.collectives += 1
        work = array.astype(np.float32) if array.dtype in _SIXTEEN_BIT_FLOATS else array
        request = self.comm.Iallreduce(mpi().IN_PLACE, work, op=mpi_op(op))
        size = self.size

        def finish() -> None:
            request.Wait()
            if op.value == "avg":
                np.divide(work, work.dtype.type(size), out=work)
            if work is not array:
                array[...] = work  # one rounding to the tensor's 16-bit dtype
        return finish

    def broadcast(self, array: np.ndarray, src: int) -> "Callable[[], None]":
        self.collectives += 1
        request = self.comm.Ibcast(_bits(array), root=src)
        return request.Wait

    def all_gather(self, out: np.ndarray, inp: np.ndarray) -> "Callable[[], None]":
        self.collectives += 1
        request = self.comm.Iallgather(_bits(inp), _bits(out))
        return request.Wait

    def reduce_scatter(self, out: np.ndarray, inp: np.ndarray, op: Any) -> "Callable[[], None]":
        self.collectives += 1
        widen = inp.dtype in _SIXTEEN_BIT_FLOATS
        send = inp.astype(np.float32) if widen else inp
        recv = np.empty(out.shape, np.float32) if widen else out
        request = self.comm.Ireduce_scatter_block(send, recv, op=mpi_op(op))
        size = self.size

        def finish() -> None:
            request.Wait()
            if op.value == "avg":
                np.divide(recv, recv.dtype.type(size), out=recv)
            if recv is not out:
                out[...] = recv
        return finish

    def barrier(self) -> None:
        self.collectives += 1
        self.comm.Barrier()


def _bits(array: np.ndarray) -> np.ndarray:
    """``array`` as MPI may move it: a bfloat16 (or float16) array viewed as uint16, others as they are."""
    return array.view(np.uint16) if array.dtype in _SIXTEEN_BIT_FLOATS else array
