"""``cupy_backends.cuda.libs.cublas`` of the stand-in: ``gemmEx`` and ``gemmStridedBatchedEx`` on device pointers.

Arguments are taken and checked as cuBLAS takes them: column-major operands
given by address, data type and leading dimension; the handle must be one
that ``cupy.cuda.device.get_cublas_handle()`` gave; sizes and leading
dimensions are validated (``CUBLAS_STATUS_INVALID_VALUE``), and so is the
combination of data types and compute type (``CUBLAS_STATUS_NOT_SUPPORTED``),
both raised as ``CUBLASError`` as CuPy does. Every byte an operand covers must
lie inside one live device allocation (a GPU would read out of bounds).
``alpha``/``beta`` are read through their pointers in the handle's pointer
mode (host by default, as CuPy leaves it).

The arithmetic is a reference, not cuBLAS's kernel: the operands are upcast
exactly to the compute precision (float32 for ``CUBLAS_COMPUTE_32F``) and
multiplied by NumPy's BLAS in that precision, then ``alpha * AB + beta * C``
is rounded once to C's type; ``C`` is not read when ``beta`` is 0. For
``CUBLAS_COMPUTE_16F`` the sum runs in float16, one product at a time; with
``CUBLAS_COMPUTE_32F_FAST_TF32`` the float32 operands are rounded to TF32 (10-bit
mantissas, to nearest even) and the products summed in float32.

CuPy's wrappers refuse every call while the current stream captures
(``NotImplementedError``, CuPy's text: ``refuse_while_capturing``); so do the
stand-in's, and its ``matmul``/``dot`` on floating arrays, which CuPy runs
through them. cuBLAS itself can be captured: ``LIBRARY`` emulates the C entry
points ``tinyamp.kernels.cuda.cublas_direct`` calls through ctypes (handles,
streams, workspaces, the GEMMs), and a GEMM called there during a capture is
recorded as cuBLAS's kernels would be: the operand addresses are frozen, and
so are ``alpha``/``beta`` in host pointer mode; in device pointer mode they
are read from device memory at each replay.
"""

from __future__ import annotations

import ctypes
import itertools
from typing import Any

import ml_dtypes
import numpy as np

from . import _capture, _device, runtime
from ._array import run
from ._device import _CUBLAS_HANDLE_BASE
from ._memory import resolve

CUBLAS_OP_N, CUBLAS_OP_T, CUBLAS_OP_C = 0, 1, 2
CUBLAS_POINTER_MODE_HOST, CUBLAS_POINTER_MODE_DEVICE = 0, 1
CUBLAS_DEFAULT_MATH, CUBLAS_TENSOR_OP_MATH, CUBLAS_PEDANTIC_MATH, CUBLAS_TF32_TENSOR_OP_MATH = 0, 1, 2, 3
CUBLAS_COMPUTE_16F, CUBLAS_COMPUTE_16F_PEDANTIC = 64, 65
CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F_PEDANTIC = 68, 69
CUBLAS_COMPUTE_64F, CUBLAS_COMPUTE_64F_PEDANTIC = 70, 71
CUBLAS_COMPUTE_32F_FAST_16F, CUBLAS_COMPUTE_32F_FAST_16BF, CUBLAS_COMPUTE_32F_FAST_TF32 = 74, 75, 77
CUBLAS_GEMM_DEFAULT, CUBLAS_GEMM_DEFAULT_TENSOR_OP = -1, 99

STATUS = {0: "CUBLAS_STATUS_SUCCESS", 1: "CUBLAS_STATUS_NOT_INITIALIZED", 3: "CUBLAS_STATUS_ALLOC_FAILED",
          7: "CUBLAS_STATUS_INVALID_VALUE", 8: "CUBLAS_STATUS_ARCH_MISMATCH", 11: "CUBLAS_STATUS_MAPPING_ERROR",
          13: "CUBLAS_STATUS_EXECUTION_FAILED", 14: "CUBLAS_STATUS_INTERNAL_ERROR",
          15: "CUBLAS_STATUS_NOT_SUPPORTED", 16: "CUBLAS_STATUS_LICENSE_ERROR"}
_NOT_INITIALIZED, _INVALID_VALUE, _NOT_SUPPORTED = 1, 7, 15


class CUBLASError(RuntimeError):
    """CuPy's ``CUBLASError``: the status name as the message, ``.status`` the number."""

    def __init__(self, status: int, detail: str = "") -> None:
        self.status = status
        super().__init__(STATUS[status] + (f" ({detail})" if detail else ""))

    def __reduce__(self) -> tuple:
        return (type(self), (self.status,))


