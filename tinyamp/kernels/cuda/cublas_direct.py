"""cuBLAS called directly (ctypes), so that GEMMs work inside a CUDA graph capture.

CuPy's cuBLAS wrappers (``cupy_backends.cuda.libs.cublas``) refuse every call
while the current stream captures ("calling cuBLAS API during stream capture
is currently unsupported"), though cuBLAS itself can be captured when it
allocates nothing. So tinyamp calls the libcublas CuPy has already loaded
(found among the process's loaded libraries) through ctypes, on a handle of
its own per device and host thread:

- the handle's stream is set (``cublasSetStream_v2``) to the current stream
  whenever that changes, and since setting a stream resets cuBLAS's
  workspace, the handle's workspace (``cublasSetWorkspace_v2``, a
  ``WORKSPACE_BYTES`` device buffer allocated with the handle, outside any
  capture and outside the memory pool) is set again right after: cuBLAS then
  allocates nothing, captured or not;
- pointer mode stays host (cuBLAS's default): ``alpha``/``beta`` are host
  constants read during the call, frozen into a captured graph.

Every GEMM tinyamp runs on a GPU goes through here, eager or captured: one
handle, one workspace and one algorithm choice for both, so a replayed graph
computes what the eager step computed, and every eager test exercises the
path a capture takes.

The interface, small on purpose (cuBLASLt epilogues can be added beside it):

- :func:`handle` - this thread's handle for an array's device, set to the
  current stream (made with its workspace on first use, never during a capture).
- :func:`gemmEx` / :func:`gemmStridedBatchedEx` - drop-ins for CuPy's wrappers
  of the same names (same arguments: a handle, column-major operands as
  device pointers, host pointers to alpha/beta); a failed status raises the
  wrapper's ``CUBLASError``. The constants (``CUBLAS_OP_N``, ...) are here too,
  so ``cublas_gemm._cublas_gemm`` takes this module as its ``cublas``.
- :func:`prepare` - make the handle before a capture begins (``ta.cuda.graph``
  does, and ``cublaslt_direct.prepare`` for cuBLASLt's).

On the CUDA stand-in the "library" is the stand-in's emulation of these C
entry points (``cupy_standin.LIBRARIES``), with cuBLAS's argument checks.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

from ... import backend

WORKSPACE_BYTES = 32 << 20  # cuBLAS's recommended user workspace on Hopper (32 MiB); enough for earlier chips

# cuBLAS status, operation and GEMM algorithm values (cublas_api.h, a stable ABI).
CUBLAS_STATUS_SUCCESS = 0
CUBLAS_OP_N, CUBLAS_OP_T = 0, 1
CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_COMPUTE_64F = 68, 77, 70
CUBLAS_GEMM_DEFAULT, CUBLAS_GEMM_DEFAULT_TENSOR_OP = -1, 99

_I, _P, _LL = ctypes.c_int, ctypes.c_void_p, ctypes.c_longlong
_ARGTYPES = {
    "cublasCreate_v2": [ctypes.POINTER(_P)],
    "cublasSetStream_v2": [_P, _P],
    "cublasSetWorkspace_v2": [_P, _P, ctypes.c_size_t],
    "cublasGemmEx": [_P, _I, _I, _I, _I, _I, _P, _P, _I, _I, _P, _I, _I, _P, _P, _I, _I, _I, _I],
    "cublasGemmStridedBatchedEx": [_P, _I, _I, _I, _I, _I, _P, _P, _I, _I, _LL, _P, _I, _I, _LL, _P, _P, _I, _I,
                                   _LL, _I, _I, _I],
}

# Per CUDA backend (CuPy or the stand-in, by module identity; kept across switches, as the handles and
# workspaces live as long as the process): its library, and per (device id, thread id) a handle, the
# stream it is set to and its workspace.
_libraries: dict[int, Any] = {}
_handles: dict[tuple, list] = {}  # (backend id, device id, thread id) -> [handle, stream, workspace]
_lock = threading.Lock()


def loaded_library(prefix: str, argtypes: dict, what: str) -> Any:
    """The library this process loaded whose file name starts with ``prefix`` (``/proc/self/maps``), as a
    ctypes library whose functions in ``argtypes`` are typed (each returns an int status)."""
    with open("/proc/self/maps") as maps:
        paths = [line.rstrip("\n").split(" ")[-1] for line in maps]
    found = [p for p in paths if p.rsplit("/", 1)[-1].startswith(prefix)]
    if not found:
        raise RuntimeError(f"{what}: {prefix}* is not among the loaded libraries (/proc/self/maps), so tinyamp "
                           f"cannot call it directly")
    library = ctypes.CDLL(found[0])
    for name, types in argtypes.items():
        function = getattr(library, name)
        function.argtypes, function.restype = types, ctypes.c_int
    return library


def backend_library(libraries: dict, find: Any) -> Any:
    """The active CUDA backend's library (``find()`` once per backend, kept in ``libraries``)."""
    key = id(backend.cupy())
    library = libraries.get(key)
    if library is None:
        with _lock:
            library = libraries[key] = libraries.get(key) or find()
    return library


