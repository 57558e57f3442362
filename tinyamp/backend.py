"""Array backends and devices: the only module that imports CuPy.

A :class:`Device` names where a tensor's array lives ("cpu" -> NumPy,
"cuda:N" -> CuPy on GPU N). Everything else in tinyamp asks this module for
the array module (``xp``) of a device or of an array, and never imports CuPy
itself, so tinyamp installs and runs on machines without CuPy or a GPU.

``ta.cuda`` also counts host synchronisations and reports GPU memory the way
``torch.cuda`` does: ``memory_allocated``, ``max_memory_allocated``,
``reset_peak_memory_stats``, ``memory_reserved`` (see ``_PeakTracker``).
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Any

import numpy as np

_INSTALL_HINT = (
    "install CuPy for your CUDA version with `pip install tinyamp[cuda12]` "
    "(cupy-cuda12x) or `pip install tinyamp[cuda13]` (cupy-cuda13x)"
)

_cupy: ModuleType | None = None
_cupy_checked = False
_cupy_error: str | None = None
_tracker: "_PeakTracker | None" = None


def _load_cupy() -> ModuleType | None:
    """Import CuPy once; remember why it is unusable instead of raising."""
    global _cupy, _cupy_checked, _cupy_error
    if _cupy_checked:
        return _cupy
    _cupy_checked = True
    try:
        import cupy  # noqa: PLC0415 - the one place CuPy is imported
    except ImportError:
        _cupy_error = f"CuPy is not installed; {_INSTALL_HINT}"
        return None
    try:
        available = bool(cupy.is_available())
    except Exception as exc:  # a broken driver can raise from is_available
        available = False
        _cupy_error = f"CuPy is installed but cannot use a GPU ({exc})"
    if not available:
        _cupy_error = _cupy_error or (
            "CuPy is installed but no usable CUDA GPU was found (no device or "
            "no driver); run on a machine with an NVIDIA GPU and driver"
        )
        return None
    _cupy = cupy
    _install_tracker(cupy)
    return cupy


class _PeakTracker:
    """CuPy's allocator, wrapped: after every allocation the pool's used bytes feed a peak per device.

    CuPy's pool keeps no high-water mark. Its used bytes (live arrays, each
    rounded up to 512 bytes) can only rise at an allocation, so reading them
    right after each one gives the exact peak. The cost is one Python call per
    allocation (well under a microsecond; a pool hit stays free of host syncs).
    """

    def __init__(self, allocator: Any, pool: Any, current_device: Any) -> None:
        self._allocator, self.pool, self._current_device = allocator, pool, current_device
        self.peak: dict[int, int] = {}

    def malloc(self, nbytes: int) -> Any:
        memory = self._allocator(nbytes)
        used = self.pool.used_bytes()
        device_id = self._current_device()
        if used > self.peak.get(device_id, 0):
            self.peak[device_id] = used
        return memory


def _install_tracker(cupy: ModuleType) -> None:
    """Wrap CuPy's current allocator when it is a pool that counts its bytes.

    ``TINYAMP_CUDA_MEMORY_STATS=0`` leaves CuPy's allocator alone (then the peak
    reads as the current value). An allocator set later with
    ``cupy.cuda.set_allocator`` replaces the wrapper and stops the peak.
    """
    global _tracker
    if os.environ.get("TINYAMP_CUDA_MEMORY_STATS", "1") == "0":
        return
    current = cupy.cuda.memory.get_allocator()
    pool = getattr(current, "__self__", None)
    if not (hasattr(pool, "used_bytes") and hasattr(pool, "total_bytes")):
        return  # a foreign allocator (RMM, torch's...): its pool is not ours to read
    tracker = _PeakTracker(current, pool, cupy.cuda.runtime.getDevice)
    try:
        cupy.cuda.set_allocator(tracker.malloc)
    except ValueError:  # inside cupy.cuda.using_allocator(): CuPy refuses a global change
        return
    _tracker = tracker


class _Cuda:
    """``ta.cuda``: availability, host-synchronisation accounting, GPU memory statistics.

    The memory functions report CuPy's memory pool (PyTorch's names and
    meaning): bytes held by live arrays, their peak since the start or the last
    ``reset_peak_memory_stats()``, and bytes reserved (live plus cached). Not
    counted: the CUDA context, cuBLAS workspaces, loaded kernels. ``device`` is
    None (the current GPU), an index, ``"cuda:N"`` or a Device. Without CUDA
    (on the CPU) they return 0: for what a CPU step keeps alive, see
    ``tinyamp.memory``.
    """

    def __init__(self) -> None:
        self._sync_count = 0

    def is_available(self) -> bool:
        """True when CuPy imports and sees at least one GPU."""
        return _load_cupy() is not None

    def device_count(self) -> int:
        cupy = _load_cupy()
        return 0 if cupy is None else int(cupy.cuda.runtime.getDeviceCount())

    def synchronize(self) -> None:
        cupy = _load_cupy()
        if cupy is not None:
            cupy.cuda.Device().synchronize()

    # Host syncs: every place that moves a device value to the host (item(),
    # numpy(), a host-side inf check) calls note_sync(). It counts on the CPU
    # too, so "zero syncs per step" is testable without a GPU.
    def note_sync(self) -> None:
        self._sync_count += 1

    def sync_count(self) -> int:
        """Number of host synchronisations tinyamp has performed so far."""
        return self._sync_count

    def reset_sync_count(self) -> None:
        self._sync_count = 0

    # GPU memory (see the class docstring).
    def _pool_on(self, device: Any) -> "tuple[Any, Any, int] | None":
        """(cupy, pool, device index), or None without CUDA."""
        cupy = _load_cupy()
        if cupy is None:
            return None
        if device is None:
            index = int(cupy.cuda.runtime.getDevice())
        elif isinstance(device, int):
            index = device
        else:
            index = Device(device).index
        pool = _tracker.pool if _tracker is not None else cupy.get_default_memory_pool()
        return cupy, pool, index

    def memory_allocated(self, device: Any = None) -> int:
        """Bytes held by live CuPy arrays on ``device`` (0 without CUDA)."""
        found = self._pool_on(device)
        if found is None:
            return 0
        cupy, pool, index = found
        with cupy.cuda.Device(index):
            return int(pool.used_bytes())

    def max_memory_allocated(self, device: Any = None) -> int:
        """Peak of ``memory_allocated`` since the start or the last ``reset_peak_memory_stats``."""
        used = self.memory_allocated(device)
        if _tracker is None:
            return used
        return max(used, _tracker.peak.get(self._pool_on(device)[2], 0))  # type: ignore[index]

    def reset_peak_memory_stats(self, device: Any = None) -> None:
        """Start the peak over from the bytes in use now."""
        if _tracker is not None:
            _tracker.peak[self._pool_on(device)[2]] = self.memory_allocated(device)  # type: ignore[index]

    def memory_reserved(self, device: Any = None) -> int:
        """Bytes CuPy's pool holds on ``device``: live arrays plus cached free blocks (0 without CUDA)."""
        found = self._pool_on(device)
        if found is None:
            return 0
        cupy, pool, index = found
        with cupy.cuda.Device(index):
            return int(pool.total_bytes())