_DATA_TYPES = {runtime.CUDA_R_16F: np.dtype(np.float16), runtime.CUDA_R_16BF: np.dtype(ml_dtypes.bfloat16),
               runtime.CUDA_R_32F: np.dtype(np.float32), runtime.CUDA_R_64F: np.dtype(np.float64)}
# cudaDataType compute types of the legacy overloads, as cublasMigrateComputeType maps them.
_LEGACY_COMPUTE = {runtime.CUDA_R_16F: CUBLAS_COMPUTE_16F, runtime.CUDA_R_32F: CUBLAS_COMPUTE_32F,
                   runtime.CUDA_R_64F: CUBLAS_COMPUTE_64F}
_F16, _BF16, _F32, _F64 = (runtime.CUDA_R_16F, runtime.CUDA_R_16BF, runtime.CUDA_R_32F, runtime.CUDA_R_64F)
# (A/B type, C type) each compute type supports (cuBLAS's cublasGemmEx table, real types).
_SUPPORTED = {
    CUBLAS_COMPUTE_16F: {(_F16, _F16)},
    CUBLAS_COMPUTE_32F: {(_F16, _F16), (_F16, _F32), (_BF16, _BF16), (_BF16, _F32), (_F32, _F32)},
    CUBLAS_COMPUTE_32F_FAST_16F: {(_F32, _F32)}, CUBLAS_COMPUTE_32F_FAST_16BF: {(_F32, _F32)},
    CUBLAS_COMPUTE_32F_FAST_TF32: {(_F32, _F32)},
    CUBLAS_COMPUTE_64F: {(_F64, _F64)},
}
_SUPPORTED[CUBLAS_COMPUTE_16F_PEDANTIC] = _SUPPORTED[CUBLAS_COMPUTE_16F]
_SUPPORTED[CUBLAS_COMPUTE_32F_PEDANTIC] = _SUPPORTED[CUBLAS_COMPUTE_32F]
_SUPPORTED[CUBLAS_COMPUTE_64F_PEDANTIC] = _SUPPORTED[CUBLAS_COMPUTE_64F]
_ACCUMULATOR = {CUBLAS_COMPUTE_16F: np.float16, CUBLAS_COMPUTE_16F_PEDANTIC: np.float16,
                CUBLAS_COMPUTE_64F: np.float64, CUBLAS_COMPUTE_64F_PEDANTIC: np.float64}

_pointer_modes: dict[int, int] = {}
_math_modes: dict[int, int] = {}


def _check_handle(handle: int) -> None:
    if not 0 <= int(handle) - _CUBLAS_HANDLE_BASE < runtime.DEVICE_COUNT and int(handle) not in LIBRARY.handles:
        raise CUBLASError(_NOT_INITIALIZED, f"handle {handle!r} is not one cupy.cuda.device.get_cublas_handle() gave")


def getPointerMode(handle: int) -> int:  # noqa: N802 - cuBLAS's name
    _check_handle(handle)
    return _pointer_modes.get(handle, CUBLAS_POINTER_MODE_HOST)


def setPointerMode(handle: int, mode: int) -> None:  # noqa: N802
    _check_handle(handle)
    _pointer_modes[handle] = int(mode)


def getMathMode(handle: int) -> int:  # noqa: N802
    _check_handle(handle)
    return _math_modes.get(handle, CUBLAS_DEFAULT_MATH)


def setMathMode(handle: int, mode: int) -> None:  # noqa: N802
    _check_handle(handle)
    _math_modes[handle] = int(mode)


def _c_int(name: str, value: Any) -> int:
    value = int(value)
    if not -2 ** 31 <= value < 2 ** 31:
        raise OverflowError(f"value too large to convert to int ({name}={value})")
    return value


def _scalar(handle: int, ptr: int, scale_type: Any, what: str) -> float:
    """alpha or beta, read through its pointer in the handle's pointer mode."""
    size = np.dtype(scale_type).itemsize
    if getPointerMode(handle) == CUBLAS_POINTER_MODE_DEVICE:
        buffer, offset = resolve(int(ptr), size, f"{what} (device pointer mode)")
        return float(buffer[offset:offset + size].view(scale_type)[0])
    if not ptr:
        raise CUBLASError(_INVALID_VALUE, f"{what} is a null pointer")
    raw = (ctypes.c_char * size).from_address(int(ptr))
    return float(np.frombuffer(bytes(raw), dtype=scale_type)[0])


def _device_scalar(ptr: int, scale_type: Any, what: str) -> np.ndarray:
    """A one-element view of a device-mode alpha/beta, read each time the GEMM runs."""
    size = np.dtype(scale_type).itemsize
    buffer, offset = resolve(int(ptr), size, f"{what} (device pointer mode)")
    return buffer[offset:offset + size].view(scale_type)


