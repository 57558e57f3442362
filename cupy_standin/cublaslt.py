"""The stand-in's libcublasLt: the C entry points ``tinyamp.kernels.cuda.cublaslt_direct`` calls through ctypes.

Arguments arrive as the C functions take them (ints for handles, descriptors,
pointers and streams; ``ctypes.byref`` for what is read or written through a
pointer), and each returns ``CUBLAS_STATUS_SUCCESS`` or raises the
``CUBLASError`` cuBLASLt's status would become. As cuBLASLt:

- descriptors hold the attributes set on them; an attribute set with a buffer
  of the wrong size is ``CUBLAS_STATUS_INVALID_VALUE``;
- the heuristic checks that the layouts fit the operation (``op(A)`` m x k,
  ``op(B)`` k x n, C and D m x n, one 16-bit type, ``ld >= rows``) and returns
  one algorithm, which remembers the problem and the pointer alignments the
  preference allowed (256 bytes unless set lower);
- ``cublasLtMatmul`` runs that algorithm only on the problem it was chosen
  for, with pointers at least as aligned as the preference said (an algorithm
  needing more could fault or read wrongly on a GPU), every operand and the
  bias vector inside live device memory, on the current stream (the capturing
  one during a capture, with a user workspace).

The arithmetic, for ``CUBLASLT_EPILOGUE_DEFAULT`` or ``_BIAS``:
``D = round(alpha * float32(op(A) @ op(B)) + beta * C + bias)``, the bias
(D's type) widened exactly, one value per row of D; one launch, counted as
``cublasLtMatmul``. The GELU epilogues (cuBLASLt's GELU is the tanh form,
``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``):

- ``_GELU_AUX_BIAS``: ``z = alpha * acc + beta * C + bias`` in float32;
  ``D = round(gelu(z))`` and the auxiliary matrix (D's type, its leading
  dimension ``EPILOGUE_AUX_LD``) ``= round(z)``, the GELU input a backward reads;
- ``_DGELU_BGRAD``: ``D = round(alpha * acc * gelu'(aux))`` and the bias
  vector (written, one value per row of D) ``= round(sum over D's columns)``
  of the float32 values before D's rounding.

As cuBLASLt, these need the auxiliary pointer and its leading dimension set
(no less than D's rows and divisible by 8; the pointer 16-byte aligned, or
the heuristic offers nothing), and the bias pointer; the float32 order of
cuBLASLt's own epilogue (its tanh, its bias-gradient sum) is not documented,
so the stand-in's bits are the formula's, not necessarily the GPU's.

fp8 operands (``CUDA_R_8F_E4M3`` = 28, ``CUDA_R_8F_E5M2`` = 29, uint8 codes) as
cuBLASLt takes them on Hopper: only with compute capability 8.9 or more (the
stand-in's ``runtime.COMPUTE_CAPABILITY``), both A and B fp8 but not both
E5M2, the TN layout (TRANSA = T, TRANSB = N), leading dimensions of A and B
multiples of 16, C and D bfloat16, float16 or float32 of one type; refused
otherwise (``CUBLAS_STATUS_NOT_SUPPORTED``). ``A_SCALE_POINTER`` and
``B_SCALE_POINTER`` are float32 device scalars (null: 1), read when the GEMM
runs: ``D = round(float32(op(A) @ op(B)) * (scale_A * scale_B) + bias)``, the
codes decoded exactly. ``FAST_ACCUM`` is accepted and changes nothing here (the
sum is float32's either way; the model of Hopper's fast accumulation is
``tinyamp.kernels.fp8_gemm``'s); an fp8 D (``D_SCALE_POINTER``,
``AMAX_D_POINTER``) is not emulated.
"""

from __future__ import annotations

import ctypes
import itertools
from typing import Any

import ml_dtypes
import numpy as np

from . import _capture, _device, runtime
from ._array import run
from ._memory import resolve
from .cublas import _DATA_TYPES, CUBLAS_COMPUTE_32F, CUBLASError, _matrix

