"""``ta.accelerator``: the device-agnostic view of the accelerator, as ``torch.accelerator``.

tinyamp's one accelerator is CUDA (CuPy, or the CUDA stand-in). It counts as
"built" when CuPy is installed (or the stand-in is active), as PyTorch's
CUDA build; it is available when a GPU is usable. Without CuPy this is
PyTorch's CPU-only build: ``current_accelerator()`` is None and
``is_available()`` False.
"""

from __future__ import annotations

from . import backend
from .backend import Device


def is_available() -> bool:
    """True when the accelerator was built and at least one device is usable."""
    return current_accelerator() is not None and backend.cuda.is_available()


def current_accelerator(check_available: bool = False) -> "Device | None":
    """``device(type='cuda')`` when CUDA is built (and, with ``check_available``, usable); else None."""
    if not backend.cuda_built():
        return None
    if check_available and not backend.cuda.is_available():
        return None
    return Device("cuda")


def device_count() -> int:
    """Number of usable accelerator devices (0 without one)."""
    return backend.cuda.device_count() if current_accelerator() is not None else 0
