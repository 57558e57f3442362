"""Array backends and devices: the only module that imports CuPy.

A :class:`Device` names where a tensor's array lives ("cpu" -> NumPy,
"cuda:N" -> CuPy on GPU N). Everything else in tinyamp asks this module for
the array module (``xp``) of a device or of an array, and never imports CuPy
itself, so tinyamp installs and runs on machines without CuPy or a GPU.

``ta.cuda`` also counts host synchronisations and reports GPU memory the way
``torch.cuda`` does: ``memory_allocated``, ``max_memory_allocated``,
``reset_peak_memory_stats``, ``memory_reserved``, ``empty_cache`` (the peak
is kept by :mod:`tinyamp.cuda_memory`). Its CUDA-graph names (``ta.cuda.CUDAGraph``, ``graph``,
``graph_pool_handle``, ``make_graphed_step``, ``is_current_stream_capturing``)
live in ``tinyamp/cuda_graphs`` and are reached through the package at call
time. This module keeps what the layers below them must ask about a capture
in progress (:func:`current_capture`): every host read and host-to-device copy
tinyamp makes goes through ``to_host``/``to_device``/``cuda.note_sync`` here,
and each raises a clear error during a capture, on a GPU and on the stand-in.

The CUDA backend is CuPy, or the strict CUDA stand-in of
``tinyamp/cuda_standin`` (CuPy's API over NumPy, for CI without a GPU) when
``TINYAMP_CUDA=standin`` is set or inside :func:`use_cuda_standin`. Modules
that cache device arrays register with :func:`on_cuda_switch` so a switch
drops them.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import traceback
import warnings
from types import ModuleType
from typing import Any, Callable, Iterator

import numpy as np

import tinyamp

from . import cuda_memory

_INSTALL_HINT = (
    "install CuPy for your CUDA version with `pip install tinyamp[cuda12]` "
    "(cupy-cuda12x) or `pip install tinyamp[cuda13]` (cupy-cuda13x)"
)

_cupy: ModuleType | None = None
_cupy_checked = False
_cupy_error: str | None = None
_standin = False  # True while the strict CUDA stand-in (tinyamp.cuda_standin) plays CuPy's part
_device_count: int | None = None  # cached: CUDA fixes the device count when it initialises
_switch_hooks: list[Callable[[], None]] = []

CUDA_LIBS = {"cupy_backends.cuda.libs.cublas": "cublas", "cupyx": "cupyx", "cupy.cuda.nccl": "nccl"}  # what the stand-in offers


def _load_cupy() -> ModuleType | None:
    """Import CuPy (or the stand-in, with ``TINYAMP_CUDA=standin``) once; remember why it is unusable."""
    global _cupy, _cupy_checked, _cupy_error
    if _cupy_checked:
        return _cupy
    _cupy_checked = True
    choice = os.environ.get("TINYAMP_CUDA", "cupy")
    if choice == "standin":
        _activate_standin()
        return _cupy
    if choice != "cupy":
        _cupy_error = f"TINYAMP_CUDA={choice!r} is not one of 'cupy' (the default) or 'standin'"
        return None
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
    cuda_memory.install_tracker(cupy)
    return cupy


def _standin_module() -> ModuleType:
    """``tinyamp.cuda_standin``, imported when first asked for: ``import tinyamp`` does not load it."""
    return importlib.import_module("tinyamp.cuda_standin")


def _activate_standin() -> None:
    global _cupy, _cupy_checked, _cupy_error, _standin
    cuda_standin = _standin_module()
    cuda_standin.cuda.set_allocator(None)  # its pool's own malloc: a tracker from an earlier activation goes
    _cupy, _cupy_checked, _cupy_error, _standin = cuda_standin, True, None, True
    cuda_memory.tracker = None
    cuda_memory.install_tracker(cuda_standin)


def on_cuda_switch(hook: Callable[[], None]) -> Callable[[], None]:
    """Register ``hook`` to run whenever the CUDA backend changes (CuPy <-> the stand-in).

    Modules that cache device arrays or kernels (pointer tables, flags,
    generators) register one that drops them: an array of one backend must
    never reach the other. Usable as a decorator.
    """
    _switch_hooks.append(hook)
    return hook


class use_cuda_standin:  # noqa: N801 - used like a function: use_cuda_standin() or `with use_cuda_standin():`
    """Make the strict CUDA stand-in (``tinyamp.cuda_standin``) the CUDA backend, until ``restore()``.

    Calling it switches at once; as a context manager it restores the previous
    backend (CuPy, no CUDA, or the stand-in) on exit. Caches of device arrays
    are dropped at each switch (see :func:`on_cuda_switch`).
    ``TINYAMP_CUDA=standin`` in the environment does the same for a whole run.
    """

    def __init__(self) -> None:
        self._previous = (_cupy, _cupy_checked, _cupy_error, cuda_memory.tracker, _standin)
        _activate_standin()
        _switched()

    def restore(self) -> None:
        global _cupy, _cupy_checked, _cupy_error, _standin
        _cupy, _cupy_checked, _cupy_error, cuda_memory.tracker, _standin = self._previous
        if _standin:
            _activate_standin()  # its allocator was reset by the activation being undone
        else:
            _standin_module().cuda.set_allocator(None)  # no tracker left wrapping an inactive stand-in
        _switched()

    def __enter__(self) -> "use_cuda_standin":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.restore()


def _switched() -> None:
    global _device_count
    _device_count = None
    for hook in _switch_hooks:
        hook()


def cuda_built() -> bool:
    """True when a CUDA backend is installed (CuPy importable, or the stand-in), GPU or not: PyTorch's CUDA build."""
    if _load_cupy() is not None:
        return True
    return os.environ.get("TINYAMP_CUDA", "cupy") == "cupy" and importlib.util.find_spec("cupy") is not None


