"""``cupy.cuda.nccl`` of the stand-in: NCCL's communicator, its collectives carried over MPI between CPU ranks.

Strict where NCCL is, and where tinyamp's use of it could go wrong unseen:

- ``NcclCommunicator(ndev, unique_id, rank)`` is collective over every MPI
  process (they meet by the unique id, which must be ``get_unique_id()``'s
  128 values, broadcast from one rank); the communicator has ``ndev`` ranks,
  each on its process's current device, and two ranks on one device are
  refused as NCCL refuses them ("Duplicate GPU detected");
- each collective takes device addresses, a count, NCCL's datatype and
  reduction codes and a stream pointer, as the real binding does: the
  datatype and op must be valid codes, every byte the count covers must lie
  inside one live device allocation (``resolve``), and the stream must be the
  calling thread's current stream (the one a capture records);
- each call is one counted launch (``ncclAllReduce``, ...) and, while a stream
  captures, a recorded graph node: the replay repeats the MPI collective, so
  a graphed data-parallel step exchanges its gradients at every replay;
- ``collective_counts`` counts the calls per kind (tests count them per step).

The arithmetic is MPI's (MPICH: the same bits on every rank); 16-bit floats
are reduced in float32 and rounded once. mpi4py is imported on first use.
"""

from __future__ import annotations

import os
import socket
import zlib
from collections import Counter
from typing import Any, Callable

import ml_dtypes
import numpy as np

from . import _device
from ._array import run
from ._memory import resolve
from ._topology import current_device

available = True

NCCL_INT8 = NCCL_CHAR = 0
NCCL_UINT8 = 1
NCCL_INT32 = NCCL_INT = 2
NCCL_UINT32 = 3
NCCL_INT64 = 4
NCCL_UINT64 = 5
NCCL_FLOAT16 = NCCL_HALF = 6
NCCL_FLOAT32 = NCCL_FLOAT = 7
NCCL_FLOAT64 = NCCL_DOUBLE = 8
NCCL_BFLOAT16 = 9
NCCL_SUM, NCCL_PROD, NCCL_MAX, NCCL_MIN, NCCL_AVG = 0, 1, 2, 3, 4

_DTYPES = {NCCL_INT8: np.dtype(np.int8), NCCL_UINT8: np.dtype(np.uint8), NCCL_INT32: np.dtype(np.int32),
           NCCL_UINT32: np.dtype(np.uint32), NCCL_INT64: np.dtype(np.int64), NCCL_UINT64: np.dtype(np.uint64),
           NCCL_FLOAT16: np.dtype(np.float16), NCCL_FLOAT32: np.dtype(np.float32),
           NCCL_FLOAT64: np.dtype(np.float64), NCCL_BFLOAT16: np.dtype(ml_dtypes.bfloat16)}
_OPS = {NCCL_SUM: "SUM", NCCL_PROD: "PROD", NCCL_MAX: "MAX", NCCL_MIN: "MIN", NCCL_AVG: "SUM"}

_SUCCESS, _INVALID_ARGUMENT, _INVALID_USAGE = 0, 4, 5
_ERRORS = {_INVALID_ARGUMENT: ("NCCL_ERROR_INVALID_ARGUMENT", "invalid argument"),
           _INVALID_USAGE: ("NCCL_ERROR_INVALID_USAGE", "invalid usage")}

collective_counts: Counter = Counter()  # ncclAllReduce, ncclBroadcast, ... calls (replays included)


class NcclError(RuntimeError):
    """CuPy's ``NcclError``: ``'<name>: <message>'`` and ``.status`` (the stand-in adds what it saw)."""

    def __init__(self, status: int, detail: str = "") -> None:
        self.status = status
        name, message = _ERRORS.get(status, (f"NCCL_ERROR_{status}", "unknown error"))
        super().__init__(f"{name}: {message}" + (f" ({detail})" if detail else ""))

    def __reduce__(self) -> tuple:
        return (type(self), (self.status,))


def _mpi() -> Any:
    from mpi4py import MPI  # noqa: PLC0415 - optional 'dist' extra; importing it initialises MPI
    return MPI


def get_version() -> int:
    return 22800


def get_unique_id() -> tuple:
    """128 random values in -128..127, as ``ncclGetUniqueId`` through CuPy."""
    return tuple(int(b) - 256 if b > 127 else int(b) for b in os.urandom(128))


def groupStart() -> None:  # noqa: N802 - NCCL's name
    raise NcclError(_INVALID_USAGE, "ncclGroupStart: grouped calls are not offered by the stand-in")


