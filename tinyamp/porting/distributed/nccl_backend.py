"""The NCCL backend (``"nccl"``): collectives on CUDA arrays through ``cupy.cuda.nccl``'s communicator.

One process per GPU, as NCCL requires. Rank 0 makes NCCL's unique id and MPI
broadcasts it (as cupyx's ``use_mpi=True`` and ChainerMN do), then every rank
builds a ``NcclCommunicator`` on the device of the first tensor it reduces, as
PyTorch does (``device_id`` builds it at once; nanoGPT calls
``torch.cuda.set_device`` only after ``init_process_group``). Each collective is one call of the communicator with raw
device pointers, an NCCL datatype code and the current stream's pointer, so it
is ordered with the kernels around it, needs no host synchronisation, and is
recorded by a CUDA graph capture like a kernel. ``async_op=True`` handles are
therefore complete from the host's side at once: the stream orders the rest.

``cupy.cuda.nccl`` is reached through ``tinyamp.backend.cuda_lib``, so under
the CUDA stand-in (``TINYAMP_CUDA=standin``) the same code calls the strict NCCL
stand-in (``cupy_standin/nccl.py``), whose collectives travel over MPI.
cupyx.distributed is not used: it has no bfloat16 and a fixed TCP port.
"""

from __future__ import annotations

from typing import Any, Callable

import ml_dtypes
import numpy as np

from ... import backend

_BFLOAT16 = np.dtype(ml_dtypes.bfloat16)


def nccl_available() -> bool:
    """True when ``cupy.cuda.nccl`` (or the stand-in's) loads and says it is usable."""
    try:
        module = backend.cuda_lib("cupy.cuda.nccl")
    except (RuntimeError, ImportError):
        return False
    return bool(getattr(module, "available", True)) and hasattr(module, "NcclCommunicator")


def _done() -> None:
    return None


class NCCLBackend:
    """An NCCL communicator over every rank, on this process's current CUDA device."""

    name = "nccl"

    def __init__(self, comm: Any, device_id: Any = None) -> None:
        if not nccl_available():
            raise RuntimeError("init_process_group(backend='nccl'): CuPy's NCCL bindings are unavailable "
                               "(pip install nvidia-nccl-cu12 or -cu13 to match CuPy); for CPU tensors use "
                               "backend='mpi' or 'gloo'")
        self.nccl = nccl = backend.cuda_lib("cupy.cuda.nccl")
        self.cupy = cupy = backend.cupy()
        self.mpi_comm = comm.Dup()
        self.rank, self.size = self.mpi_comm.Get_rank(), self.mpi_comm.Get_size()
        self._comm: Any = None
        self.device_index: "int | None" = None
        if device_id is not None:  # PyTorch's eager initialisation; otherwise at the first collective
            self._connect(backend.Device(device_id).index)
        self.collectives = 0
        self._types = {np.dtype(np.int8): nccl.NCCL_INT8, np.dtype(np.uint8): nccl.NCCL_UINT8,
                       np.dtype(np.int32): nccl.NCCL_INT32, np.dtype(np.uint32): nccl.NCCL_UINT32,
                       np.dtype(np.int64): nccl.NCCL_INT64, np.dtype(np.uint64): nccl.NCCL_UINT64,
                       np.dtype(np.float16): nccl.NCCL_FLOAT16, np.dtype(np.float32): nccl.NCCL_FLOAT32,
                       np.dtype(np.float64): nccl.NCCL_FLOAT64, _BFLOAT16: nccl.NCCL_BFLOAT16}
        self._ops = {"sum": nccl.NCCL_SUM, "avg": nccl.NCCL_AVG, "product": nccl.NCCL_PROD,
                     "min": nccl.NCCL_MIN, "max": nccl.NCCL_MAX}

    def _connect(self, index: int) -> None:
        """Build the communicator on device ``index`` (every rank does this at the same collective)."""
        unique_id = self.nccl.get_unique_id() if self.rank == 0 else None
        unique_id = self.mpi_comm.bcast(unique_id, root=0)
        with self.cupy.cuda.Device(index):
            self._comm = self.nccl.NcclCommunicator(self.size, unique_id, self.rank)
        self.device_index = index

    @property
    def comm(self) -> Any:
        """The NCCL communicator, built on the current device if no collective has built it yet."""
        if self._comm is None:
            self._connect(int(self.cupy.cuda.runtime.getDevice()))
        return self._comm

    def destroy(self) -> None:
        if self._comm is not None:
            self._comm.destroy()
        self.mpi_comm.Free()

    def _check(self, what: str, *arrays: Any) -> int:
        """The NCCL datatype code of ``arrays`` (one dtype), each a CUDA array on this rank's device."""
        for array in arrays:
            if not backend.is_cupy_array(array):
                raise ValueError(f"{what}: the 'nccl' backend works on CUDA tensors, got a tensor on cpu "
                                 "(use backend='mpi' or 'gloo' for CPU tensors, or move it with .cuda())")
            if self._comm is None:  # PyTorch's lazy initialisation: on the first tensor's device
                self._connect(array.device.id)
            if array.device.id != self.device_index:
                raise ValueError(f"{what}: tensor on cuda:{array.device.id}, but this rank's NCCL communicator "
                                 f"is on cuda:{self.device_index} (ta.cuda.set_device before init_process_group)")
        code = self._types.get(np.dtype(arrays[0].dtype))
        if code is None:
            raise TypeError(f"{what}: the 'nccl' backend has no datatype for {arrays[0].dtype}")
        return code

    def _stream(self) -> int:
        return int(self.cupy.cuda.get_current_stream().ptr)

    # ------------------------------------------------------------ collectives
    def all_reduce(self, array: Any, op: Any) -> "Callable[[], None]":
        code = self._check("all_reduce", array)
        self.collectives += 1
        self.comm.allReduce(array.data.ptr, array.data.ptr, array.size, code, self._ops[op.value], self._stream())
        return _done

    def broadcast(self, array: Any, src: int) -> "Callable[[], None]":
        code = self._check("broadcast", array)
        self.collectives += 1
        self.comm.bcast(array.data.ptr, array.size, code, src, self._stream())
        return _done

    def all_gather(self, out: Any, inp: Any) -> "Callable[[], None]":
        code = self._check("all_gather_into_tensor", out, inp)
        self.collectives += 1
        self.comm.allGather(inp.data.ptr, out.data.ptr, inp.size, code, self._stream())
        return _done

    def reduce_scatter(self, out: Any, inp: Any, op: Any) -> "Callable[[], None]":
        code = self._check("reduce_scatter_tensor", out, inp)
        self.collectives += 1
        self.comm.reduceScatter(inp.data.ptr, out.data.ptr, out.size, code, self._ops[op.value], self._stream())
        return _done

    def barrier(self) -> None:
        """Every rank's queued GPU work finished, then an MPI barrier (NCCL has no barrier of its own)."""
        backend.refuse_in_capture("barrier()", "a barrier waits on the host")
        self.cupy.cuda.get_current_stream().synchronize()
        self.collectives += 1
        self.mpi_comm.Barrier()
