"""``torch.backends.cuda``: ``matmul.allow_tf32`` (the float32 matmul precision) and the flags PyTorch has beside it.

``matmul.allow_tf32`` reads and writes ``precision``'s float32 matmul precision,
as PyTorch's does (True is "high", False "highest"); ``matmul.fp32_precision``
is PyTorch's newer spelling ("tf32" or "ieee"). The reduced-precision-reduction
flags are accepted and kept: tinyamp's 16-bit GEMMs always sum in float32.
"""

from __future__ import annotations

from typing import Any

from ... import backend, precision


class _MatmulFlags:
    """``torch.backends.cuda.matmul``."""

    _FLAGS = ("allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction",
              "allow_fp16_accumulation")

    def __init__(self) -> None:
        object.__setattr__(self, "_values", {"allow_fp16_reduced_precision_reduction": True,
                                             "allow_bf16_reduced_precision_reduction": True,
                                             "allow_fp16_accumulation": False})

    @property
    def allow_tf32(self) -> bool:
        return precision.tf32_matmul()

    @property
    def fp32_precision(self) -> str:
        return "tf32" if precision.tf32_matmul() else "ieee"

    def __getattr__(self, name: str) -> Any:
        values = object.__getattribute__(self, "_values")
        if name in values:
            return values[name]
        raise AttributeError(f"Unknown attribute {name}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "allow_tf32":
            if not isinstance(value, bool):
                raise RuntimeError(f"set_allow_tf32_cublas expects a bool, but got {type(value).__name__}")
            precision.set_float32_matmul_precision("high" if value else "highest")
        elif name == "fp32_precision":
            if value not in ("tf32", "ieee"):
                raise RuntimeError(f"fp32_precision must be 'tf32' or 'ieee', got {value!r}")
            precision.set_float32_matmul_precision("high" if value == "tf32" else "highest")
        elif name in self._FLAGS:
            if not isinstance(value, bool):
                raise RuntimeError(f"{name} expects a bool, but got {type(value).__name__}")
            self._values[name] = value
        else:
            raise AttributeError(f"Unknown attribute {name}")


matmul = _MatmulFlags()


def is_built() -> bool:
    """Whether tinyamp can reach CUDA at all (CuPy or the stand-in loads), as ``torch.backends.cuda.is_built``."""
    return backend.cuda_available()