class NcclCommunicator:
    """``cupy.cuda.nccl.NcclCommunicator(ndev, commId, rank)`` over MPI."""

    def __init__(self, ndev: int, commId: tuple, rank: int) -> None:  # noqa: N803 - CuPy's names
        if not isinstance(commId, tuple) or len(commId) != 128 or not all(-128 <= int(v) <= 127 for v in commId):
            raise NcclError(_INVALID_ARGUMENT, "commId must be the 128-value tuple get_unique_id() returns")
        if not 0 <= rank < ndev:
            raise NcclError(_INVALID_ARGUMENT, f"rank {rank} is not in [0, {ndev})")
        MPI = _mpi()
        color = zlib.crc32(bytes(int(v) & 0xFF for v in commId)) & 0x3FFFFFFF
        self._mpi = MPI.COMM_WORLD.Split(color, rank)
        if self._mpi.Get_size() != ndev:
            size = self._mpi.Get_size()
            self._mpi.Free()
            raise NcclError(_INVALID_USAGE, f"{size} processes joined with this unique id, but ndev is {ndev}")
        self._rank, self._size, self._device = rank, ndev, current_device()
        places = self._mpi.allgather((socket.gethostname(), self._device, rank))
        seen: dict = {}
        for host, device, other in places:
            if (host, device) in seen:
                self._mpi.Free()
                raise NcclError(_INVALID_USAGE, f"Duplicate GPU detected : rank {other} and rank "
                                                f"{seen[(host, device)]} both on CUDA device {device}")
            seen[(host, device)] = other
        self._ops = {code: getattr(MPI, name) for code, name in _OPS.items()}
        self._destroyed = False

    # ------------------------------------------------------------ queries
    def device_id(self) -> int:
        return self._device

    def rank_id(self) -> int:
        return self._rank

    def size(self) -> int:
        return self._size

    def destroy(self) -> None:
        if not self._destroyed:
            self._destroyed = True
            self._mpi.Free()

    abort = destroy

    # ------------------------------------------------------------ checks
    def _views(self, what: str, count: int, datatype: int, stream: int, *buffers: tuple) -> list:
        if self._destroyed:
            raise NcclError(_INVALID_USAGE, f"{what}: the communicator was destroyed")
        dtype = _DTYPES.get(datatype)
        if dtype is None:
            raise NcclError(_INVALID_ARGUMENT, f"{what}: datatype {datatype} is not an NCCL datatype code")
        if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 0:
            raise NcclError(_INVALID_ARGUMENT, f"{what}: count must be a non-negative integer, got {count!r}")
        current = _device.get_current_stream()
        if int(stream) != current.ptr:
            raise NcclError(_INVALID_ARGUMENT, f"{what}: stream 0x{int(stream):x} is not the current stream "
                                               f"{current!r} (tinyamp enqueues collectives on the current stream)")
        if current_device() != self._device:
            raise NcclError(_INVALID_USAGE, f"{what}: called on cuda:{current_device()}, the communicator is on "
                                            f"cuda:{self._device}")
        views = []
        for name, ptr, elements in buffers:
            if elements == 0:
                views.append(np.empty(0, dtype))
                continue
            buffer, offset = resolve(int(ptr), elements * dtype.itemsize, f"{what}: {name}")
            views.append(np.ndarray((elements,), dtype, buffer=buffer, offset=offset))
        return views

    def _op(self, what: str, op: int) -> Any:
        if op not in self._ops:
            raise NcclError(_INVALID_ARGUMENT, f"{what}: op {op} is not an NCCL reduction code")
        return self._ops[op]

    def _launch(self, name: str, action: Callable[[], None]) -> None:
        def counted() -> None:
            collective_counts[name] += 1
            action()
        run(name, counted)

    # ------------------------------------------------------------ collectives
    def allReduce(self, sendbuf: int, recvbuf: int, count: int, datatype: int, op: int,  # noqa: N802
                  stream: int) -> None:
        send, recv = self._views("ncclAllReduce", count, datatype, stream, ("sendbuff", sendbuf, count),
                                 ("recvbuff", recvbuf, count))
        mpi_op, comm, size = self._op("ncclAllReduce", op), self._mpi, self._size

        def action() -> None:
            work = send.astype(np.float32) if send.dtype.itemsize == 2 and send.dtype.kind != "i" else send.copy()
            comm.Allreduce(_mpi().IN_PLACE, work, op=mpi_op)
            if op == NCCL_AVG:
                work = work / work.dtype.type(size)
            recv[...] = work
        self._launch("ncclAllReduce", action)

    def bcast(self, buff: int, count: int, datatype: int, root: int, stream: int) -> None:
        (data,) = self._views("ncclBroadcast", count, datatype, stream, ("buff", buff, count))
        self._check_root("ncclBroadcast", root)
        comm = self._mpi
        self._launch("ncclBroadcast", lambda: comm.Bcast(data.view(np.uint8), root=root))

    def broadcast(self, sendbuff: int, recvbuff: int, count: int, datatype: int, root: int, stream: int) -> None:
        send, recv = self._views("ncclBroadcast", count, datatype, stream, ("sendbuff", sendbuff, count),
                                 ("recvbuff", recvbuff, count))
        self._check_root("ncclBroadcast", root)
        comm, rank = self._mpi, self._rank

        def action() -> None:
            if rank == root:
                recv[...] = send
            comm.Bcast(recv.view(np.uint8), root=root)
        self._launch("ncclBroadcast", action)

    def allGather(self, sendbuf: int, recvbuf: int, count: int, datatype: int, stream: int) -> None:  # noqa: N802
        send, recv = self._views("ncclAllGather", count, datatype, stream, ("sendbuff", sendbuf, count),
                                 ("recvbuff", recvbuf, count * self._size))
        comm = self._mpi
        self._launch("ncclAllGather", lambda: comm.Allgather(send.copy().view(np.uint8), recv.view(np.uint8)))

    def reduceScatter(self, sendbuf: int, recvbuf: int, recvcount: int, datatype: int, op: int,  # noqa: N802
                      stream: int) -> None:
        send, recv = self._views("ncclReduceScatter", recvcount, datatype, stream,
                                 ("sendbuff", sendbuf, recvcount * self._size), ("recvbuff", recvbuf, recvcount))
        mpi_op, comm, size = self._op("ncclReduceScatter", op), self._mpi, self._size

        def action() -> None:
            wide = send.dtype.itemsize == 2 and send.dtype.kind != "i"
            work = send.astype(np.float32) if wide else send.copy()
            out = np.empty(recv.shape, work.dtype)
            comm.Reduce_scatter_block(work, out, op=mpi_op)
            if op == NCCL_AVG:
                out = out / out.dtype.type(size)
            recv[...] = out
        self._launch("ncclReduceScatter", action)

    def _check_root(self, what: str, root: int) -> None:
        if not 0 <= root < self._size:
            raise NcclError(_INVALID_ARGUMENT, f"{what}: root {root} is not in [0, {self._size})")