_INVALID_VALUE, _NOT_SUPPORTED, _NOT_INITIALIZED = 7, 15, 1
EPILOGUE_DEFAULT, EPILOGUE_BIAS, EPILOGUE_GELU_AUX_BIAS, EPILOGUE_DGELU_BGRAD = 1, 4, 164, 208
_AUX_EPILOGUES = (EPILOGUE_GELU_AUX_BIAS, EPILOGUE_DGELU_BGRAD)
# Descriptor attributes the stand-in knows, with the size of their value (cublasLt.h).
_DESC_ATTRIBUTES = {3: ("transa", 4), 4: ("transb", 4), 7: ("epilogue", 4), 8: ("bias", 8), 11: ("aux", 8),
                    12: ("aux_ld", 8), 17: ("a_scale", 8), 18: ("b_scale", 8), 20: ("d_scale", 8),
                    21: ("amax_d", 8), 25: ("fast_accum", 1)}
_GELU_K, _GELU_C = np.float32(np.sqrt(2 / np.pi)), np.float32(0.044715)
# The fp8 data types (cudaDataType: CUDA_R_8F_E4M3, CUDA_R_8F_E5M2), stored as one byte per element.
_FP8_TYPES = {28: np.dtype(ml_dtypes.float8_e4m3fn), 29: np.dtype(ml_dtypes.float8_e5m2)}
_FP8_OUTPUTS = (0, 2, 14)  # float32, float16, bfloat16
_PREF_ATTRIBUTES = {1: ("workspace", 8), 5: ("align_a", 4), 6: ("align_b", 4), 7: ("align_c", 4), 8: ("align_d", 4)}


def _value(ref: Any) -> int:
    return int(ref._obj.value or 0)


