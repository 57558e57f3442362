"""cuBLASLt's fp8 GEMM (compute type 32F, E4M3/E5M2 operands, device scale pointers): which calls it takes.

Not wired to cuBLASLt yet: :func:`plan` answers None for every call, so each
GPU fp8 GEMM takes ``fp8_gemm``'s other GPU path (exact bfloat16 values, the
16-bit GEMM with float32 accumulation), which computes the same numbers.
"""

from __future__ import annotations

from typing import Any


def plan(a: Any, b: Any, trans_a: bool, trans_b: bool, out: Any) -> Any:
    """The cuBLASLt plan for this fp8 GEMM, or None when cuBLASLt does not take it (here: always None)."""
    return None


def matmul(plan: Any, a: Any, b: Any, bias: Any, fast_accum: bool) -> Any:
    raise RuntimeError("cublaslt_fp8.matmul: no plan can exist yet (plan() answers None)")
