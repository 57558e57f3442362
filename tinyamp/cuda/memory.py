"""``ta.cuda``'s memory statistics, as ``torch.cuda`` reports them, over CuPy's memory pool.

``memory_allocated`` (bytes held by live arrays), its peak since the start or the last
``reset_peak_memory_stats()`` (kept by :mod:`tinyamp.cuda_memory`, which the backend installs),
``memory_reserved`` (live plus cached) and ``empty_cache``; the private pools of live CUDA graphs
(``ta.cuda.graph_pool_handle``) count too. Not counted: the CUDA context, cuBLAS workspaces, loaded
kernels. ``device`` is None (the current GPU), an index, ``"cuda:N"`` or a Device. Without CUDA (on
the CPU) they return 0, as a CPU-only PyTorch build does: for what a CPU step keeps alive, see
``tinyamp.memory``.
"""

from __future__ import annotations

import warnings
from typing import Any

from .. import backend, cuda_memory


def _pool_on(device: Any) -> "tuple[Any, Any, int] | None":
    """(cupy, pool, device index), or None without CUDA."""
    cupy = backend.cupy_or_none()
    if cupy is None:
        return None
    if device is None:
        index = int(cupy.cuda.runtime.getDevice())
    elif isinstance(device, int):
        index = device
    else:
        index = backend.Device(device).index
    tracker = cuda_memory.tracker
    pool = tracker.pool if tracker is not None else cupy.get_default_memory_pool()
    return cupy, pool, index


def memory_allocated(device: Any = None) -> int:
    """Bytes held by live CuPy arrays on ``device`` (0 without CUDA)."""
    found = _pool_on(device)
    if found is None:
        return 0
    cupy, pool, index = found
    with cupy.cuda.Device(index):
        return int(pool.used_bytes()) + cuda_memory.used_in_graph_pools()


def max_memory_allocated(device: Any = None) -> int:
    """Peak of ``memory_allocated`` since the start or the last ``reset_peak_memory_stats``."""
    used = memory_allocated(device)
    tracker = cuda_memory.tracker
    if tracker is None:
        return used
    return max(used, tracker.peak.get(_pool_on(device)[2], 0))  # type: ignore[index]


def reset_peak_memory_stats(device: Any = None) -> None:
    """Start the peak over from the bytes in use now."""
    tracker = cuda_memory.tracker
    if tracker is not None:
        tracker.peak[_pool_on(device)[2]] = memory_allocated(device)  # type: ignore[index]


def reset_max_memory_allocated(device: Any = None) -> None:
    """Deprecated in PyTorch for ``reset_peak_memory_stats``, which it calls (with PyTorch's FutureWarning)."""
    warnings.warn("torch.cuda.reset_max_memory_allocated now calls torch.cuda.reset_peak_memory_stats, "
                  "which resets /all/ peak memory stats.", FutureWarning, stacklevel=2)
    reset_peak_memory_stats(device)


def memory_reserved(device: Any = None) -> int:
    """Bytes CuPy's pool holds on ``device``: live arrays plus cached free blocks (0 without CUDA)."""
    found = _pool_on(device)
    if found is None:
        return 0
    cupy, pool, index = found
    with cupy.cuda.Device(index):
        return int(pool.total_bytes()) + cuda_memory.reserved_in_graph_pools()


def empty_cache() -> None:
    """Give the pool's cached free blocks back to the device (live arrays stay); nothing without CUDA.

    Not inside a training loop: freeing device memory synchronises the GPU.
    The pools of CUDA graphs are left alone: their free blocks are the
    memory a graph's temporaries use at every replay.
    """
    found = _pool_on(None)
    if found is not None:
        found[1].free_all_blocks()
