"""A strict CUDA stand-in: the parts of CuPy tinyamp uses, over NumPy, for machines without a GPU.

``tinyamp.backend`` loads this package in place of ``cupy`` when asked
(``TINYAMP_CUDA=standin``, or ``tinyamp.backend.use_cuda_standin()`` in the
test suite). Then ``device="cuda"`` tensors hold this package's arrays and
every CuPy code path of tinyamp runs: the array module, cuBLAS's ``gemmEx``,
the fused ``ElementwiseKernel``/``RawKernel`` kernels (compiled with g++), the
memory pool and its statistics, streams and events.

It is as strict as CuPy where CuPy is strict, so CI sees what only a GPU
showed before: an array refuses implicit conversion to NumPy, a NumPy array
inside a device operation is a TypeError, 0-d results stay on the device, and
a host read is explicit and counted, and a stream capture records a graph
that replays the same work and refuses what CUDA refuses while capturing
(``_capture.py``). It counts kernel launches, allocations,
host<->device copies and synchronisations per phase (``counters``, see
``_counters.py``). Anything of CuPy it does not cover raises
``AttributeError`` naming it; nothing falls back to NumPy silently.

Layout: ``_array`` (the ndarray), ``_routines`` (array functions and ufuncs),
``_operators`` (the ndarray's operators and methods, attached from there),
``_memory`` (pool, pointers, allocators), ``_device`` (Device, Stream,
Event), ``_capture`` (stream capture, ``cupy.cuda.graph.Graph`` and the
capture-safety checks), ``_topology`` (how many devices, which one this
process owns), ``runtime``, ``cublas``, ``cublaslt`` (libcublasLt's entry points),
``nccl`` (collectives over MPI), ``kernels`` (g++-compiled CUDA sources),
``random``, ``linalg``, ``lib``, ``cupyx``, ``_counters``. It imports only
NumPy, ml_dtypes and the standard library (and mpi4py, on first use of ``nccl``),
never the rest of tinyamp.
"""

from __future__ import annotations

import builtins
import sys
from typing import Any

import numpy as np

from . import _operators  # noqa: F401 - attaches the ndarray's operators and value methods
from . import _routines, cublas, cublaslt, cuda, cupyx, kernels, lib, linalg, nccl, random
from ._array import ndarray
from ._counters import KINDS, Counters, counters
from ._memory import get_default_memory_pool, get_default_pinned_memory_pool
from ._routines import (ARRAY_METHODS, all, amax, amin, any, arange, argmax, argmin, argsort, argwhere, around,  # noqa: A004
                        array, asarray, ascontiguousarray, asnumpy, atleast_1d, broadcast_to, can_cast, clip,
                        concatenate, copyto, count_nonzero, cumprod, cumsum, diag, dot, einsum, empty, empty_like,
                        expand_dims, eye, flip, full, full_like, identity, isclose, linspace, matmul, max,
                        may_share_memory, mean, min, moveaxis, nanmax, nanmin, nansum, ndim, nonzero, ones, ones_like,
                        pad, partition, prod, put, put_along_axis, ravel, repeat, reshape, result_type, round,
                        searchsorted, shape, shares_memory, size, sort, squeeze, stack, std, sum, swapaxes, take,
                        take_along_axis, tile, trace, transpose, tril, triu, ufunc, var, where, zeros, zeros_like)
from .kernels import ElementwiseKernel, RawKernel

__version__ = "0+tinyamp.standin"
IS_STANDIN = True  # how tinyamp.backend (and a reader) tells it from CuPy
# What a provider supplies beyond CuPy's API: the C libraries a caller would load through ctypes
# (here their emulations, with the real ones' argument checks) and the per-launch counters.
LIBRARIES = {"libcublas.so": cublas.LIBRARY, "libcublasLt.so": cublaslt.LT_LIBRARY}

# The ufuncs (add, exp, maximum, isfinite, ...), as module attributes like CuPy's.
globals().update({name: value for name, value in vars(_routines).items() if isinstance(value, ufunc)})

# NumPy's types and helpers, which CuPy re-exports as they are.
bool_, int8, int16, int32, int64, uint8, uint16, uint32, uint64 = (np.bool_, np.int8, np.int16, np.int32, np.int64,
                                                                  np.uint8, np.uint16, np.uint32, np.uint64)
float16, float32, float64, complex64, complex128 = np.float16, np.float32, np.float64, np.complex64, np.complex128
dtype, finfo, iinfo, issubdtype, promote_types, isscalar = (np.dtype, np.finfo, np.iinfo, np.issubdtype,
                                                            np.promote_types, np.isscalar)
newaxis, inf, nan, pi, e = None, np.inf, np.nan, np.pi, np.e


def is_available() -> bool:
    """Always True: the stand-in is its own device."""
    return True


def get_array_module(*args: Any) -> Any:
    """This module if any argument is a stand-in array, else NumPy (``cupy.get_array_module``)."""
    return sys.modules[__name__] if builtins.any(type(a) is ndarray for a in args) else np


def __getattr__(name: str) -> Any:
    raise AttributeError(f"module 'cupy' (tinyamp's CUDA stand-in) has no attribute {name!r}: the stand-in "
                         "covers only what tinyamp uses; add it to cupy_standin if CuPy has it")
