"""cuBLASLt called directly (ctypes): a 16-bit GEMM whose epilogue adds the bias (or applies GELU and its gradient).

``linear``'s forward under autocast is ``round(float32(x @ W^T) + bias)``:
cuBLASLt's ``CUBLASLT_EPILOGUE_BIAS`` adds the bias vector to the float32
accumulator inside the GEMM and rounds once to the output's 16-bit type, so
the output is written once and no other kernel runs (PyTorch's linear does
the same). The library is the libcublasLt that CuPy's libcublas loaded (found
among the process's loaded libraries, as ``cublas_direct`` finds libcublas).

- One cuBLASLt handle per CUDA backend, device and host thread, and the
  workspace of that thread's cuBLAS handle (``cublas_direct``): both run on the
  current stream, one after another, so they can share it; nothing is
  allocated during a call, so a call can be captured into a CUDA graph.
- A *plan* per problem (sizes, transposes, dtype, pointer alignments): the
  operation and layout descriptors and the algorithm cuBLASLt's heuristic
  chose, made once and kept; a call sets the bias pointer and runs the plan.
- Pointer alignments are part of a plan: the heuristic is told the alignment
  of each operand (it assumes 256 bytes unless told), so an algorithm that
  needs more is never run on a less aligned view.

:func:`matmul_bias` returns False when the heuristic offers no algorithm for a
problem; ``gemm.gemm_bias`` then computes the same value with three kernels.
:func:`matmul_epilogue` runs the same GEMM with cuBLASLt's GELU epilogues
(``"gelu_aux_bias"``: bias, then GELU, the pre-activation kept in an auxiliary
matrix; ``"dgelu_bgrad"``: the product times GELU's slope at the auxiliary
matrix, and that result's row sums as a bias gradient). cuBLASLt's GELU is the
tanh approximation; ``gemm.GELU_EPILOGUE`` says whether tinyamp uses them.
On the CUDA stand-in the "library" is its emulation of these C entry points
(``cupy_standin.LIBRARIES``), with cuBLASLt's argument checks.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

import numpy as np

from ... import backend
from . import cublas_direct

# cublasLt.h values (a stable ABI): compute/scale types, descriptor and preference attributes, epilogues.
CUBLAS_COMPUTE_32F = 68
CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF = 0, 2, 14
DESC_TRANSA, DESC_TRANSB, DESC_EPILOGUE, DESC_BIAS_POINTER = 3, 4, 7, 8
DESC_EPILOGUE_AUX_POINTER, DESC_EPILOGUE_AUX_LD = 11, 12
PREF_MAX_WORKSPACE_BYTES = 1
PREF_MIN_ALIGNMENT = {"A": 5, "B": 6, "C": 7, "D": 8}
EPILOGUE_BIAS = 4
EPILOGUES = {"bias": EPILOGUE_BIAS, "gelu_aux_bias": 164, "dgelu_bgrad": 208}  # cublasLtEpilogue_t
AUX_EPILOGUES = ("gelu_aux_bias", "dgelu_bgrad")

_P, _I, _U64, _I64, _SIZE = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64, ctypes.c_int64, ctypes.c_size_t
_REF = ctypes.c_void_p  # ctypes.byref(...) arguments


class HeuristicResult(ctypes.Structure):
    """``cublasLtMatmulHeuristicResult_t``: the chosen algorithm (opaque, 64 bytes) and its needs."""

    _fields_ = [("algo", ctypes.c_uint64 * 8), ("workspace_size", ctypes.c_size_t), ("state", ctypes.c_int),
                ("waves", ctypes.c_float), ("reserved", ctypes.c_int * 4)]


_ARGTYPES = {
    "cublasLtCreate": [_REF],
    "cublasLtMatmulDescCreate": [_REF, _I, _I],
    "cublasLtMatmulDescSetAttribute": [_P, _I, _REF, _SIZE],
    "cublasLtMatrixLayoutCreate": [_REF, _I, _U64, _U64, _I64],
    "cublasLtMatmulPreferenceCreate": [_REF],
    "cublasLtMatmulPreferenceSetAttribute": [_P, _I, _REF, _SIZE],
    "cublasLtMatmulAlgoGetHeuristic": [_P, _P, _P, _P, _P, _P, _P, _I, _REF, _REF],
    "cublasLtMatmul": [_P, _P, _REF, _P, _P, _P, _P, _REF, _P, _P, _P, _P, _REF, _P, _SIZE, _P],
}

_libraries: dict[int, Any] = {}
_handles: dict[tuple, int] = {}  # (backend id, device id, thread id) -> cuBLASLt handle
_plans: dict[tuple, "tuple | None"] = {}  # (handle, problem) -> (desc, A, B, D layouts, algo) or None
_ONE, _ZERO = ctypes.c_float(1.0), ctypes.c_float(0.0)  # alpha, beta: host scalars, read during the call
_ONE_REF, _ZERO_REF = ctypes.byref(_ONE), ctypes.byref(_ZERO)


def _find_library() -> Any:
    """The libcublasLt CuPy's libcublas loaded, as a ctypes library with typed functions."""
    backend.cuda_lib("cupy_backends.cuda.libs.cublas")  # loads libcublas, which loads libcublasLt
    return (backend.provided_library("libcublasLt.so")
            or cublas_direct.loaded_library("libcublasLt.so", _ARGTYPES, "cuBLASLt"))


