"""Device memory of the stand-in: a deterministic pool, pointers, allocators, pinned host memory.

Like CuPy's default pool, every request is rounded up to 512 bytes and a freed
block is kept for a later request of the same rounded size. Of the free blocks
of a size, the one at the lowest address is handed out first, so what a pool
hands out depends only on which blocks are free, not on the order they were
freed in: a training step that allocates and frees the same sizes in the same
order gets the same addresses step after step (tinyamp's pointer-table cache
relies on that on a GPU). A
block is freed when the last array (or view, or ``MemoryPointer``) holding it
is garbage-collected, which CPython's reference counting does at once, as
CuPy's pool does.

"Device" memory is host memory here: a block is a NumPy byte buffer and its
address (``ptr``) is the buffer's real address, 256-byte aligned as
``cudaMalloc``'s. The g++-compiled kernels and the cuBLAS emulation read and
write through those addresses; :func:`resolve` maps an address back to its
live block and refuses one that is not inside a live allocation (a
use-after-free or an out-of-bounds read on a GPU).

The memory-pool API is CuPy's: ``MemoryPool`` (``malloc``, ``used_bytes``,
``free_bytes``, ``total_bytes``, ``n_free_blocks``, ``free_all_blocks``,
``set_limit``/``get_limit``), ``get_allocator``/``set_allocator``/
``using_allocator``, ``alloc``, and ``alloc_pinned_memory`` with its pool.
"""

from __future__ import annotations

import bisect
import contextlib
import heapq
import threading
import weakref
from typing import Any, Callable, Iterator

import numpy as np

from ._counters import counters
from ._topology import DEVICE_COUNT, OWN_DEVICE, current_device

ALLOCATION_UNIT = 512  # CuPy's pool rounds every request up to this
ALIGNMENT = 256  # cudaMalloc's alignment
FRESH_FILL = 0xFF  # a new block holds garbage, as GPU memory does: all-ones bytes are NaN / -1

class OutOfMemoryError(MemoryError):
    """``cupy.cuda.memory.OutOfMemoryError``: the pool's limit was reached."""

    def __init__(self, size: int, total: int, limit: int) -> None:
        super().__init__(f"Out of memory allocating {size:,} bytes "
                         f"(allocated so far: {total:,} bytes, limit set to: {limit:,} bytes).")


# Live blocks by base address, for resolve(): (bytes asked for, buffer), not the Memory object
# itself, so a block still goes back when its arrays go. The sorted addresses are rebuilt on
# demand: resolve() runs per cuBLAS call, allocations run per array.
_live: dict[int, tuple[int, np.ndarray]] = {}
_live_sorted: "list[int] | None" = None
# One lock for the pools and the live-block map: CuPy's pool is thread-safe, and a block goes back
# from whichever thread drops its last array. Re-entrant: a block may be freed (garbage collected)
# inside malloc itself.
_lock = threading.RLock()


class Memory:
    """One pool block (CuPy's ``PooledMemory``): ``ptr``, ``size``, ``device_id``.

    It goes back to its pool when the last reference to it goes.
    """

    __slots__ = ("ptr", "size", "device_id", "buffer", "pool", "__weakref__")

    def __init__(self, ptr: int, size: int, device_id: int, buffer: "np.ndarray | None", pool: Any) -> None:
        self.ptr, self.size, self.device_id, self.buffer, self.pool = ptr, size, device_id, buffer, pool

    def __del__(self) -> None:
        pool = self.pool
        if pool is not None:
            try:
                pool._give_back(self)
            except Exception:  # noqa: BLE001 - interpreter shutdown: module globals may be gone
                pass


class MemoryPointer:
    """``cupy.cuda.MemoryPointer``: an address inside a ``Memory`` block (``ptr``, ``mem``, ``device_id``)."""

    __slots__ = ("mem", "ptr", "device_id")

    def __init__(self, mem: Memory, offset: int) -> None:
        self.mem, self.ptr, self.device_id = mem, mem.ptr + offset, mem.device_id

    def __int__(self) -> int:
        return self.ptr

    def __add__(self, offset: int) -> "MemoryPointer":
        return MemoryPointer(self.mem, self.ptr - self.mem.ptr + int(offset))

    def __repr__(self) -> str:
        return f"<MemoryPointer 0x{self.ptr:x} device={self.device_id} mem=0x{self.mem.ptr:x}+{self.mem.size}>"