cuda = _Cuda()


class Device:
    """Where an array lives: ``Device("cpu")`` or ``Device("cuda:0")``."""

    __slots__ = ("type", "index")

    def __init__(self, spec: "str | Device" = "cpu", index: int | None = None) -> None:
        if isinstance(spec, Device):
            self.type, self.index = spec.type, spec.index
            return
        if not isinstance(spec, str):
            raise TypeError(f"device: expected a string like 'cpu' or 'cuda:0', got {spec!r}")
        kind, _, idx = spec.partition(":")
        if kind not in ("cpu", "cuda"):
            raise ValueError(f"device: unknown device type {spec!r}; expected 'cpu', 'cuda' or 'cuda:N'")
        if kind == "cpu":
            if idx or index not in (None, 0):
                raise ValueError(f"device: 'cpu' takes no index, got {spec!r}")
            self.type, self.index = "cpu", None
            return
        if idx:
            if not idx.isdigit():
                raise ValueError(f"device: bad cuda index in {spec!r}")
            index = int(idx)
        self.type, self.index = "cuda", 0 if index is None else int(index)
        if _load_cupy() is None:
            raise RuntimeError(f"device {spec!r} requested but CUDA is unavailable: {_cupy_error}")
        count = cuda.device_count()
        if self.index >= count:
            raise RuntimeError(f"device {spec!r} requested but only {count} CUDA device(s) are present")

    @property
    def xp(self) -> ModuleType:
        """The array module for this device (numpy or cupy)."""
        return np if self.type == "cpu" else _cupy  # type: ignore[return-value]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            other = Device(other)
        return isinstance(other, Device) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self) -> int:
        return hash((self.type, self.index))

    def __str__(self) -> str:
        return "cpu" if self.type == "cpu" else f"cuda:{self.index}"

    def __repr__(self) -> str:
        return f"device(type='{self.type}'" + ("" if self.index is None else f", index={self.index}") + ")"


CPU = Device("cpu")


def device(spec: "str | Device" = "cpu", index: int | None = None) -> Device:
    """``ta.device("cpu" | "cuda" | "cuda:0")``."""
    return Device(spec, index)


def is_cupy_array(array: Any) -> bool:
    return _cupy is not None and isinstance(array, _cupy.ndarray)


def array_module(array: Any) -> ModuleType:
    """numpy or cupy, whichever owns ``array``."""
    return _cupy if is_cupy_array(array) else np  # type: ignore[return-value]


def device_of(array: Any) -> Device:
    if is_cupy_array(array):
        return Device(f"cuda:{array.device.id}")
    return CPU


def to_device(array: Any, dev: Device) -> Any:
    """Move an array to ``dev`` (a copy only when it changes device)."""
    src = device_of(array)
    if src == dev:
        return array
    if dev.type == "cpu":
        cuda.note_sync()  # device -> host copy waits for the GPU
        return _cupy.asnumpy(array)  # type: ignore[union-attr]
    with _cupy.cuda.Device(dev.index):  # type: ignore[union-attr]
        return _cupy.asarray(array)  # type: ignore[union-attr]


def to_host(array: Any) -> np.ndarray:
    """A NumPy copy/view of any backend array (counts as a host sync on GPU)."""
    if is_cupy_array(array):
        cuda.note_sync()
        return _cupy.asnumpy(array)  # type: ignore[union-attr]
    return np.asarray(array)


def cuda_lib(name: str) -> ModuleType:
    """Import a CuPy submodule (e.g. ``cupy_backends.cuda.libs.cublas``).

    Used by GPU-only code paths (gemm, fused kernels) so that CuPy stays
    imported in this one module's namespace of responsibility.
    """
    if _load_cupy() is None:
        raise RuntimeError(f"CUDA is unavailable: {_cupy_error}")
    return importlib.import_module(name)


def cupy() -> ModuleType:
    """The CuPy module itself (raises the clear error when unavailable)."""
    module = _load_cupy()
    if module is None:
        raise RuntimeError(f"CUDA is unavailable: {_cupy_error}")
    return module