def standin_active() -> bool:
    """True while the CUDA stand-in plays CuPy's part."""
    _load_cupy()
    return _standin


def _device_count_now() -> int:
    global _device_count
    if _device_count is None:
        cupy = _load_cupy()
        _device_count = 0 if cupy is None else int(cupy.cuda.runtime.getDeviceCount())
    return _device_count


# ------------------------------------------------------ CUDA graph captures
# The tinyamp captures in progress (tinyamp.cuda_graphs pushes a CUDAGraph while it captures), and
# the observers of a graphed step (told which optimizers and scalers took part in a step).
_captures: list[Any] = []
_step_observers: list[Callable[[Any], None]] = []
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def current_capture() -> Any:
    """The ``ta.cuda.CUDAGraph`` capturing now, or None (one list check: cheap on every call)."""
    return _captures[-1] if _captures else None


@contextlib.contextmanager
def capturing(graph: Any) -> Iterator[None]:
    """Mark ``graph`` as the capture in progress inside (``tinyamp.cuda_graphs`` opens it)."""
    _captures.append(graph)
    try:
        yield
    finally:
        _captures.remove(graph)


def caller_outside_tinyamp() -> str:
    """``file:line (function)`` of the innermost frame outside the tinyamp package: the user's line."""
    for frame in reversed(traceback.extract_stack()[:-1]):
        if not os.path.abspath(frame.filename).startswith(_PACKAGE_DIR):
            return f"{frame.filename}:{frame.lineno} ({frame.name})"
    return "inside tinyamp"


def refuse_in_capture(what: str, why: str) -> None:
    """Raise the clear error for ``what`` when a CUDA graph capture is in progress; nothing otherwise."""
    if _captures:
        raise RuntimeError(f"{what} inside a CUDA graph capture, at {caller_outside_tinyamp()}: {why}")


HOST_READ_WHY = ("a host read needs the GPU's result now, but captured work runs only when the graph is "
                 "replayed. Keep the value on the device (return the tensor from the step and read it after "
                 "the call, or log it every N steps outside the captured step)")