def _aligned_buffer(size: int) -> tuple[np.ndarray, int]:
    """A byte buffer of ``size`` bytes starting at an ALIGNMENT boundary, and that address."""
    raw = np.empty(size + ALIGNMENT, dtype=np.uint8)
    start = (-raw.ctypes.data) % ALIGNMENT
    buffer = raw[start:start + size]
    buffer.fill(FRESH_FILL)
    return buffer, buffer.ctypes.data


class MemoryPool:
    """``cupy.cuda.MemoryPool`` for one device: blocks rounded to 512 bytes, reused by exact rounded size."""

    def __init__(self, device_id: "int | None" = None) -> None:
        self.device_id = current_device() if device_id is None else device_id  # CuPy's pools serve the current one
        self._free: dict[int, list[tuple[int, np.ndarray]]] = {}  # size -> heap of (address, buffer)
        self._used = 0
        self._total = 0
        self._limit = 0  # 0: no limit
        self.device_mallocs = 0  # blocks taken from the "device" (pool growth), not from the free lists

    def malloc(self, size: int) -> MemoryPointer:
        """A block of at least ``size`` bytes: a freed one of the same rounded size if any."""
        if not size:
            return MemoryPointer(Memory(0, 0, self.device_id, None, None), 0)
        if DEVICE_COUNT > 1:
            _check_current_device(OWN_DEVICE)
        rounded = (size + ALLOCATION_UNIT - 1) // ALLOCATION_UNIT * ALLOCATION_UNIT
        with _lock:
            return self._malloc(size, rounded)

    def _malloc(self, size: int, rounded: int) -> MemoryPointer:
        global _live_sorted
        free = self._free.get(rounded)
        if free:
            ptr, buffer = heapq.heappop(free)  # the lowest address: independent of the order of frees
        else:
            if self._limit and self._total + rounded > self._limit:
                self.free_all_blocks()
                if self._total + rounded > self._limit:
                    raise OutOfMemoryError(rounded, self._total, self._limit)
            buffer, ptr = _aligned_buffer(rounded)
            self._total += rounded
            self.device_mallocs += 1
        self._used += rounded
        memory = Memory(ptr, rounded, self.device_id, buffer, self)
        _live[ptr] = (size, buffer)  # what was asked for: a read past it is a bug even inside the block
        _live_sorted = None
        counters.add("allocations", self)
        return MemoryPointer(memory, 0)

    def _give_back(self, memory: Memory) -> None:
        global _live_sorted
        with _lock:
            self._used -= memory.size
            heapq.heappush(self._free.setdefault(memory.size, []), (memory.ptr, memory.buffer))
            del _live[memory.ptr]
            _live_sorted = None

    def used_bytes(self) -> int:
        """Bytes in blocks held by live arrays."""
        return self._used

    def free_bytes(self) -> int:
        """Bytes in freed blocks kept for reuse."""
        return self._total - self._used

    def total_bytes(self) -> int:
        """used_bytes() + free_bytes()."""
        return self._total

    def n_free_blocks(self) -> int:
        with _lock:
            return sum(len(blocks) for blocks in self._free.values())

    def free_all_blocks(self, stream: Any = None) -> None:
        """Release every freed block (their addresses may come back later)."""
        counters.notify("frees", "MemoryPool.free_all_blocks")
        with _lock:
            self._total -= sum(size * len(blocks) for size, blocks in self._free.items())
            self._free.clear()

    def set_limit(self, size: "int | None" = None, fraction: "float | None" = None) -> None:
        if fraction is not None:
            raise NotImplementedError("the CUDA stand-in's pool takes set_limit(size=...) only")
        self._limit = int(size or 0)

    def get_limit(self) -> int:
        return self._limit


_pinned: dict[int, int] = {}  # start address -> size of each live pinned buffer


def is_pinned(host: np.ndarray) -> bool:
    """Whether ``host``'s memory lies in a pinned buffer (a copy from it need not wait for the device)."""
    start = host.__array_interface__["data"][0]
    return any(base <= start and start + host.nbytes <= base + size for base, size in tuple(_pinned.items()))


class PinnedMemoryPointer(bytearray):
    """``cupy.cuda.PinnedMemoryPointer``: page-locked host memory (here a plain buffer) with ``ptr`` and ``size``.

    It supports the buffer protocol, as CuPy's does: ``numpy.frombuffer(mem, dtype, count)``.
    """

    @property
    def ptr(self) -> int:
        return np.frombuffer(self, dtype=np.uint8).ctypes.data if len(self) else 0

    @property
    def size(self) -> int:
        return len(self)


