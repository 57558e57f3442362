"""Array backends and devices: the only module that imports CuPy.

A :class:`Device` names where a tensor's array lives ("cpu" -> NumPy,
"cuda:N" -> CuPy on GPU N). Everything else in tinyamp asks this module for
the array module (``xp``) of a device or of an array, and never imports CuPy
itself, so tinyamp installs and runs on machines without CuPy or a GPU.

``ta.cuda`` and ``ta.accelerator`` (PyTorch's functions: availability, the
current device, memory statistics) are in :mod:`tinyamp.cuda`. This module
keeps what the layers below them must ask about a capture in progress
(:func:`current_capture`) and counts host synchronisations: every host read
and host-to-device copy tinyamp makes goes through
``to_host``/``to_device``/``note_sync`` here, and each raises a clear error
during a capture, on a GPU and on the stand-in.

The CUDA backend is CuPy, or the strict CUDA stand-in of
``cupy_standin`` (CuPy's API over NumPy, for CI without a GPU) when
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
from types import ModuleType
from typing import Any, Callable, Iterator

import numpy as np

from . import cuda_memory

_INSTALL_HINT = (
    "install CuPy for your CUDA version with `pip install tinyamp[cuda12]` "
    "(cupy-cuda12x) or `pip install tinyamp[cuda13]` (cupy-cuda13x)"
)

_cupy: ModuleType | None = None
_cupy_checked = False
_cupy_error: str | None = None
_standin = False  # True while the strict CUDA stand-in (cupy_standin) plays CuPy's part
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
    """``cupy_standin``, imported when first asked for: ``import tinyamp`` does not load it."""
    return importlib.import_module("cupy_standin")


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
    """Make the strict CUDA stand-in (``cupy_standin``) the CUDA backend, until ``restore()``.

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


def provided_library(name: str) -> Any:
    """The C library ``name`` (``"libcublas.so"``) as the CUDA provider supplies it, or None when the
    caller is to load the real one (CuPy supplies none; the stand-in its emulations)."""
    return getattr(cupy(), "LIBRARIES", {}).get(name)


def provider_counters() -> Any:
    """The CUDA provider's launch/byte counters (the stand-in keeps them), or None (CuPy, or no CUDA)."""
    return getattr(_cupy, "counters", None) if _standin else None


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
# The tinyamp captures in progress (kernels/cuda/capture.py pushes a CUDAGraph while it captures), and
# the observers of a graphed step (told which optimizers and scalers took part in a step).
_captures: list[Any] = []
_step_observers: list[Callable[[Any], None]] = []
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def current_capture() -> Any:
    """The ``ta.cuda.CUDAGraph`` capturing now, or None (one list check: cheap on every call)."""
    return _captures[-1] if _captures else None


@contextlib.contextmanager
def capturing(graph: Any) -> Iterator[None]:
    """Mark ``graph`` as the capture in progress inside (``kernels/cuda/capture.py`` opens it)."""
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


# Host syncs: every place that moves a device value to the host (item(), numpy(), a host-side inf
# check) calls note_sync(). It counts on the CPU too, so "zero syncs per step" is testable without a
# GPU; inside a CUDA graph capture it raises (naming ``what``). ``ta.cuda.sync_count`` reads it.
_sync_count = 0


def note_sync(what: str = "a host synchronisation") -> None:
    global _sync_count
    if _captures:
        refuse_in_capture(what, HOST_READ_WHY)
    _sync_count += 1


def sync_count() -> int:
    """Number of host synchronisations tinyamp has performed so far."""
    return _sync_count


def reset_sync_count() -> None:
    global _sync_count
    _sync_count = 0


def cupy_or_none() -> ModuleType | None:
    """The CUDA backend (CuPy or the stand-in), or None when CUDA is unusable (:func:`why_no_cuda` says why)."""
    return _load_cupy()


def why_no_cuda() -> "str | None":
    return _cupy_error


def cuda_available() -> bool:
    """True when CuPy imports and sees at least one GPU (or the CUDA stand-in is active)."""
    return _load_cupy() is not None


def cuda_device_count() -> int:
    return _device_count_now()


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
        index = array.device.id
        return _DEVICES.get(("cuda", index)) or Device("cuda", index)  # Device's own cache, looked up directly
    if type(array) is not np.ndarray and hasattr(array, "fp8_codes"):  # quantised fp8: where its codes are
        return device_of(array.fp8_codes)
    return CPU


def to_device(array: Any, dev: Device) -> Any:
    """Move an array to ``dev`` (a copy only when it changes device)."""
    src = device_of(array)
    if src is dev or src == dev:  # devices are interned: the usual call is an identity test
        return array
    if dev.type == "cpu":
        note_sync(f"a copy from {src} to the CPU")  # device -> host copy waits for the GPU
        host = _cupy.asnumpy(array)  # type: ignore[union-attr]
        if _device_checks:  # a host read, as to_host's: the errors kernels flagged surface here too
            raise_device_errors()
        return host
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


def raise_device_errors() -> None:
    """Raise the first error a kernel flagged on the device since the last host read (``defer_device_check``)."""
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
        note_sync(what)
        host = _cupy.asnumpy(array)  # type: ignore[union-attr]
        if _device_checks:
            raise_device_errors()
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
    module = _cupy if _cupy is not None else _load_cupy()
    if module is None:
        raise RuntimeError(f"CUDA is unavailable: {_cupy_error}")
    return module
