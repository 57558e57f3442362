"""``ta.cuda`` and ``ta.accelerator``: PyTorch's ``torch.cuda`` / ``torch.accelerator`` functions.

Availability and device count, the current device, host-synchronisation
accounting (kept by :mod:`tinyamp.backend`, which every host read goes
through), and GPU memory statistics the way ``torch.cuda`` reports them:
``memory_allocated``, ``max_memory_allocated``, ``reset_peak_memory_stats``,
``memory_reserved``, ``empty_cache`` (the peak is kept by
:mod:`tinyamp.cuda_memory`). Its CUDA-graph names (``ta.cuda.CUDAGraph``,
``graph``, ``graph_pool_handle``, ``make_graphed_step``,
``is_current_stream_capturing``), RNG functions and the deprecated
``ta.cuda.amp`` live in higher layers and are reached through the package at
call time.
"""

from __future__ import annotations

import warnings
from typing import Any

import tinyamp

from . import backend, cuda_memory


class _Cuda:
    """``ta.cuda``: availability, host-synchronisation accounting, GPU memory statistics.

    The memory functions report CuPy's memory pool (PyTorch's names and
    meaning): bytes held by live arrays, their peak since the start or the last
    ``reset_peak_memory_stats()``, and bytes reserved (live plus cached); the
    private pools of live CUDA graphs (``ta.cuda.graph_pool_handle``) count too. Not
    counted: the CUDA context, cuBLAS workspaces, loaded kernels. ``device`` is
    None (the current GPU), an index, ``"cuda:N"`` or a Device. Without CUDA
    (on the CPU) they return 0, as a CPU-only PyTorch build does: for what a
    CPU step keeps alive, see ``tinyamp.memory``.
    """

    # CUDA graphs (tinyamp/cuda_graphs), one layer up: reached through the package at call time.
    GRAPH_NAMES = ("CUDAGraph", "graph", "graph_pool_handle", "make_graphed_step", "is_current_stream_capturing")
    # The CUDA generators' state and seeds (tinyamp/random.py, one layer up): ``ta.cuda.get_rng_state`` is
    # ``random.cuda_get_rng_state``.
    RNG_NAMES = ("get_rng_state", "set_rng_state", "get_rng_state_all", "set_rng_state_all", "manual_seed",
                 "manual_seed_all")

    def __getattr__(self, name: str) -> Any:
        if name in _Cuda.GRAPH_NAMES:
            return getattr(tinyamp.cuda_graphs, name)
        if name in _Cuda.RNG_NAMES:
            return getattr(tinyamp.random, "cuda_" + name)
        if name == "amp":  # torch.cuda.amp's deprecated spellings (tinyamp/amp/cuda_amp.py, one layer up)
            return tinyamp.amp.cuda_amp
        raise AttributeError(f"tinyamp.cuda has no attribute {name!r}")

    is_available = staticmethod(backend.cuda_available)
    device_count = staticmethod(backend.cuda_device_count)
    note_sync = staticmethod(backend.note_sync)
    sync_count = staticmethod(backend.sync_count)
    reset_sync_count = staticmethod(backend.reset_sync_count)

    def set_device(self, device: Any) -> None:
        """Make ``device`` (an index, ``"cuda:N"`` or a Device) this thread's current GPU (``torch.cuda.set_device``)."""
        index = device if isinstance(device, int) else backend.Device(device).index
        cupy = backend.cupy_or_none()
        if cupy is None:
            raise RuntimeError(f"ta.cuda.set_device({device!r}): CUDA is unavailable: {backend.why_no_cuda()}")
        if not 0 <= index < backend.cuda_device_count():  # type: ignore[operator]
            raise RuntimeError(f"ta.cuda.set_device({device!r}): invalid device ordinal (only "
                               f"{backend.cuda_device_count()} CUDA device(s) are present)")
        cupy.cuda.runtime.setDevice(index)

    def device(self, device: Any) -> "_DeviceContext":
        """``with ta.cuda.device(i):``: ``i`` (an index, ``"cuda:N"``, a Device; -1 or None: no change) is the
        current GPU inside the block, the previous one after it (``torch.cuda.device``)."""
        return _DeviceContext(self, device)

    def current_device(self) -> int:
        """The index of this thread's current GPU (``torch.cuda.current_device``)."""
        cupy = backend.cupy_or_none()
        if cupy is None:
            raise RuntimeError(f"ta.cuda.current_device(): CUDA is unavailable: {backend.why_no_cuda()}")
        return int(cupy.cuda.runtime.getDevice())

    def synchronize(self) -> None:
        """Wait for the GPU's queued work (a host synchronisation; counted)."""
        cupy = backend.cupy_or_none()
        if cupy is not None:
            backend.note_sync("ta.cuda.synchronize()")
            cupy.cuda.Device().synchronize()
            backend.raise_device_errors()

    def is_bf16_supported(self, including_emulation: bool = True) -> bool:
        """True when the current GPU computes in bfloat16 natively (compute capability 8.0+); False without CUDA.

        ``including_emulation`` is PyTorch's argument: tinyamp has no emulated
        bfloat16 on older GPUs, so it does not change the answer.
        """
        cupy = backend.cupy_or_none()
        if cupy is None:
            return False
        return int(cupy.cuda.Device().compute_capability) >= 80

    def standin_counters(self) -> Any:
        """The CUDA stand-in's counters (launches, allocations, copies, syncs per phase; see
        ``cupy_standin/_counters.py``). RuntimeError unless the stand-in is active."""
        counters = backend.provider_counters()
        if counters is None:
            raise RuntimeError("ta.cuda.standin_counters(): the CUDA stand-in is not active; run with "
                               "TINYAMP_CUDA=standin or inside tinyamp.backend.use_cuda_standin()")
        return counters

    # GPU memory (see the class docstring).
    def _pool_on(self, device: Any) -> "tuple[Any, Any, int] | None":
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

    def memory_allocated(self, device: Any = None) -> int:
        """Bytes held by live CuPy arrays on ``device`` (0 without CUDA)."""
        found = self._pool_on(device)
        if found is None:
            return 0
        cupy, pool, index = found
        with cupy.cuda.Device(index):
            return int(pool.used_bytes()) + cuda_memory.used_in_graph_pools()

    def max_memory_allocated(self, device: Any = None) -> int:
        """Peak of ``memory_allocated`` since the start or the last ``reset_peak_memory_stats``."""
        used = self.memory_allocated(device)
        tracker = cuda_memory.tracker
        if tracker is None:
            return used
        return max(used, tracker.peak.get(self._pool_on(device)[2], 0))  # type: ignore[index]

    def reset_peak_memory_stats(self, device: Any = None) -> None:
        """Start the peak over from the bytes in use now."""
        tracker = cuda_memory.tracker
        if tracker is not None:
            tracker.peak[self._pool_on(device)[2]] = self.memory_allocated(device)  # type: ignore[index]

    def reset_max_memory_allocated(self, device: Any = None) -> None:
        """Deprecated in PyTorch for ``reset_peak_memory_stats``, which it calls (with PyTorch's FutureWarning)."""
        warnings.warn("torch.cuda.reset_max_memory_allocated now calls torch.cuda.reset_peak_memory_stats, "
                      "which resets /all/ peak memory stats.", FutureWarning, stacklevel=2)
        self.reset_peak_memory_stats(device)

    def memory_reserved(self, device: Any = None) -> int:
        """Bytes CuPy's pool holds on ``device``: live arrays plus cached free blocks (0 without CUDA)."""
        found = self._pool_on(device)
        if found is None:
            return 0
        cupy, pool, index = found
        with cupy.cuda.Device(index):
            return int(pool.total_bytes()) + cuda_memory.reserved_in_graph_pools()

    def empty_cache(self) -> None:
        """Give the pool's cached free blocks back to the device (live arrays stay); nothing without CUDA.

        Not inside a training loop: freeing device memory synchronises the GPU.
        The pools of CUDA graphs are left alone: their free blocks are the
        memory a graph's temporaries use at every replay.
        """
        found = self._pool_on(None)
        if found is not None:
            found[1].free_all_blocks()