class PinnedMemoryPool:
    """``cupy.cuda.PinnedMemoryPool``: ``malloc``, ``n_free_blocks``, ``free_all_blocks`` (no byte counters)."""

    def malloc(self, size: int) -> PinnedMemoryPointer:
        memory = PinnedMemoryPointer(int(size))
        if memory.size:
            _pinned[memory.ptr] = memory.size
            weakref.finalize(memory, _pinned.pop, memory.ptr, None)
        return memory

    def n_free_blocks(self) -> int:
        return 0

    def free_all_blocks(self) -> None:
        return None


def _check_current_device(owned: int) -> None:
    """With one device per local rank, memory comes only from this process's device, while it is current."""
    current = current_device()
    if current != owned:
        raise RuntimeError(  # runtime.CUDARuntimeError's message; runtime sits above this module
            f"cudaErrorInvalidDevice: invalid device ordinal (an allocation on cuda:{current}, but this process "
            f"(LOCAL_RANK={owned}) owns cuda:{owned}: the stand-in gives each local rank its own device; call ta.cuda.set_device({owned}) (torch.cuda.set_device) first)")


_default_pool = MemoryPool(OWN_DEVICE)
_default_pinned_pool = PinnedMemoryPool()
_current_allocator: Callable[[int], MemoryPointer] = _default_pool.malloc
_thread_local = threading.local()


def get_default_memory_pool() -> MemoryPool:
    return _default_pool


def get_default_pinned_memory_pool() -> PinnedMemoryPool:
    return _default_pinned_pool


def alloc_pinned_memory(size: int) -> PinnedMemoryPointer:
    return _default_pinned_pool.malloc(size)


def get_allocator() -> Callable[[int], MemoryPointer]:
    """The allocator new arrays use (thread-local under ``using_allocator``)."""
    local = getattr(_thread_local, "allocator", None)
    return local if local is not None else _current_allocator


def set_allocator(allocator: "Callable[[int], MemoryPointer] | None" = None) -> None:
    global _current_allocator
    if getattr(_thread_local, "allocator", None) is not None:
        raise ValueError("Can't change the global allocator inside `using_allocator` context manager")
    _current_allocator = _default_pool.malloc if allocator is None else allocator


@contextlib.contextmanager
def using_allocator(allocator: "Callable[[int], MemoryPointer] | None" = None) -> Iterator[None]:
    previous = getattr(_thread_local, "allocator", None)
    _thread_local.allocator = _default_pool.malloc if allocator is None else allocator
    try:
        yield
    finally:
        _thread_local.allocator = previous


def raw_malloc(size: int) -> int:
    """``cudaMalloc`` outside every pool (``runtime.malloc``): the address of ``size`` fresh bytes."""
    global _live_sorted
    buffer, ptr = _aligned_buffer(max(int(size), 1))
    with _lock:
        _live[ptr] = (int(size), buffer)
        _live_sorted = None
    return ptr


def raw_free(ptr: int) -> None:
    """``cudaFree`` of a ``raw_malloc`` address."""
    global _live_sorted
    with _lock:
        if _live.pop(int(ptr), None) is None:
            raise ValueError(f"cudaFree: 0x{int(ptr):x} is not a live allocation")
        _live_sorted = None


def alloc(size: int) -> MemoryPointer:
    """``cupy.cuda.alloc``: ``size`` bytes from the current allocator."""
    return get_allocator()(size)


def resolve(ptr: int, nbytes: int, what: str) -> tuple[np.ndarray, int]:
    """(the live block's byte buffer, offset of ``ptr`` in it) for ``nbytes`` read or written at ``ptr``.

    Raises ValueError naming ``what`` when the range is not inside the bytes
    one live allocation asked for: on a GPU that is an illegal address, a
    silent read of someone else's memory, or of the pool's rounding slack.
    """
    global _live_sorted
    with _lock:
        if _live_sorted is None:
            _live_sorted = sorted(_live)
        index = bisect.bisect_right(_live_sorted, ptr) - 1
        start = _live_sorted[index] if index >= 0 else None
        size, buffer = _live[start] if index >= 0 else (0, None)
    if index >= 0:
        offset = ptr - start
        if offset + nbytes <= size:
            return buffer, offset
        if offset < size:
            raise ValueError(f"{what}: {nbytes} bytes at 0x{ptr:x} run past the end of their allocation "
                             f"(0x{start:x}, {size} bytes) by {offset + nbytes - size} bytes")
    raise ValueError(f"{what}: 0x{ptr:x} is not inside any live device allocation")