def _library() -> Any:
    return cublas_direct.backend_library(_libraries, _find_library)


def _check(status: int, function: str) -> None:
    cublas_direct._check(status, function)


def _handle(device_id: int) -> int:
    key = (id(backend.cupy()), device_id, threading.get_ident())
    handle = _handles.get(key)
    if handle is None:
        ref = ctypes.c_void_p()
        _check(_library().cublasLtCreate(ctypes.byref(ref)), "cublasLtCreate")
        handle = _handles[key] = ref.value
    return handle


def prepare(device: Any = None) -> None:
    """Make this thread's handle on ``device`` (default the current one) now, before a capture."""
    cp = backend.cupy()
    device = cp.cuda.Device() if device is None else device
    with device:
        _handle(device.id)


def _alignment(pointer: int) -> int:
    """The largest power of two (at most 256) dividing ``pointer``: what the heuristic may assume."""
    return min(256, pointer & -pointer) if pointer else 256


def _set(setter: Any, target: int, attribute: int, value: Any, function: str) -> None:
    _check(setter(target, attribute, ctypes.byref(value), ctypes.sizeof(value)), function)


def _plan(handle: int, problem: tuple, bias_pointer: int, epilogue: str = "bias", aux_pointer: int = 0,
          aux_ld: int = 0) -> "tuple | None":
    """Descriptors and algorithm for ``problem`` (made once; None if the heuristic offers none)."""
    m, n, k, trans_a, lda, data_type, aligns = problem
    library = _library()
    desc = ctypes.c_void_p()
    _check(library.cublasLtMatmulDescCreate(ctypes.byref(desc), CUBLAS_COMPUTE_32F, CUDA_R_32F),
           "cublasLtMatmulDescCreate")
    set_desc = library.cublasLtMatmulDescSetAttribute
    _set(set_desc, desc.value, DESC_TRANSA, ctypes.c_int32(trans_a), "cublasLtMatmulDescSetAttribute")
    _set(set_desc, desc.value, DESC_TRANSB, ctypes.c_int32(0), "cublasLtMatmulDescSetAttribute")
    _set(set_desc, desc.value, DESC_EPILOGUE, ctypes.c_uint32(EPILOGUES[epilogue]), "cublasLtMatmulDescSetAttribute")
    _set(set_desc, desc.value, DESC_BIAS_POINTER, ctypes.c_void_p(bias_pointer), "cublasLtMatmulDescSetAttribute")
    if epilogue in AUX_EPILOGUES:  # the heuristic reads the auxiliary pointer's alignment and its leading dimension
        _set(set_desc, desc.value, DESC_EPILOGUE_AUX_POINTER, ctypes.c_void_p(aux_pointer),
             "cublasLtMatmulDescSetAttribute")
        _set(set_desc, desc.value, DESC_EPILOGUE_AUX_LD, ctypes.c_int64(aux_ld), "cublasLtMatmulDescSetAttribute")
    layouts = []
    for rows, cols, ld in (((k, m) if trans_a else (m, k)) + (lda,), (k, n, k), (m, n, m)):
        layout = ctypes.c_void_p()
        _check(library.cublasLtMatrixLayoutCreate(ctypes.byref(layout), data_type, rows, cols, ld),
               "cublasLtMatrixLayoutCreate")
        layouts.append(layout.value)
    a_layout, b_layout, d_layout = layouts
    preference = ctypes.c_void_p()
    _check(library.cublasLtMatmulPreferenceCreate(ctypes.byref(preference)), "cublasLtMatmulPreferenceCreate")
    set_pref = library.cublasLtMatmulPreferenceSetAttribute
    _set(set_pref, preference.value, PREF_MAX_WORKSPACE_BYTES, ctypes.c_uint64(cublas_direct.WORKSPACE_BYTES),
         "cublasLtMatmulPreferenceSetAttribute")
    for operand, align in zip("ABCD", aligns):
        _set(set_pref, preference.value, PREF_MIN_ALIGNMENT[operand], ctypes.c_uint32(align),
             "cublasLtMatmulPreferenceSetAttribute")
    result, count = HeuristicResult(), ctypes.c_int(0)
    refused = backend.cuda_lib("cupy_backends.cuda.libs.cublas").CUBLASError
    try:  # a status from libcublasLt; the stand-in raises the error that status becomes
        status = library.cublasLtMatmulAlgoGetHeuristic(handle, desc.value, a_layout, b_layout, d_layout, d_layout,
                                                        preference.value, 1, ctypes.byref(result),
                                                        ctypes.byref(count))
    except refused:
        if epilogue not in AUX_EPILOGUES:
            raise
        status = -1
    if status != 0 and epilogue in AUX_EPILOGUES:
        return None  # an epilogue this problem does not support (its auxiliary matrix's layout): no algorithm
    _check(status, "cublasLtMatmulAlgoGetHeuristic")
    if count.value < 1 or result.workspace_size > cublas_direct.WORKSPACE_BYTES:
        return None
    return desc.value, a_layout, b_layout, d_layout, result.algo


