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

Waits that end. A collective's wait polls its request, so a rank never waits
for ever: it raises when the process group's timeout
(``init_process_group(timeout=...)``, PyTorch's 30 minutes by default) passes,
or at once when a rank that never joined this collective has ended its
script (a loop that ran out of batches first, ``sys.exit(0)``): each process
tells the others, at its exit, how many collectives it started, over a
communicator of its own. The launcher then aborts the job on that error.
"""

from __future__ import annotations

import atexit
import datetime
import time
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


# PyTorch 2.13's default process-group timeout (torch.distributed.constants.default_pg_timeout).
DEFAULT_TIMEOUT = datetime.timedelta(minutes=30)
_EXIT_TAG = 30  # the control communicator's one message: "this rank ended after N collectives"
_control: dict[str, Any] = {"comm": None, "started": 0, "exited": {}}


def _control_communicator() -> Any:
    """The communicator on which ranks say they ended (made once, at the first process group: collective)."""
    if _control["comm"] is None:
        _control["comm"] = world_communicator().Dup()
        atexit.register(_announce_exit)  # before mpi4py finalizes MPI, which it does after every atexit hook
    return _control["comm"]


def _announce_exit() -> None:
    """Tell every other rank how many collectives this one started: one waiting for more fails at once."""
    comm = _control["comm"]
    if comm is None:
        return
    count = np.array([_control["started"]], dtype=np.int64)
    requests = [comm.Isend(count, dest=rank, tag=_EXIT_TAG) for rank in range(comm.Get_size())
                if rank != comm.Get_rank()]
    mpi().Request.Waitall(requests)  # small messages: sent without waiting for a receive


def _ended_ranks() -> dict[int, int]:
    """The ranks that have ended so far, each with the number of collectives it started."""
    comm, MPI = _control["comm"], mpi()
    status = MPI.Status()
    while comm.Iprobe(source=MPI.ANY_SOURCE, tag=_EXIT_TAG, status=status):
        count = np.empty(1, dtype=np.int64)
        comm.Recv(count, source=status.Get_source(), tag=_EXIT_TAG)
        _control["exited"][status.Get_source()] = int(count[0])
    return _control["exited"]


def wait(request: Any, what: str, timeout: datetime.timedelta) -> None:
    """Complete ``request`` (this rank's collective number ``_control['started']``), or raise when it cannot end.

    Polls (MPICH's own wait spins too), sleeping a little longer each round up to a millisecond.
    """
    number = _control["started"]
    deadline = time.monotonic() + timeout.total_seconds()
    pause = 1e-5
    while not request.Test():
        ended = {} if _control["comm"] is None else {
            rank: count for rank, count in _ended_ranks().items() if count < number}
        if ended:
            who = ", ".join(f"rank {rank} after {count} collective(s)" for rank, count in sorted(ended.items()))
            raise RuntimeError(f"{what}: this rank waits in its collective number {number}, but {who} ended its "
                               f"script without joining it: every rank must make the same collectives (a data "
                               f"loop that runs out of batches on one rank first, an early sys.exit); the job is "
                               f"ended")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: collective number {number} did not complete within the process group's "
                               f"timeout of {timeout} (init_process_group(timeout=...)): some rank never joined it "
                               f"(stuck, or making other collectives); the job is ended")
        time.sleep(pause)
        pause = min(2 * pause, 1e-3)


def all_reduce_host(group: Any, array: np.ndarray, what: str) -> None:
    """SUM ``array`` (host memory) in place across ``group``'s ranks over its MPI communicator, whichever
    backend the group has (NCCL's keeps one for such host metadata); counted and waited as a collective."""
    _control["started"] += 1
    timeout = getattr(group, "timeout", DEFAULT_TIMEOUT)
    wait(group.mpi_comm.Iallreduce(mpi().IN_PLACE, array, op=mpi().SUM), what, timeout)


def world_communicator() -> Any:
    """``MPI.COMM_WORLD``: every process the launcher (mpiexec) started."""
    return mpi().COMM_WORLD


def mpi_op(op: Any) -> Any:
    """The MPI operation for a ``ReduceOp`` (AVG is reduced as SUM, then divided)."""
    MPI = mpi()
    return {"sum": MPI.SUM, "avg": MPI.SUM, "product": MPI.PROD, "min": MPI.MIN, "max": MPI.MAX}[op.value]


class MPIBackend:
    """One communicator (a duplicate of ``COMM_WORLD``) and the collectives on host arrays."""

    def __init__(self, comm: Any, name: str = "mpi", timeout: datetime.timedelta = DEFAULT_TIMEOUT) -> None:
        self.comm = self.mpi_comm = comm.Dup()
        _control_communicator()
        self.name = name
        self.timeout = timeout
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.collectives = 0  # started so far (tests count them per step)

    def _start(self) -> None:
        self.collectives += 1
        _control["started"] += 1

    def _wait(self, request: Any, what: str) -> None:
        wait(request, what, self.timeout)

    def destroy(self) -> None:
        self.comm.Free()

    # ------------------------------------------------------------ collectives
    def all_reduce(self, array: np.ndarray, op: Any) -> "Callable[[], None]":
        """Start reducing ``array`` in place across ranks; returns the function that completes it."""
        self._start()
        work = array.astype(np.float32) if array.dtype in _SIXTEEN_BIT_FLOATS else array
        request = self.comm.Iallreduce(mpi().IN_PLACE, work, op=mpi_op(op))
        size = self.size

        def finish() -> None:
            self._wait(request, "all_reduce")
            if op.value == "avg":
                np.divide(work, work.dtype.type(size), out=work)
            if work is not array:
                array[...] = work  # one rounding to the tensor's 16-bit dtype
        return finish

    def broadcast(self, array: np.ndarray, src: int) -> "Callable[[], None]":
        self._start()
        request = self.comm.Ibcast(_bits(array), root=src)
        return lambda: self._wait(request, "broadcast")

    def all_gather(self, out: np.ndarray, inp: np.ndarray) -> "Callable[[], None]":
        self._start()
        request = self.comm.Iallgather(_bits(inp), _bits(out))
        return lambda: self._wait(request, "all_gather_into_tensor")

    def reduce_scatter(self, out: np.ndarray, inp: np.ndarray, op: Any) -> "Callable[[], None]":
        self._start()
        widen = inp.dtype in _SIXTEEN_BIT_FLOATS
        send = inp.astype(np.float32) if widen else inp
        recv = np.empty(out.shape, np.float32) if widen else out
        request = self.comm.Ireduce_scatter_block(send, recv, op=mpi_op(op))
        size = self.size

        def finish() -> None:
            self._wait(request, "reduce_scatter_tensor")
            if op.value == "avg":
                np.divide(recv, recv.dtype.type(size), out=recv)
            if recv is not out:
                out[...] = recv
        return finish

    def barrier(self) -> None:
        self._start()
        self._wait(self.comm.Ibarrier(), "barrier")


def _bits(array: np.ndarray) -> np.ndarray:
    """``array`` as MPI may move it: a bfloat16 (or float16) array viewed as uint16, others as they are."""
    return array.view(np.uint16) if array.dtype in _SIXTEEN_BIT_FLOATS else array