def _matrix(function: str, name: str, ptr: int, dtype: np.dtype, rows: int, cols: int, ld: int,
            batch: int = 1, stride: int = 0) -> np.ndarray:
    """The column-major ``rows x cols`` matrices at ``ptr`` (``batch`` of them, ``stride`` elements apart).

    Returned as a NumPy view of shape (batch, rows, cols) over the device memory.
    """
    if rows == 0 or cols == 0 or batch == 0:
        return np.zeros((batch, rows, cols), dtype)
    extent = (batch - 1) * stride + (cols - 1) * ld + rows
    if stride < 0:
        raise CUBLASError(_INVALID_VALUE, f"{function}: negative stride for {name}")
    buffer, offset = resolve(int(ptr), extent * dtype.itemsize, f"{function}: matrix {name}")
    view = np.ndarray((batch, cols, rows), dtype, buffer=buffer, offset=offset,
                      strides=(stride * dtype.itemsize, ld * dtype.itemsize, dtype.itemsize))
    return view.swapaxes(1, 2)


def _tf32(x: np.ndarray) -> np.ndarray:
    """float32 operands as TF32 holds them: mantissas rounded to 10 bits, to nearest even (NaN kept)."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = ((bits + (0x0FFF + ((bits >> 13) & 1))) & 0xFFFFE000).view(np.float32)
    return np.where(np.isnan(x), np.float32(x), rounded)


def _gemm(function: str, handle: int, transa: int, transb: int, m: int, n: int, k: int,
          alpha: int, a: int, a_type: int, lda: int, stride_a: int,
          b: int, b_type: int, ldb: int, stride_b: int, beta: int,
          c: int, c_type: int, ldc: int, stride_c: int, batch: int, compute_type: int, algo: int) -> None:
    _check_handle(handle)
    m, n, k, lda, ldb, ldc, batch = (_c_int(name, v) for name, v in
                                     (("m", m), ("n", n), ("k", k), ("lda", lda), ("ldb", ldb), ("ldc", ldc),
                                      ("batchCount", batch)))
    if transa not in (CUBLAS_OP_N, CUBLAS_OP_T) or transb not in (CUBLAS_OP_N, CUBLAS_OP_T):
        raise CUBLASError(_INVALID_VALUE if transa not in (0, 1, 2) or transb not in (0, 1, 2) else _NOT_SUPPORTED,
                          f"{function}: transa={transa}, transb={transb} (real types take N or T)")
    rows_a, cols_a = (m, k) if transa == CUBLAS_OP_N else (k, m)
    rows_b, cols_b = (k, n) if transb == CUBLAS_OP_N else (n, k)
    problems = [f"{name} < 0" for name, v in (("m", m), ("n", n), ("k", k), ("batchCount", batch)) if v < 0]
    problems += [f"{name}={ld} < max(1, {rows})" for name, ld, rows in
                 (("lda", lda, rows_a), ("ldb", ldb, rows_b), ("ldc", ldc, m)) if ld < max(1, rows)]
    if problems:
        raise CUBLASError(_INVALID_VALUE, f"{function}: " + ", ".join(problems))
    compute = _LEGACY_COMPUTE.get(compute_type, compute_type)
    if a_type != b_type or (a_type, c_type) not in _SUPPORTED.get(compute, ()):
        raise CUBLASError(_NOT_SUPPORTED, f"{function}: A/B/C types {a_type}/{b_type}/{c_type} with compute "
                                          f"type {compute_type}")
    if m == 0 or n == 0 or batch == 0:
        run(function, lambda: None)
        return
    in_size, c_size = _DATA_TYPES[a_type].itemsize, _DATA_TYPES[c_type].itemsize
    in_dtype, c_dtype = _DATA_TYPES[a_type], _DATA_TYPES[c_type]
    accumulate = _ACCUMULATOR.get(compute, np.float32)
    scale_type = np.float16 if accumulate is np.float16 else np.float64 if accumulate is np.float64 else np.float32
    # alpha and beta: values read now in host pointer mode (a graph keeps them), device memory read at
    # each run in device pointer mode.
    alpha_value = _scalar(handle, alpha, scale_type, f"{function}: alpha")
    beta_value = _scalar(handle, beta, scale_type, f"{function}: beta")
    device_scalars = getPointerMode(handle) == CUBLAS_POINTER_MODE_DEVICE
    if device_scalars:
        alpha_view, beta_view = (_device_scalar(p, scale_type, f"{function}: {name}")
                                 for p, name in ((alpha, "alpha"), (beta, "beta")))
    op_a = _matrix(function, "A", a, in_dtype, rows_a, cols_a, lda, batch, stride_a)
    op_b = _matrix(function, "B", b, in_dtype, rows_b, cols_b, ldb, batch, stride_b)
    if transa == CUBLAS_OP_T:
        op_a = op_a.swapaxes(1, 2)
    if transb == CUBLAS_OP_T:
        op_b = op_b.swapaxes(1, 2)
    out = _matrix(function, "C", c, c_dtype, m, n, ldc, batch, stride_c)

    def multiply() -> None:
        scale_a, scale_b = ((float(alpha_view[0]), float(beta_view[0])) if device_scalars
                            else (alpha_value, beta_value))
        with np.errstate(all="ignore"):
            if accumulate is np.float16:
                total = np.zeros(out.shape, np.float16)
                for j in range(k):  # a float16 running sum, one product at a time
                    total = (total + op_a[:, :, j:j + 1].astype(np.float16) * op_b[:, j:j + 1, :]).astype(
                        np.float16)
            elif compute == CUBLAS_COMPUTE_32F_FAST_TF32:  # tensor cores multiply TF32 operands
                total = np.matmul(_tf32(op_a), _tf32(op_b))
            else:
                total = np.matmul(op_a.astype(accumulate), op_b.astype(accumulate))
            if scale_a != 1.0:
                total = (total * accumulate(scale_a)).astype(accumulate)
            if scale_b != 0.0:  # cuBLAS does not read C when beta is 0 (it may hold garbage)
                total = (total + accumulate(scale_b) * out.astype(accumulate)).astype(accumulate)
            out[...] = total.astype(c_dtype)

    # A and B read once, C written once (and read first when beta is not 0: checked at the call).
    reads_c = device_scalars or beta_value != 0.0
    moved = (batch * ((m * k + k * n) * in_size + (m * n * c_size if reads_c else 0)), batch * m * n * c_size)
    run(function, multiply, moved=moved)


def gemmEx(handle: int, transa: int, transb: int, m: int, n: int, k: int, alpha: int, A: int,  # noqa: N802,N803
           Atype: int, lda: int, B: int, Btype: int, ldb: int, beta: int, C: int, Ctype: int,  # noqa: N803
           ldc: int, computeType: int, algo: int) -> None:  # noqa: N803
    """``C = alpha * op(A) @ op(B) + beta * C`` (column-major; see the module docstring)."""
    refuse_while_capturing()
    _gemm("gemmEx", handle, transa, transb, m, n, k, alpha, A, Atype, lda, 0, B, Btype, ldb, 0, beta,
          C, Ctype, ldc, 0, 1, computeType, algo)


def gemmStridedBatchedEx(handle: int, transa: int, transb: int, m: int, n: int, k: int,  # noqa: N802
                         alpha: int, A: int, Atype: int, lda: int, strideA: int,  # noqa: N803
                         B: int, Btype: int, ldb: int, strideB: int, beta: int,  # noqa: N803
                         C: int, Ctype: int, ldc: int, strideC: int, batchCount: int,  # noqa: N803
                         computeType: int, algo: int) -> None:  # noqa: N803
    """``batchCount`` gemmEx calls, operand ``i`` at ``ptr + i * stride`` elements."""
    refuse_while_capturing()
    _gemm("gemmStridedBatchedEx", handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb,
          strideB, beta, C, Ctype, ldc, strideC, batchCount, computeType, algo)


# ------------------------------------------------------------------ CuPy's refusal during a capture
CAPTURE_REFUSAL = "calling cuBLAS API during stream capture is currently unsupported"  # CuPy's text


def refuse_while_capturing() -> None:
    """CuPy's cuBLAS wrappers set the handle's stream at every call and refuse while the current stream
    captures (``cupy_backends/cuda/libs/cublas.pyx``, ``setStream``): the same error, with CuPy's text."""
    capture = _capture.active
    if capture is not None and _device.get_current_stream() is capture.stream:
        raise NotImplementedError(CAPTURE_REFUSAL)