class _DeviceContext:
    """The context manager ``ta.cuda.device(i)`` returns: set the current GPU, restore it on exit."""

    def __init__(self, cuda_api: _Cuda, device: Any) -> None:
        self.cuda, self.previous = cuda_api, -1
        self.idx = -1 if device is None else device if isinstance(device, int) else backend.Device(device).index

    def __enter__(self) -> "_DeviceContext":
        if self.idx != -1:
            self.previous = self.cuda.current_device()
            self.cuda.set_device(self.idx)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.previous != -1:
            self.cuda.set_device(self.previous)


cuda = _Cuda()


class _Accelerator:
    """``ta.accelerator``: the device-agnostic view of the accelerator, as ``torch.accelerator``.

    tinyamp's one accelerator is CUDA (CuPy, or the stand-in). It counts as
    built when CuPy is installed (or the stand-in is active), as PyTorch's CUDA
    build does, and as available when a GPU is usable. Without CuPy this is
    PyTorch's CPU-only build: ``current_accelerator()`` is None and
    ``is_available()`` False.
    """

    def is_available(self) -> bool:
        """True when the accelerator was built and at least one device is usable."""
        return self.current_accelerator() is not None and cuda.is_available()

    def current_accelerator(self, check_available: bool = False) -> "backend.Device | None":
        """``device(type='cuda')`` when CUDA is built (and, with ``check_available``, usable); else None."""
        if not backend.cuda_built() or (check_available and not cuda.is_available()):
            return None
        return backend.Device("cuda")

    def device_count(self) -> int:
        """Number of usable accelerator devices (0 without one)."""
        return cuda.device_count() if self.current_accelerator() is not None else 0


accelerator = _Accelerator()
