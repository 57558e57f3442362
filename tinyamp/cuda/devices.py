"""``ta.cuda``'s device functions: availability and count, the current GPU, synchronisation and its
accounting (kept by :mod:`tinyamp.backend`, which every host read goes through), bfloat16 support, and
the CUDA stand-in's counters. PyTorch's ``torch.cuda`` names and errors.
"""

from __future__ import annotations

from typing import Any

from .. import backend

is_available = backend.cuda_available
device_count = backend.cuda_device_count
note_sync = backend.note_sync
sync_count = backend.sync_count
reset_sync_count = backend.reset_sync_count


def set_device(device: Any) -> None:
    """Make ``device`` (an index, ``"cuda:N"`` or a Device) this thread's current GPU (``torch.cuda.set_device``)."""
    index = device if isinstance(device, int) else backend.Device(device).index
    cupy = backend.cupy_or_none()
    if cupy is None:
        raise RuntimeError(f"ta.cuda.set_device({device!r}): CUDA is unavailable: {backend.why_no_cuda()}")
    if not 0 <= index < backend.cuda_device_count():  # type: ignore[operator]
        raise RuntimeError(f"ta.cuda.set_device({device!r}): invalid device ordinal (only "
                           f"{backend.cuda_device_count()} CUDA device(s) are present)")
    cupy.cuda.runtime.setDevice(index)



class device:  # noqa: N801 - torch.cuda.device, used as a context manager
    """``with ta.cuda.device(i):``: ``i`` (an index, ``"cuda:N"``, a Device; -1 or None: no change) is the
    current GPU inside the block, the previous one after it (``torch.cuda.device``)."""

    def __init__(self, device: Any) -> None:
        self.previous = -1
        self.idx = -1 if device is None else device if isinstance(device, int) else backend.Device(device).index

    def __enter__(self) -> "device":
        if self.idx != -1:
            self.previous = current_device()
            set_device(self.idx)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.previous != -1:
            set_device(self.previous)

def current_device() -> int:
    """The index of this thread's current GPU (``torch.cuda.current_device``)."""
    cupy = backend.cupy_or_none()
    if cupy is None:
        raise RuntimeError(f"ta.cuda.current_device(): CUDA is unavailable: {backend.why_no_cuda()}")
    return int(cupy.cuda.runtime.getDevice())


def synchronize() -> None:
    """Wait for the GPU's queued work (a host synchronisation; counted)."""
    cupy = backend.cupy_or_none()
    if cupy is not None:
        backend.note_sync("ta.cuda.synchronize()")
        cupy.cuda.Device().synchronize()
        backend.raise_device_errors()


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """True when the current GPU computes in bfloat16 natively (compute capability 8.0+); False without CUDA.

    ``including_emulation`` is PyTorch's argument: tinyamp has no emulated
    bfloat16 on older GPUs, so it does not change the answer.
    """
    cupy = backend.cupy_or_none()
    if cupy is None:
        return False
    return int(cupy.cuda.Device().compute_capability) >= 80


def standin_counters() -> Any:
    """The CUDA stand-in's counters (launches, allocations, copies, syncs per phase; see
    ``cupy_standin/_counters.py``). RuntimeError unless the stand-in is active."""
    counters = backend.provider_counters()
    if counters is None:
        raise RuntimeError("ta.cuda.standin_counters(): the CUDA stand-in is not active; run with "
                           "TINYAMP_CUDA=standin or inside tinyamp.backend.use_cuda_standin()")
    return counters
