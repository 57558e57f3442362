"""``cupy.cuda`` of the stand-in: devices, streams (and their capture into graphs), events, runtime, memory pools
and allocators, cuBLAS, cuRAND and NCCL."""

from __future__ import annotations

from . import _capture as graph
from . import _device as device
from . import _memory as memory
from . import cublas, nccl, runtime
from ._device import Device, Event, Stream, get_cublas_handle, get_current_stream, get_elapsed_time
from ._memory import (MemoryPointer, MemoryPool, PinnedMemoryPointer, PinnedMemoryPool, alloc, alloc_pinned_memory,
                      get_allocator, set_allocator, using_allocator)


def is_available() -> bool:
    return True


__all__ = ["graph", "device", "memory", "cublas", "nccl", "runtime", "Device", "Event", "Stream",
           "get_cublas_handle", "get_current_stream", "get_elapsed_time", "MemoryPointer", "MemoryPool",
           "PinnedMemoryPointer", "PinnedMemoryPool", "alloc", "alloc_pinned_memory", "get_allocator", "set_allocator",
           "using_allocator", "is_available"]
