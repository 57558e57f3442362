"""Precision tags and the one pure rule that turns a tag into a compute dtype.

Every op class declares ``precision`` (DESIGN.md section 4):

========  ===============================  ==================
tag       inside ``autocast(dtype=D)``     outside autocast
========  ===============================  ==================
LOWER     float inputs -> D ("white")      unchanged
FP32      float16/bfloat16 -> float32      unchanged
PROMOTE   all inputs -> widest float       same (always on)
NEUTRAL   unchanged                        unchanged
========  ===============================  ==================

float64 is never lowered and integer inputs of LOWER/FP32 ops pass through.
PROMOTE has no 0-d exception: float16 * a 0-d float32 tensor is float32 (PyTorch
keeps float16, rounding the 0-d operand); only Python numbers take the tensor's dtype.
"""

from __future__ import annotations

import enum
from typing import Iterable

import numpy as np

from .. import dtypes as dt


class Precision(enum.Enum):
    """What autocast does to an op's floating inputs."""

    LOWER = "lower"      # white list: run in float16/bfloat16
    FP32 = "fp32"        # black list: run in float32
    PROMOTE = "promote"  # run in the widest input float type
    NEUTRAL = "neutral"  # run in whatever arrives

    def __repr__(self) -> str:
        return f"Precision.{self.name}"


LOWER, FP32, PROMOTE, NEUTRAL = Precision.LOWER, Precision.FP32, Precision.PROMOTE, Precision.NEUTRAL


# compute_dtype is pure and sees few distinct arguments (a handful of dtypes),
# so its answers are memoised: under autocast it runs on every op.
_DECISIONS: dict = {}


def compute_dtype(tag: Precision, input_dtypes: Iterable[np.dtype],
                  autocast_dtype: "np.dtype | None") -> "np.dtype | None":
    """The dtype an op's floating inputs are cast to, or None to leave them.

    ``autocast_dtype`` is the active region's low-precision dtype, or None when
    autocast is off. See :func:`needs_cast` for which inputs the result applies to.
    """
    key = (tag, tuple(input_dtypes), autocast_dtype)
    try:
        return _DECISIONS[key]
    except KeyError:
        pass
    result = _decide(tag, list(key[1]), autocast_dtype)
    if len(_DECISIONS) < 10_000:  # bounded: odd dtype mixes cannot grow it without end
        _DECISIONS[key] = result
    return result


def _decide(tag: Precision, dtypes: "list[np.dtype]", autocast_dtype: "np.dtype | None") -> "np.dtype | None":
    floats = [d for d in dtypes if d in dt.FLOATING]
    if not floats or tag is NEUTRAL:
        return None
    if tag is PROMOTE:
        widest = dt.widest_float(floats)
        # Integer/bool operands of arithmetic are promoted too (float32 * int64
        # is float32 in PyTorch; NumPy 2 would give float64).
        if all(d == widest for d in dtypes):
            return None
        return widest
    if autocast_dtype is None:
        return None
    if tag is LOWER:
        if dt.float64 in floats:
            return None  # float64 is never lowered
        return None if all(d == autocast_dtype for d in floats) else autocast_dtype
    if tag is FP32:
        return dt.float32 if any(dt.is_low_precision(d) for d in floats) else None
    raise ValueError(f"unknown precision tag {tag!r}")


def needs_cast(tag: Precision, dtype: np.dtype, target: np.dtype) -> bool:
    """Whether one input of dtype ``dtype`` is cast to ``target`` under ``tag``."""
    if dtype == target:
        return False
    if tag is PROMOTE:
        return True  # every operand joins the widest float, ints and bools too
    # LOWER / FP32: only floating inputs; float64 never moves.
    return dtype in dt.FLOATING and dtype != dt.float64


_BY_NAME = {p.value: p for p in Precision}


def as_precision(spec: "Precision | str") -> Precision:
    """``LOWER`` or one of the strings ``"lower"``, ``"fp32"``, ``"promote"``, ``"neutral"``."""
    if isinstance(spec, Precision):
        return spec
    if isinstance(spec, str) and spec.lower() in _BY_NAME:
        return _BY_NAME[spec.lower()]
    raise ValueError(f"unknown precision tag {spec!r}; expected one of "
                     f"{', '.join(repr(v) for v in _BY_NAME)} or a ta.amp.Precision")