def observe(participant: Any) -> None:
    """Tell the open graphed steps that ``participant`` (an optimizer, a GradScaler) took part in this step."""
    for observer in _step_observers:
        observer(participant)


@contextlib.contextmanager
def observing(observer: Callable[[Any], None]) -> Iterator[None]:
    """Call ``observer(participant)`` for every :func:`observe` inside."""
    _step_observers.append(observer)
    try:
        yield
    finally:
        _step_observers.remove(observer)


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

    def __init__(self) -> None:
        self._sync_count = 0

    def __getattr__(self, name: str) -> Any:
        if name in _Cuda.GRAPH_NAMES:
            return getattr(tinyamp.cuda_graphs, name)
        if name in _Cuda.RNG_NAMES:
            return getattr(tinyamp.random, "cuda_" + name)
        if name == "amp":  # torch.cuda.amp's deprecated spellings (tinyamp/amp/cuda_amp.py, one layer up)
            return tinyamp.amp.cuda_amp
        raise AttributeError(f"tinyamp.cuda has no attribute {name!r}")

    def is_available(self) -> bool:
        """True when CuPy imports and sees at least one GPU (or the CUDA stand-in is active)."""
        return _load_cupy() is not None

    def device_count(self) -> int:
        return _device_count_now()

    def set_device(self, device: Any) -> None:
        """Make ``device`` (an index, ``"cuda:N"`` or a Device) this thread's current GPU (``torch.cuda.set_device``)."""
        index = device if isinstance(device, int) else Device(device).index
        cupy = _load_cupy()
        if cupy is None:
            raise RuntimeError(f"ta.cuda.set_device({device!r}): CUDA is unavailable: {_cupy_error}")
        if not 0 <= index < _device_count_now():  # type: ignore[operator]
            raise RuntimeError(f"ta.cuda.set_device({device!r}): invalid device ordinal (only "
                               f"{_device_count_now()} CUDA device(s) are present)")
        cupy.cuda.runtime.setDevice(index)

    def current_device(self) -> int:
        """The index of this thread's current GPU (``torch.cuda.current_device``)."""
        cupy = _load_cupy()
        if cupy is None:
            raise RuntimeError(f"ta.cuda.current_device(): CUDA is unavailable: {_cupy_error}")
        return int(cupy.cuda.runtime.getDevice())

    def synchronize(self) -> None:
        """Wait for the GPU's queued work (a host synchronisation; counted)."""
        cupy = _load_cupy()
        if cupy is not None:
            self.note_sync("ta.cuda.synchronize()")
            cupy.cuda.Device().synchronize()
            if _device_checks:
                _raise_device_errors()

    def is_bf16_supported(self, including_emulation: bool = True) -> bool:
        """True when the current GPU computes in bfloat16 natively (compute capability 8.0+); False without CUDA.

        ``including_emulation`` is PyTorch's argument: tinyamp has no emulated
        bfloat16 on older GPUs, so it does not change the answer.
        """
        cupy = _load_cupy()
        if cupy is None:
            return False
        return int(cupy.cuda.Device().compute_capability) >= 80

    # Host syncs: every place that moves a device value to the host (item(),
    # numpy(), a host-side inf check) calls note_sync(). It counts on the CPU
    # too, so "zero syncs per step" is testable without a GPU; inside a CUDA
    # graph capture it raises (naming ``what``).
    def note_sync(self, what: str = "a host synchronisation") -> None:
        if _captures:
            refuse_in_capture(what, HOST_READ_WHY)
        self._sync_count += 1

    def sync_count(self) -> int:
        """Number of host synchronisations tinyamp has performed so far."""
        return self._sync_count

    def reset_sync_count(self) -> None:
        self._sync_count = 0

    def standin_counters(self) -> Any:
        """The CUDA stand-in's counters (launches, allocations, copies, syncs per phase; see
        ``tinyamp/cuda_standin/_counters.py``). RuntimeError unless the stand-in is active."""
        if not standin_active():
            raise RuntimeError("ta.cuda.standin_counters(): the CUDA stand-in is not active; run with "
                               "TINYAMP_CUDA=standin or inside tinyamp.backend.use_cuda_standin()")
        return _cupy.counters  # type: ignore[union-attr]

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

    def current_accelerator(self, check_available: bool = False) -> "Device | None":
        """``device(type='cuda')`` when CUDA is built (and, with ``check_available``, usable); else None."""
        if not cuda_built() or (check_available and not cuda.is_available()):
            return None
        return Device("cuda")

    def device_count(self) -> int:
        """Number of usable accelerator devices (0 without one)."""
        return cuda.device_count() if self.current_accelerator() is not None else 0


