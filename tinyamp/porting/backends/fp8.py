"""``ta.backends.fp8.accumulate``: how fp8 GEMMs accumulate ("fp32", "hopper_fast", "promote_128").

"fp32" (the default) sums the exact fp8 products in float32. "hopper_fast"
and "promote_128" emulate Hopper's fp8 tensor-core accumulator on the CPU
(``kernels/fp8_gemm.py``: 13-bit aligned sums per k=32 step, chained, or
promoted to float32 every 128 elements); on a GPU with cuBLASLt's fp8 GEMM
"hopper_fast" sets its FAST_ACCUM and the others the split accumulator. The
setting lives in ``precision.py`` (the kernels read it there); this module is
its PyTorch-style spelling.
"""

from __future__ import annotations

import sys
import types

from ... import precision


class _Fp8Backend(types.ModuleType):
    @property
    def accumulate(self) -> str:
        return precision.fp8_accumulate()

    @accumulate.setter
    def accumulate(self, model: str) -> None:
        precision.set_fp8_accumulate(model)


sys.modules[__name__].__class__ = _Fp8Backend
