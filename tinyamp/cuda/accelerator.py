"""``ta.accelerator``: the device-agnostic view of the accelerator, as ``torch.accelerator``."""

from __future__ import annotations

from .. import backend
from . import devices as cuda


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
