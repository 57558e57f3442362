"""GPU memory accounting for ``ta.cuda``: the allocation peak and the CUDA graphs' private pools.

CuPy's memory pool keeps no high-water mark, so :func:`install_tracker` wraps
the current pool's allocator in a :class:`PeakTracker` (when the pool counts
its bytes in O(1)); ``ta.cuda.max_memory_allocated`` reads its peak. The pools
of live CUDA graphs are counted too, as PyTorch counts its graphs' pools.
``backend`` installs the tracker when it loads CuPy or the stand-in and swaps
:data:`tracker` when it switches between them; nothing here imports CuPy.
"""

from __future__ import annotations

import os
import weakref
from types import ModuleType
from typing import Any, Callable

tracker: "PeakTracker | None" = None
"""The allocator wrapper installed now (None: no peak is tracked)."""


class PeakTracker:
    """CuPy's allocator, wrapped: after every allocation the pool's used bytes feed a peak per device.

    CuPy's pool keeps no high-water mark. Its used bytes (live arrays, each
    rounded up to 512 bytes) can only rise at an allocation, so reading them
    right after each one gives the exact peak. The cost per allocation is one
    Python call and an O(1) read: the device comes from the allocation
    itself, and ``used_bytes()`` is a counter read in CuPy >= 14.1 and in the
    stand-in (older CuPy sums its live chunks, so there tracking is opt-in).
    """

    def __init__(self, allocator: Any, pool: Any, peak: "dict[int, int] | None" = None) -> None:
        self._allocator, self.pool, self._used_bytes = allocator, pool, pool.used_bytes
        self.peak: dict[int, int] = {} if peak is None else peak

    def malloc(self, nbytes: int) -> Any:
        memory = self._allocator(nbytes)
        # With CUDA graphs alive, ta.cuda's bytes are the default pool's and the graphs' pools' together.
        used = self._used_bytes() if not _graph_pools else tracker.pool.used_bytes() + used_in_graph_pools()
        device_id = memory.device_id
        if used > self.peak.get(device_id, 0):
            self.peak[device_id] = used
        return memory


# The private pools of live CUDA graphs (kernels/cuda/capture.py GraphPool objects), counted in ta.cuda's
# memory statistics as PyTorch counts its graphs' pools: id -> weak reference, the entry dropped when its
# pool goes. A plain dict, so every allocation's test for a live graph pool is a truth test, not a call.
_graph_pools: "dict[int, weakref.ref[Any]]" = {}


def graph_pool_allocator(owner: Any, pool: Any) -> Callable[[int], Any]:
    """The allocator a CUDA graph's captures use: ``pool.malloc``, counted in ``ta.cuda.memory_allocated``
    and its peak while ``owner`` (the graph's pool handle) lives."""
    _graph_pools[id(owner)] = weakref.ref(owner)
    weakref.finalize(owner, _graph_pools.pop, id(owner), None)
    if tracker is None:
        return pool.malloc
    return PeakTracker(pool.malloc, pool, tracker.peak).malloc


def _live_graph_pools() -> list[Any]:
    return [graph_pool for graph_pool in (ref() for ref in list(_graph_pools.values())) if graph_pool is not None]


def used_in_graph_pools() -> int:
    """Bytes held by live arrays in the pools of live CUDA graphs."""
    return sum(graph_pool.used_bytes() for graph_pool in _live_graph_pools())


def reserved_in_graph_pools() -> int:
    """Bytes the pools of live CUDA graphs hold (live arrays and cached free blocks)."""
    return sum(graph_pool.total_bytes() for graph_pool in _live_graph_pools())


def _used_bytes_is_constant_time(cupy: ModuleType) -> bool:
    """CuPy >= 14.1 keeps used_bytes() as one counter; earlier ones walk every live chunk."""
    if getattr(cupy, "IS_STANDIN", False):
        return True
    try:
        major, minor = (int(part) for part in str(cupy.__version__).split(".")[:2])
    except (AttributeError, ValueError):
        return False
    return (major, minor) >= (14, 1)


def install_tracker(cupy: ModuleType) -> None:
    """Wrap CuPy's current allocator when it is a pool that counts its bytes in O(1).

    ``TINYAMP_CUDA_MEMORY_STATS=1`` tracks the peak on any CuPy, ``=0`` never
    (then the peak reads as the current value). An allocator set later with
    ``cupy.cuda.set_allocator`` replaces the wrapper and stops the peak.
    """
    global tracker
    setting = os.environ.get("TINYAMP_CUDA_MEMORY_STATS", "auto")
    if setting == "0" or (setting != "1" and not _used_bytes_is_constant_time(cupy)):
        return
    current = cupy.cuda.memory.get_allocator()
    pool = getattr(current, "__self__", None)
    if not (hasattr(pool, "used_bytes") and hasattr(pool, "total_bytes")):
        return  # a foreign allocator (RMM, torch's...): its pool is not ours to read
    wrapper = PeakTracker(current, pool)
    try:
        cupy.cuda.set_allocator(wrapper.malloc)
    except ValueError:  # inside cupy.cuda.using_allocator(): CuPy refuses a global change
        return
    tracker = wrapper