# ------------------------------------------------------------------ the C library, for direct calls
class _Library:
    """The C entry points of libcublas that ``tinyamp.kernels.cuda.cublas_direct`` calls through ctypes.

    Arguments arrive as the C functions take them (ints for handles, streams
    and pointers); each returns ``CUBLAS_STATUS_SUCCESS`` or raises the
    ``CUBLASError`` cuBLAS's status would become, with what was wrong. On top
    of the GEMM checks of the wrappers above, as cuBLAS:

    - a handle is one ``cublasCreate_v2`` made (which allocates, so it is
      refused during a capture);
    - ``cublasSetStream_v2`` resets the handle's workspace to cuBLAS's own,
      and ``cublasSetWorkspace_v2`` needs ``size`` bytes of live device memory;
    - during a capture a GEMM must run on the capturing stream, with a user
      workspace set (else cuBLAS could allocate while capturing); outside one,
      on the current stream (anything else races with the work around it).

    Each GEMM counts one launch (``gemmEx``/``gemmStridedBatchedEx``, as the wrappers).
    """

    _BASE = 0x7C0B1A00

    def __init__(self) -> None:
        self.handles: dict[int, dict] = {}
        self._handles_made = itertools.count(self._BASE)

    def _state(self, handle: int) -> dict:
        state = self.handles.get(int(handle or 0))
        if state is None:
            raise CUBLASError(_NOT_INITIALIZED, f"handle {handle!r} is not one cublasCreate_v2 made")
        return state

    def cublasCreate_v2(self, handle_ref: Any) -> int:  # noqa: N802 - cuBLAS's names
        if _capture.active is not None:
            _capture.refuse("cublasCreate_v2 (it allocates device memory and synchronises)")
        value = next(self._handles_made)  # atomic: threads creating handles at once get distinct ones
        self.handles[value] = {"stream": 0, "workspace": None}
        handle_ref._obj.value = value
        _pointer_modes[value] = CUBLAS_POINTER_MODE_HOST
        return 0

    def cublasSetStream_v2(self, handle: int, stream: int) -> int:  # noqa: N802
        state = self._state(handle)
        state["stream"], state["workspace"] = int(stream or 0), None  # cuBLAS resets the workspace here
        return 0

    def cublasSetWorkspace_v2(self, handle: int, workspace: int, size: int) -> int:  # noqa: N802
        state = self._state(handle)
        if int(size) <= 0 or not workspace:
            raise CUBLASError(_INVALID_VALUE, f"cublasSetWorkspace_v2: workspace 0x{int(workspace or 0):x} of "
                                              f"{size} bytes")
        resolve(int(workspace), int(size), "cublasSetWorkspace_v2: workspace")
        state["workspace"] = (int(workspace), int(size))
        return 0

    def _launch_checks(self, handle: int, function: str) -> None:
        state = self._state(handle)
        stream = _device.get_current_stream()
        capture = _capture.active
        if capture is not None and stream is capture.stream:
            if state["stream"] != capture.stream.ptr:
                _capture.refuse(f"{function} on stream 0x{state['stream']:x}, not the capturing stream (cuBLAS "
                                "runs on its handle's stream: call cublasSetStream_v2 first)")
            if state["workspace"] is None:
                _capture.refuse(f"{function} without a user workspace (cuBLAS would allocate its own while "
                                "capturing: call cublasSetWorkspace_v2 after cublasSetStream_v2)")
            resolve(state["workspace"][0], state["workspace"][1], f"{function}: workspace")
        elif state["stream"] != stream.ptr:
            raise RuntimeError(f"{function}: the handle runs on stream 0x{state['stream']:x} while the current "
                               f"stream is {stream!r}: its result would race with the work around it "
                               "[tinyamp CUDA stand-in]")

    def cublasGemmEx(self, handle: int, transa: int, transb: int, m: int, n: int, k: int,  # noqa: N802
                     alpha: int, a: int, a_type: int, lda: int, b: int, b_type: int, ldb: int, beta: int,
                     c: int, c_type: int, ldc: int, compute_type: int, algo: int) -> int:
        self._launch_checks(handle, "cublasGemmEx")
        _gemm("gemmEx", handle, transa, transb, m, n, k, alpha, a, a_type, lda, 0, b, b_type, ldb, 0, beta,
              c, c_type, ldc, 0, 1, compute_type, algo)
        return 0

    def cublasGemmStridedBatchedEx(self, handle: int, transa: int, transb: int, m: int, n: int,  # noqa: N802
                                   k: int, alpha: int, a: int, a_type: int, lda: int, stride_a: int, b: int,
                                   b_type: int, ldb: int, stride_b: int, beta: int, c: int, c_type: int,
                                   ldc: int, stride_c: int, batch: int, compute_type: int, algo: int) -> int:
        self._launch_checks(handle, "cublasGemmStridedBatchedEx")
        _gemm("gemmStridedBatchedEx", handle, transa, transb, m, n, k, alpha, a, a_type, lda, stride_a, b,
              b_type, ldb, stride_b, beta, c, c_type, ldc, stride_c, batch, compute_type, algo)
        return 0


LIBRARY = _Library()
