"""``cupy.cuda.runtime`` of the stand-in: its devices, their properties, and CUDA's error type.

The stand-in has one device, id 0 (one per local rank under a launcher: see
``_topology.py``), reported as compute capability 8.0 (so bfloat16 and
float16 tensor-core paths are taken, as on an A100/H100). The current device
is per host thread, as in the CUDA runtime.
"""

from __future__ import annotations

from ._counters import counters
from ._memory import get_default_memory_pool, raw_free, raw_malloc
from ._topology import DEVICE_COUNT, current_device, set_current_device
COMPUTE_CAPABILITY = (8, 0)
TOTAL_MEMORY = 16 * 1024 ** 3  # what memGetInfo reports as the device's size

# cudaDataType_t (library_types.h)
CUDA_R_32F = 0
CUDA_R_64F = 1
CUDA_R_16F = 2
CUDA_C_32F = 4
CUDA_C_64F = 5
CUDA_R_16BF = 14

# cudaStreamCaptureMode
streamCaptureModeGlobal = 0
streamCaptureModeThreadLocal = 1
streamCaptureModeRelaxed = 2

cudaErrorInvalidValue = 1
cudaErrorInvalidDevice = 101
cudaErrorIllegalState = 401
cudaErrorMisalignedAddress = 716
cudaErrorStreamCaptureUnsupported = 900
cudaErrorStreamCaptureInvalidated = 901
_ERRORS = {cudaErrorInvalidValue: ("cudaErrorInvalidValue", "invalid argument"),
           cudaErrorInvalidDevice: ("cudaErrorInvalidDevice", "invalid device ordinal"),
           cudaErrorIllegalState: ("cudaErrorIllegalState", "the operation cannot be performed in the present "
                                   "state"),
           cudaErrorMisalignedAddress: ("cudaErrorMisalignedAddress", "misaligned address"),
           cudaErrorStreamCaptureUnsupported: ("cudaErrorStreamCaptureUnsupported",
                                               "operation not permitted when stream is capturing"),
           cudaErrorStreamCaptureInvalidated: ("cudaErrorStreamCaptureInvalidated",
                                               "operation failed due to a previous error during capture")}

is_hip = False


class CUDARuntimeError(RuntimeError):
    """``cupy_backends.cuda.api.runtime.CUDARuntimeError``: ``'<name>: <message>'`` and ``.status``.

    The stand-in may add what it saw in parentheses (``detail``): which operation, and where.
    """

    def __init__(self, status: int, detail: str = "") -> None:
        self.status, self.detail = status, detail
        name, message = _ERRORS.get(status, (f"cudaError{status}", "unknown error"))
        super().__init__(f"{name}: {message}" + (f" ({detail})" if detail else ""))

    def __reduce__(self) -> tuple:
        return (type(self), (self.status, self.detail))


def getDeviceCount() -> int:  # noqa: N802 - CUDA's name
    return DEVICE_COUNT


def getDevice() -> int:  # noqa: N802
    return current_device()


def setDevice(device: int) -> None:  # noqa: N802
    device = int(device)
    if not 0 <= device < DEVICE_COUNT:
        raise CUDARuntimeError(cudaErrorInvalidDevice)
    set_current_device(device)


def deviceSynchronize() -> None:  # noqa: N802
    """Wait for the device: one synchronisation (the work itself is already done here)."""
    counters.add("syncs", "deviceSynchronize")


def malloc(size: int) -> int:
    """``cudaMalloc`` outside CuPy's pool: the address. Not counted (the counters count a step's work), but
    refused during a capture as the synchronising call it is."""
    counters.notify("syncs", "cudaMalloc")
    return raw_malloc(size)


def free(ptr: int) -> None:
    """``cudaFree`` (synchronises the device)."""
    counters.notify("frees", "cudaFree")
    raw_free(ptr)


def memGetInfo() -> tuple[int, int]:  # noqa: N802
    """(free, total) bytes of the device: total minus what the stand-in's pools hold."""
    return TOTAL_MEMORY - get_default_memory_pool().total_bytes(), TOTAL_MEMORY


def getDeviceProperties(device: int) -> dict:  # noqa: N802
    if not 0 <= int(device) < DEVICE_COUNT:
        raise CUDARuntimeError(cudaErrorInvalidDevice)
    major, minor = COMPUTE_CAPABILITY
    return {"name": b"tinyamp CUDA stand-in (NumPy)", "totalGlobalMem": TOTAL_MEMORY, "major": major,
            "minor": minor, "multiProcessorCount": 1}


def runtimeGetVersion() -> int:  # noqa: N802
    return 13000


def driverGetVersion() -> int:  # noqa: N802
    return 13000