def matmul_bias(a: Any, b: Any, bias: Any, out: Any, trans_b: bool) -> bool:
    """``out = round(float32(a @ op(b)) + bias)`` in one cuBLASLt call; False if no algorithm fits.

    ``a`` (M, K), ``b`` (K, N) or with ``trans_b`` (N, K), ``bias`` (N,) and
    ``out`` (M, N): C-contiguous CuPy arrays of one 16-bit dtype on the
    current device (``gemm.gemm_bias`` checks all of it).
    """
    return matmul_epilogue(a, b, bias, out, trans_b, "bias")


def matmul_epilogue(a: Any, b: Any, bias: Any, out: Any, trans_b: bool, epilogue: str, aux: Any = None) -> bool:
    """One cuBLASLt call of ``a @ op(b)`` with ``epilogue`` (a key of ``EPILOGUES``); False if no algorithm fits.

    ``"bias"``: ``out = round(acc + bias)``; ``"gelu_aux_bias"``: ``aux = round(acc + bias)``,
    ``out = round(gelu_tanh(acc + bias))``; ``"dgelu_bgrad"``: ``out = round(acc * gelu_tanh'(aux))`` and
    ``bias`` (written) its column sums. Shapes as :func:`matmul_bias`; ``aux`` (M, N) like ``out``, whose
    row length (cuBLASLt's leading dimension) must be a multiple of 8.
    """
    (m_rows, k), n = a.shape, out.shape[1]
    data_type = CUDA_R_16F if a.dtype == np.float16 else CUDA_R_16BF
    a_ptr, b_ptr, out_ptr, bias_ptr = a.data.ptr, b.data.ptr, out.data.ptr, bias.data.ptr
    aux_ptr = aux.data.ptr if aux is not None else 0
    # Column-major view: D (N x M) = op(b') (N x K) @ a' (K x M), the bias one value per row of D.
    # The alignments of A, B, C, D (C and D are out), of the bias and of the auxiliary matrix are part of the problem.
    out_align = _alignment(out_ptr)
    aligns = (_alignment(b_ptr), _alignment(a_ptr), out_align, out_align)
    problem = (n, m_rows, k, int(trans_b), k if trans_b else n, data_type, aligns + (_alignment(bias_ptr),),
               epilogue, _alignment(aux_ptr) if aux is not None else 0)
    device_id = a.device.id
    handle = _handle(device_id)
    key = (handle, problem)
    plan = _plans.get(key, False)
    if plan is False:
        plan = _plans[key] = _plan(handle, problem[:6] + (aligns,), bias_ptr, epilogue, aux_ptr, n)
    if plan is None:
        return False
    desc, a_layout, b_layout, d_layout, algo = plan
    library = _library()
    _set(library.cublasLtMatmulDescSetAttribute, desc, DESC_BIAS_POINTER, ctypes.c_void_p(bias_ptr),
         "cublasLtMatmulDescSetAttribute")
    if aux is not None:
        _set(library.cublasLtMatmulDescSetAttribute, desc, DESC_EPILOGUE_AUX_POINTER, ctypes.c_void_p(aux_ptr),
             "cublasLtMatmulDescSetAttribute")
    workspace = cublas_direct.workspace(device_id)
    stream = backend.cupy().cuda.get_current_stream().ptr
    _check(library.cublasLtMatmul(handle, desc, _ONE_REF, b_ptr, a_layout, a_ptr, b_layout,
                                  _ZERO_REF, out_ptr, d_layout, out_ptr, d_layout,
                                  ctypes.byref(algo), workspace, cublas_direct.WORKSPACE_BYTES, stream),
           "cublasLtMatmul")
    return True