class _LtLibrary:
    """Handles, descriptors and algorithms as small dicts keyed by fake addresses."""

    _BASE = 0x7C1D0000

    def __init__(self) -> None:
        self.objects: dict[int, dict] = {}
        # One address per object, whichever threads create them at once (next() on a count is atomic).
        self._addresses = itertools.count(self._BASE, 16)

    def _new(self, ref: Any, kind: str, **state: Any) -> int:
        address = next(self._addresses)
        self.objects[address] = dict(state, kind=kind)
        ref._obj.value = address
        return 0

    def _get(self, address: int, kind: str) -> dict:
        state = self.objects.get(int(address or 0))
        if state is None or state["kind"] != kind:
            raise CUBLASError(_NOT_INITIALIZED if kind == "handle" else _INVALID_VALUE,
                              f"0x{int(address or 0):x} is not a cuBLASLt {kind}")
        return state

    def cublasLtCreate(self, ref: Any) -> int:  # noqa: N802 - cuBLASLt's names
        if _capture.active is not None:
            _capture.refuse("cublasLtCreate (made outside a capture, like cuBLAS's handle)")
        return self._new(ref, "handle")

    def cublasLtMatmulDescCreate(self, ref: Any, compute_type: int, scale_type: int) -> int:  # noqa: N802
        if compute_type != CUBLAS_COMPUTE_32F or scale_type != 0:
            raise CUBLASError(_NOT_SUPPORTED, f"compute type {compute_type}, scale type {scale_type} (the "
                                              "stand-in has CUBLAS_COMPUTE_32F with float32 scalars)")
        return self._new(ref, "operation", transa=0, transb=0, epilogue=EPILOGUE_DEFAULT, bias=0, aux=0, aux_ld=0,
                         a_scale=0, b_scale=0, d_scale=0, amax_d=0, fast_accum=0)

    def _set(self, state: dict, table: dict, attribute: int, ref: Any, size: int) -> int:
        if int(attribute) not in table:
            raise CUBLASError(_INVALID_VALUE, f"attribute {attribute} (not emulated)")
        name, want = table[int(attribute)]
        if int(size) != want or int(size) != ctypes.sizeof(ref._obj):
            raise CUBLASError(_INVALID_VALUE, f"attribute {name} takes {want} bytes, got {size}")
        state[name] = _value(ref)
        return 0

    def cublasLtMatmulDescSetAttribute(self, desc: int, attribute: int, ref: Any, size: int) -> int:  # noqa: N802
        return self._set(self._get(desc, "operation"), _DESC_ATTRIBUTES, attribute, ref, size)

    def cublasLtMatrixLayoutCreate(self, ref: Any, data_type: int, rows: int, cols: int, ld: int) -> int:  # noqa
        if (data_type not in _DATA_TYPES and data_type not in _FP8_TYPES) or ld < max(1, rows):
            raise CUBLASError(_INVALID_VALUE, f"layout type {data_type}, {rows} x {cols}, ld {ld}")
        return self._new(ref, "layout", type=int(data_type), rows=int(rows), cols=int(cols), ld=int(ld))

    def cublasLtMatmulPreferenceCreate(self, ref: Any) -> int:  # noqa: N802
        return self._new(ref, "preference", workspace=0, align_a=256, align_b=256, align_c=256, align_d=256)

    def cublasLtMatmulPreferenceSetAttribute(self, pref: int, attribute: int, ref: Any, size: int) -> int:  # noqa
        return self._set(self._get(pref, "preference"), _PREF_ATTRIBUTES, attribute, ref, size)

    def _problem(self, desc: dict, a: dict, b: dict, c: dict, d: dict) -> tuple:
        rows_a, cols_a = (a["cols"], a["rows"]) if desc["transa"] else (a["rows"], a["cols"])
        rows_b, cols_b = (b["cols"], b["rows"]) if desc["transb"] else (b["rows"], b["cols"])
        if cols_a != rows_b or (c["rows"], c["cols"]) != (rows_a, cols_b) or (d["rows"], d["cols"]) != (rows_a, cols_b):
            raise CUBLASError(_INVALID_VALUE, f"op(A) {rows_a}x{cols_a}, op(B) {rows_b}x{cols_b}, C {c['rows']}x"
                                              f"{c['cols']}, D {d['rows']}x{d['cols']} do not fit")
        if a["type"] in _FP8_TYPES or b["type"] in _FP8_TYPES:
            self._check_fp8(desc, a, b, c, d)
        elif len({a["type"], b["type"], c["type"], d["type"]}) != 1 or _DATA_TYPES[a["type"]].itemsize != 2:
            raise CUBLASError(_NOT_SUPPORTED, "the stand-in has A, B, C and D of one 16-bit type")
        if desc["epilogue"] not in (EPILOGUE_DEFAULT, EPILOGUE_BIAS) + _AUX_EPILOGUES or desc["transa"] not in (0, 1) \
                or desc["transb"] not in (0, 1):
            raise CUBLASError(_NOT_SUPPORTED, f"epilogue {desc['epilogue']}, transa {desc['transa']}, "
                                              f"transb {desc['transb']}")
        aux_ld = 0
        if desc["epilogue"] in _AUX_EPILOGUES:
            aux_ld = desc["aux_ld"]
            if not desc["aux"] or aux_ld < d["rows"] or aux_ld % 8 or desc["aux"] % 16:
                raise CUBLASError(_INVALID_VALUE, f"epilogue {desc['epilogue']} needs its auxiliary matrix: pointer "
                                                  f"0x{desc['aux']:x} (16-byte aligned), leading dimension {aux_ld} "
                                                  f"(no less than D's {d['rows']} rows, divisible by 8)")
        return (desc["transa"], desc["transb"], desc["epilogue"], aux_ld) + tuple(
            (x["type"], x["rows"], x["cols"], x["ld"]) for x in (a, b, c, d))

    @staticmethod
    def _check_fp8(desc: dict, a: dict, b: dict, c: dict, d: dict) -> None:
        """What cuBLASLt refuses in an fp8 GEMM on sm_89/sm_90 (see the module docstring)."""
        if tuple(runtime.COMPUTE_CAPABILITY) < (8, 9):
            raise CUBLASError(_NOT_SUPPORTED, f"fp8 GEMMs need compute capability 8.9 or more, this device has "
                                              f"{runtime.COMPUTE_CAPABILITY[0]}.{runtime.COMPUTE_CAPABILITY[1]}")
        if a["type"] not in _FP8_TYPES or b["type"] not in _FP8_TYPES:
            raise CUBLASError(_NOT_SUPPORTED, "an fp8 GEMM needs A and B both fp8")
        if a["type"] == b["type"] == 29:
            raise CUBLASError(_NOT_SUPPORTED, "A and B both CUDA_R_8F_E5M2: no fp8 GEMM takes that")
        if (desc["transa"], desc["transb"]) != (1, 0):
            raise CUBLASError(_NOT_SUPPORTED, f"fp8 on compute capability < 10.0 takes only the TN layout "
                                              f"(transa 1, transb 0), got {desc['transa']}, {desc['transb']}")
        if a["ld"] % 16 or b["ld"] % 16:
            raise CUBLASError(_NOT_SUPPORTED, f"fp8 leading dimensions must be multiples of 16, got lda {a['ld']}, "
                                              f"ldb {b['ld']}")
        if c["type"] != d["type"] or d["type"] not in _FP8_OUTPUTS:
            raise CUBLASError(_NOT_SUPPORTED, f"fp8 GEMM with C type {c['type']}, D type {d['type']} (the stand-in "
                                              "has C = D of float32, float16 or bfloat16)")
        if desc["d_scale"] or desc["amax_d"]:
            raise CUBLASError(_NOT_SUPPORTED, "an fp8 D (D_SCALE_POINTER, AMAX_D_POINTER) is not emulated")

    def cublasLtMatmulAlgoGetHeuristic(self, handle: int, desc: int, a: int, b: int, c: int, d: int,  # noqa: N802
                                       pref: int, requested: int, result_ref: Any, count_ref: Any) -> int:
        self._get(handle, "handle")
        layouts = [self._get(x, "layout") for x in (a, b, c, d)]
        problem = self._problem(self._get(desc, "operation"), *layouts)
        preference = self._get(pref, "preference")
        if int(requested) < 1:
            raise CUBLASError(_INVALID_VALUE, "requestedAlgoCount < 1")
        result = result_ref._obj
        result.algo[0] = next(self._addresses)
        self.objects[result.algo[0]] = {"kind": "algorithm", "problem": problem,
                                        "aligns": tuple(preference[f"align_{x}"] for x in "abcd")}
        result.workspace_size, result.state = 0, 0
        count_ref._obj.value = 1
        return 0

    def cublasLtMatmul(self, handle: int, desc: int, alpha_ref: Any, a: int, a_desc: int, b: int,  # noqa: N802
                       b_desc: int, beta_ref: Any, c: int, c_desc: int, d: int, d_desc: int, algo_ref: Any,
                       workspace: int, workspace_size: int, stream: int) -> int:
        self._get(handle, "handle")
        operation = self._get(desc, "operation")
        layouts = [self._get(x, "layout") for x in (a_desc, b_desc, c_desc, d_desc)]
        problem = self._problem(operation, *layouts)
        algorithm = self._get(algo_ref._obj[0], "algorithm")
        if algorithm["problem"] != problem:
            raise CUBLASError(_INVALID_VALUE, "the algorithm was chosen for another problem")
        for name, pointer, align in zip("ABCD", (a, b, c, d), algorithm["aligns"]):
            if int(pointer) % align:
                raise CUBLASError(_INVALID_VALUE, f"matrix {name} at 0x{int(pointer):x} is not {align}-byte "
                                                  f"aligned, as the algorithm's preference promised")
        current = _device.get_current_stream()
        capture = _capture.active
        if capture is not None and current is capture.stream:
            if int(stream or 0) != capture.stream.ptr or not workspace:
                _capture.refuse("cublasLtMatmul off the capturing stream or without a workspace")
        elif int(stream or 0) != current.ptr:
            raise RuntimeError(f"cublasLtMatmul: on stream 0x{int(stream or 0):x} while the current stream is "
                               f"{current!r}: its result would race with the work around it [tinyamp CUDA stand-in]")
        if workspace_size:
            resolve(int(workspace), int(workspace_size), "cublasLtMatmul: workspace")
        alpha, beta = float(alpha_ref._obj.value), float(beta_ref._obj.value)
        la, lb, lc, ld = layouts
        dtype = _DATA_TYPES[ld["type"]]
        types = [_FP8_TYPES.get(x["type"], dtype) for x in layouts]
        views = [_matrix("cublasLtMatmul", name, p, t, x["rows"], x["cols"], x["ld"])[0]
                 for name, p, x, t in (("A", a, la, types[0]), ("B", b, lb, types[1]), ("C", c, lc, types[2]),
                                       ("D", d, ld, types[3]))]
        op_a = views[0].T if operation["transa"] else views[0]
        op_b = views[1].T if operation["transb"] else views[1]
        factors = []  # fp8: the dequantisation factors, float32 scalars in device memory (null: 1), read when it runs
        if la["type"] in _FP8_TYPES:
            for key in ("a_scale", "b_scale"):
                pointer = operation[key]
                factors.append(resolve(pointer, 4, f"cublasLtMatmul: {key} pointer") if pointer else None)
        m, n = ld["rows"], ld["cols"]
        epilogue = operation["epilogue"]
        bias = aux = None
        if epilogue != EPILOGUE_DEFAULT:
            buffer, offset = resolve(operation["bias"], m * dtype.itemsize, "cublasLtMatmul: bias vector")
            bias = buffer[offset:offset + m * dtype.itemsize].view(dtype)
        if epilogue in _AUX_EPILOGUES:
            aux = _matrix("cublasLtMatmul", "the auxiliary matrix", operation["aux"], dtype, m, n,
                          operation["aux_ld"])[0]

        def multiply() -> None:
            with np.errstate(all="ignore"):
                total = np.matmul(op_a.astype(np.float32), op_b.astype(np.float32))
                if factors:
                    sa, sb = (np.float32(1) if f is None else f[0][f[1]:f[1] + 4].view(np.float32)[0] for f in factors)
                    total = total * np.float32(sa * sb)
                if alpha != 1.0:
                    total = total * np.float32(alpha)
                if beta != 0.0:  # C is not read when beta is 0
                    total = total + np.float32(beta) * views[2].astype(np.float32)
                if epilogue in (EPILOGUE_BIAS, EPILOGUE_GELU_AUX_BIAS):
                    total = total + bias.astype(np.float32)[:, None]
                if epilogue == EPILOGUE_GELU_AUX_BIAS:
                    aux[...] = total.astype(dtype)
                    total = np.float32(0.5) * total * (np.float32(1) + np.tanh(
                        _GELU_K * (total + _GELU_C * total * total * total)))
                elif epilogue == EPILOGUE_DGELU_BGRAD:
                    z = aux.astype(np.float32)
                    t = np.tanh(_GELU_K * (z + _GELU_C * z * z * z))
                    slope = np.float32(0.5) * (np.float32(1) + t) + np.float32(0.5) * z * (np.float32(1) - t * t) \
                        * _GELU_K * (np.float32(1) + np.float32(3) * _GELU_C * z * z)
                    total = total * slope
                    bias[...] = total.sum(axis=1, dtype=np.float32).astype(dtype)
                views[3][...] = total.astype(dtype)

        k = op_a.shape[1]
        size = dtype.itemsize
        operand_bytes = m * k * types[0].itemsize + k * n * types[1].itemsize
        aux_moved = m * n * size if aux is not None else 0
        bias_read = m if epilogue in (EPILOGUE_BIAS, EPILOGUE_GELU_AUX_BIAS) else 0  # DGELU_BGRAD writes it
        moved = (operand_bytes + ((m * n if beta != 0.0 else 0) + bias_read) * size
                 + (aux_moved if epilogue == EPILOGUE_DGELU_BGRAD else 0),
                 m * n * size + (aux_moved if epilogue == EPILOGUE_GELU_AUX_BIAS else 0)
                 + (m * size if epilogue == EPILOGUE_DGELU_BGRAD else 0))
        run("cublasLtMatmul", multiply, moved=moved)
        return 0


LT_LIBRARY = _LtLibrary()
