"""float32 math functions as the CUDA stand-in's compiled kernels compute them: the C library's ``expf``, ``logf``,
``erff``, ``tanhf`` applied to NumPy arrays.

NumPy's vectorised float32 ``exp``/``log``/``tanh`` round differently in the
last bit for some inputs (and NumPy has no erf), so a NumPy transcription of a
kernel that calls these gives the kernel's bits only through these functions.
"""

from __future__ import annotations

import ctypes
from functools import lru_cache
from typing import Callable

import numpy as np

from cupy_standin import kernels as standin_kernels

FUNCTIONS = ("expf", "logf", "erff", "tanhf")


@lru_cache(maxsize=None)
def _library() -> ctypes.CDLL:
    return standin_kernels.compile_library(standin_kernels.PRELUDE + "".join(
        f'extern "C" void libm_{f}(const float* a, float* o, long long n) '
        f"{{ for (long long i = 0; i < n; ++i) o[i] = {f}(a[i]); }}\n" for f in FUNCTIONS))


def libm(name: str) -> Callable[[np.ndarray], np.ndarray]:
    """The C library's float32 function ``name`` (one of ``FUNCTIONS``) on float32 arrays of any shape."""
    function = getattr(_library(), f"libm_{name}")

    def apply(a: np.ndarray) -> np.ndarray:
        a = np.ascontiguousarray(a, dtype=np.float32)
        out = np.empty_like(a)
        function(ctypes.c_void_p(a.ctypes.data), ctypes.c_void_p(out.ctypes.data), ctypes.c_longlong(a.size))
        return out

    return apply