def _find_library() -> Any:
    """The libcublas CuPy loaded (its wrapper module links it), as a ctypes library with typed functions."""
    backend.cuda_lib("cupy_backends.cuda.libs.cublas")  # imports (and so loads) libcublas
    return backend.provided_library("libcublas.so") or loaded_library("libcublas.so", _ARGTYPES, "cuBLAS")


def _check(status: int, function: str) -> None:
    if status != CUBLAS_STATUS_SUCCESS:
        wrapper = backend.cuda_lib("cupy_backends.cuda.libs.cublas")
        raise wrapper.CUBLASError(status) from RuntimeError(f"{function} (tinyamp's direct cuBLAS call)")


def _library() -> Any:
    """The active CUDA backend's cuBLAS library."""
    return backend_library(_libraries, _find_library)


def _entry(device_id: int) -> list:
    """This thread's handle on ``device_id`` (the device is current), made with its workspace on first use."""
    cp = backend.cupy()
    key = (id(cp), device_id, threading.get_ident())
    entry = _handles.get(key)
    if entry is not None:
        return entry
    if backend.current_capture() is not None:
        raise RuntimeError("cuBLAS: tinyamp's cuBLAS handle is made outside a capture (it allocates its "
                           "workspace); run the step once before capturing it, or call "
                           "tinyamp.kernels.cuda.cublas_direct.prepare() first")
    handle = ctypes.c_void_p()
    _check(_library().cublasCreate_v2(ctypes.byref(handle)), "cublasCreate_v2")
    workspace = cp.cuda.runtime.malloc(WORKSPACE_BYTES)  # outside the pool: never freed or reused
    entry = _handles[key] = [handle.value, None, workspace]
    return entry


def prepare(device: Any = None) -> None:
    """Make this thread's handle on ``device`` (a CuPy device; default the current one) now, outside a capture."""
    cp = backend.cupy()
    device = cp.cuda.Device() if device is None else device
    with device:
        _entry(device.id)


def workspace(device_id: int) -> int:
    """This thread's workspace on ``device_id`` (``WORKSPACE_BYTES``), shared with cuBLASLt on the same stream."""
    return _entry(device_id)[2]


def handle(array: Any) -> int:
    """This thread's handle for ``array``'s device (which must be current), set to the current stream."""
    entry = _entry(array.device.id)
    stream = backend.cupy().cuda.get_current_stream().ptr
    if entry[1] != stream:
        library = _library()
        _check(library.cublasSetStream_v2(entry[0], stream), "cublasSetStream_v2")
        # cublasSetStream_v2 resets the workspace to cuBLAS's own pool: give it ours again.
        _check(library.cublasSetWorkspace_v2(entry[0], entry[2], WORKSPACE_BYTES), "cublasSetWorkspace_v2")
        entry[1] = stream
    return entry[0]


# The GEMMs, with the signatures of CuPy's wrappers (cupy_backends.cuda.libs.cublas), on a handle from handle().
def gemmEx(handle: int, transa: int, transb: int, m: int, n: int, k: int, alpha: int,  # noqa: N802
           A: int, Atype: int, lda: int, B: int, Btype: int, ldb: int, beta: int,  # noqa: N803
           C: int, Ctype: int, ldc: int, computeType: int, algo: int) -> None:  # noqa: N803
    """``cublasGemmEx``: ``C = alpha * op(A) @ op(B) + beta * C``, column-major, device pointers as ints."""
    _check(_library().cublasGemmEx(handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta,
                                 C, Ctype, ldc, computeType, algo), "cublasGemmEx")


def gemmStridedBatchedEx(handle: int, transa: int, transb: int, m: int, n: int, k: int,  # noqa: N802
                         alpha: int, A: int, Atype: int, lda: int, strideA: int,  # noqa: N803
                         B: int, Btype: int, ldb: int, strideB: int, beta: int,  # noqa: N803
                         C: int, Ctype: int, ldc: int, strideC: int, batchCount: int,  # noqa: N803
                         computeType: int, algo: int) -> None:  # noqa: N803
    """``cublasGemmStridedBatchedEx``: ``batchCount`` GEMMs, operand ``i`` at ``pointer + i * stride`` elements."""
    _check(_library().cublasGemmStridedBatchedEx(handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA,
                                               B, Btype, ldb, strideB, beta, C, Ctype, ldc, strideC, batchCount,
                                               computeType, algo), "cublasGemmStridedBatchedEx")
