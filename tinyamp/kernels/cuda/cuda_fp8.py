"""CUDA side of the fp8 casts (uint8 codes; CuPy has no fp8 dtype).

The ``cuda_fp8.h`` kernels (encode with a device scale, table-free decode,
amax) are not built yet: every entry point says so, naming the call, rather
than computing something else.
"""

from __future__ import annotations

from typing import Any


def _missing(what: str) -> NotImplementedError:
    return NotImplementedError(f"fp8 {what} of a CUDA array: the cuda_fp8.h kernels are not built yet; "
                               f"run fp8 on the CPU")


def encode(x: Any, f: Any, scale: Any, saturate: bool) -> Any:
    raise _missing("encode")


def decode(codes: Any, f: Any, scale_inv: Any) -> Any:
    raise _missing("decode")


def amax(x: Any) -> Any:
    raise _missing("amax")