accelerator = _Accelerator()


_DEVICES: dict[tuple[str, "int | None"], "Device"] = {}


class Device:
    """Where an array lives: ``Device("cpu")`` or ``Device("cuda:0")``.

    Devices are values, made once per (type, index) and cached, so naming a
    device costs a dict lookup. Constructing a CUDA device never needs CuPy
    (as ``torch.device("cuda")`` on a CPU-only build); using it for arrays
    (``.xp``) raises the clear error that says what is missing.
    """

    __slots__ = ("type", "index")

    def __new__(cls, spec: "str | Device" = "cpu", index: int | None = None) -> "Device":
        if isinstance(spec, Device):
            return spec
        if not isinstance(spec, str):
            raise TypeError(f"device: expected a string like 'cpu' or 'cuda:0', got {spec!r}")
        cached = _DEVICES.get((spec, index))
        if cached is not None:
            return cached
        kind, _, idx = spec.partition(":")
        if kind not in ("cpu", "cuda"):
            raise ValueError(f"device: unknown device type {spec!r}; expected 'cpu', 'cuda' or 'cuda:N'")
        if kind == "cpu":
            if idx or index not in (None, 0):
                raise ValueError(f"device: 'cpu' takes no index, got {spec!r}")
            number = None
        else:
            if idx:
                if not idx.isdigit():
                    raise ValueError(f"device: bad cuda index in {spec!r}")
                index = int(idx)
            number = 0 if index is None else int(index)
        made = _DEVICES.get((kind, number))
        if made is None:
            made = object.__new__(cls)
            made.type, made.index = kind, number
            _DEVICES[(kind, number)] = made
        _DEVICES[(spec, index)] = made
        return made

    @property
    def xp(self) -> ModuleType:
        """The array module for this device (numpy, cupy or the stand-in); RuntimeError if it cannot be used."""
        if self.type == "cpu":
            return np
        cupy = _cupy if _cupy is not None else _load_cupy()
        if cupy is None:
            raise RuntimeError(f"device '{self}' requested but CUDA is unavailable: {_cupy_error}")
        if self.index >= _device_count_now():  # type: ignore[operator]
            raise RuntimeError(f"device '{self}' requested but only {_device_count_now()} CUDA device(s) "
                               "are present")
        return cupy

    def __eq__(self, other: object) -> bool:
        if other is self:
            return True
        if isinstance(other, str):
            other = Device(other)
        return isinstance(other, Device) and (self.type, self.index) == (other.type, other.index)

    # One object per (type, index) (see __new__), so equal devices are the same object and the
    # identity hash agrees with __eq__; C's hash keeps dicts keyed by device (per-device groups
    # of gradients, keep flags) off a Python call per lookup.
    __hash__ = object.__hash__

    def __reduce__(self) -> tuple:
        return (Device, (str(self),))

    def __str__(self) -> str:
        return "cpu" if self.type == "cpu" else f"cuda:{self.index}"

    def __repr__(self) -> str:
        return f"device(type='{self.type}'" + ("" if self.index is None else f", index={self.index}") + ")"


CPU = Device("cpu")
_default_device = CPU


def device(spec: "str | Device" = "cpu", index: int | None = None) -> Device:
    """``ta.device("cpu" | "cuda" | "cuda:0")`` (constructible without CuPy, as in PyTorch)."""
    return Device(spec, index)


def set_default_device(spec: "str | Device | None") -> None:
    """``torch.set_default_device``: where factory functions without ``device=`` put tensors (None: the CPU)."""
    global _default_device
    _default_device = CPU if spec is None else Device(spec)


def get_default_device() -> Device:
    """The device factory functions use when none is given (``torch.get_default_device``)."""
    return _default_device


def is_cupy_array(array: Any) -> bool:
    return _cupy is not None and isinstance(array, _cupy.ndarray)


def array_module(array: Any) -> ModuleType:
    """numpy or cupy, whichever owns ``array``."""
    return _cupy if is_cupy_array(array) else np  # type: ignore[return-value]


def device_of(array: Any) -> Device:
    if _cupy is not None and isinstance(array, _cupy.ndarray):
        return Device("cuda", array.device.id)
    return CPU


def to_device(array: Any, dev: Device) -> Any:
    """Move an array to ``dev`` (a copy only when it changes device)."""
    src = device_of(array)
    if src is dev or src == dev:  # devices are interned: the usual call is an identity test
        return array
    if dev.type == "cpu":
        cuda.note_sync(f"a copy from {src} to the CPU")  # device -> host copy waits for the GPU
        return _cupy.asnumpy(array)  # type: ignore[union-attr]
    if _captures:
        refuse_in_capture(f"a copy of a CPU array to {dev}",
                          "CUDA cannot copy host memory inside a captured graph (CuPy refuses every "
                          "host-to-device transfer while a stream captures); move the data to the GPU before "
                          "the step, e.g. as a static input of ta.cuda.make_graphed_step")
    cupy = dev.xp  # the clear error when CUDA is unavailable
    with cupy.cuda.Device(dev.index):
        return cupy.asarray(array)


# Errors kernels found on the device (an out-of-range class index), read at the next host read that
# waits for the device anyway, as PyTorch's device-side asserts surface: key -> check(), which returns
# the exception to raise (and resets its flag) or None. A launch that can set a flag puts its check here.
_device_checks: dict = {}


def defer_device_check(key: Any, check: Callable[[], "Exception | None"]) -> None:
    """Run ``check`` at the next host read of a device array (``to_host``, ``ta.cuda.synchronize``)."""
    _device_checks[key] = check


def _raise_device_errors() -> None:
    checks = list(_device_checks.values())
    _device_checks.clear()
    errors = [error for error in (check() for check in checks) if error is not None]
    if errors:
        raise errors[0]


def to_host(array: Any, what: str = "a device-to-host read") -> np.ndarray:
    """A NumPy copy/view of any backend array (counts as a host sync on GPU; raises during a capture).

    After the read (which waited for the device), errors that kernels flagged
    on the device are raised (see ``defer_device_check``).
    """
    if is_cupy_array(array):
        cuda.note_sync(what)
        host = _cupy.asnumpy(array)  # type: ignore[union-attr]
        if _device_checks:
            _raise_device_errors()
        return host
    return np.asarray(array)


def cuda_lib(name: str) -> ModuleType:
    """Import a CuPy submodule (e.g. ``cupy_backends.cuda.libs.cublas``); the stand-in's own under it.

    Used by GPU-only code paths (gemm, fused kernels) so that CuPy stays
    imported in this one module's namespace of responsibility.
    """
    if _load_cupy() is None:
        raise RuntimeError(f"CUDA is unavailable: {_cupy_error}")
    if _standin:
        if name not in CUDA_LIBS:
            raise ImportError(f"the CUDA stand-in has no {name!r} (it offers {sorted(CUDA_LIBS)})")
        return getattr(_cupy, CUDA_LIBS[name])
    return importlib.import_module(name)


def cupy() -> ModuleType:
    """The CuPy module itself, or the stand-in (raises the clear error when unavailable)."""
    module = _load_cupy()
    if module is None:
        raise RuntimeError(f"CUDA is unavailable: {_cupy_error}")
    return module
