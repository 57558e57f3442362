"""Precision below the tape: the tags, the dtype rule, the autocast state and the hooks the tape calls.

``Function.__call__`` (one layer up, in ``autograd/``) reads everything it needs
to autocast an op from this module, so the tape imports nothing from ``amp/``
(docs/ARCHITECTURE.md, "Layers"). What lives here:

- the **tags** every op class declares as ``precision``, and the one pure rule
  (:func:`compute_dtype`, :func:`needs_cast`) that turns a tag and the input
  dtypes into a compute dtype:

  ========  ===============================  ==================
  tag       inside ``autocast(dtype=D)``     outside autocast
  ========  ===============================  ==================
  LOWER     float inputs -> D ("white")      unchanged
  FP32      float16/bfloat16 -> float32      unchanged
  PROMOTE   all inputs -> widest float       same (always on)
  NEUTRAL   unchanged                        unchanged
  ========  ===============================  ==================

  float64 is never lowered and integer inputs of LOWER/FP32 ops pass through.
  PROMOTE's widest float is PyTorch's ``promote_types``: float16 with bfloat16
  is float32. It has no 0-d exception: float16 * a 0-d float32 tensor is
  float32 (PyTorch keeps float16, rounding the 0-d operand); only Python
  numbers take the tensor's dtype. An op of another tag may name inputs that
  PROMOTE joins after its own tag's casts (``Function.promoted_inputs``: a
  loss's input and target, so ``mse_loss(float16, float32)`` is float32).
- the **autocast state**, two context variables (so per thread and per asyncio
  task): the *state* is the innermost **enabled** region (dtype, overrides,
  weight-cast cache), or None inside an ``enabled=False`` region and outside
  every region, which keeps the check on the hot path to one
  ``ContextVar.get`` and an ``is None``; the *scope* is the innermost region of
  any kind and carries what nested regions share across a disabled region in
  between (the outermost region's cache, the overrides in force);
- the **global per-op overrides** (``ta.amp.set_op_precision`` writes them);
- the **float32 matmul precision** (``ta.set_float32_matmul_precision``, which
  ``ta.backends.cuda.matmul.allow_tf32`` also sets): "highest" keeps float32
  GEMMs in float32; "high" and "medium" let them run on TF32 tensor cores
  (``kernels/gemm.py``: cuBLAS's TF32 compute type on a GPU, the operands
  rounded to TF32's 10-bit mantissa on the CPU);
- two **hooks** the tape calls without importing what is above it: the open
  precision report (:func:`current_trace`, a context variable like autocast, so
  a trace sees only its own thread's ops; :func:`record_cast` reports a rounding
  an op makes inside itself) and the function that inserts one
  recorded cast (:func:`insert_cast`; a ``Cast`` is an op, two layers up, so
  ``tinyamp.amp.casting`` installs it when tinyamp is imported).
"""

from __future__ import annotations

import enum
import warnings
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import numpy as np

from . import dtypes as dt


# --------------------------------------------------------------------------
# Tags and the dtype rule
# --------------------------------------------------------------------------

class Precision(enum.Enum):
    """What autocast does to an op's floating inputs."""

    LOWER = "lower"      # white list: run in float16/bfloat16
    FP32 = "fp32"        # black list: run in float32
    PROMOTE = "promote"  # run in the widest input float type
    NEUTRAL = "neutral"  # run in whatever arrives

    def __repr__(self) -> str:
        return f"Precision.{self.name}"

    # Members are singletons compared by identity, so the identity hash agrees with equality; C's
    # hash keeps the memoised rule's keys (hashed on every op under autocast) off a Python call.
    __hash__ = object.__hash__


LOWER, FP32, PROMOTE, NEUTRAL = Precision.LOWER, Precision.FP32, Precision.PROMOTE, Precision.NEUTRAL


def compute_dtype(tag: Precision, input_dtypes: Iterable[np.dtype],
                  autocast_dtype: "np.dtype | None") -> "np.dtype | None":
    """The dtype an op's floating inputs are cast to, or None to leave them.

    ``autocast_dtype`` is the active region's low-precision dtype, or None when
    autocast is off. See :func:`needs_cast` for which inputs the result applies to.
    Pure: :func:`cast_plan`, which the tape asks on every op, memoises it.
    """
    dtypes = list(input_dtypes)
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


_PLANS: dict = {}


def cast_plan(tag: Precision, input_dtypes: "tuple[np.dtype, ...]",
              autocast_dtype: "np.dtype | None") -> "tuple[np.dtype | None, tuple[bool, ...]]":
    """(:func:`compute_dtype`, and :func:`needs_cast` of each input): the whole decision for one op call.

    Memoised (the one memo of the pure rule): the tape asks it on every op
    under autocast, with a handful of distinct arguments.
    """
    key = (tag, input_dtypes, autocast_dtype)
    try:
        return _PLANS[key]
    except KeyError:
        pass
    target = compute_dtype(tag, input_dtypes, autocast_dtype)
    plan = (target, () if target is None else tuple(needs_cast(tag, d, target) for d in input_dtypes))
    if len(_PLANS) < 10_000:
        _PLANS[key] = plan
    return plan


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


# --------------------------------------------------------------------------
# The autocast state
# --------------------------------------------------------------------------

@dataclass
class AutocastState:
    """One active autocast region (the innermost enabled one)."""

    dtype: np.dtype                      # float16 or bfloat16
    device_type: "str | None" = None     # None: ops on every device; "cpu"/"cuda": only there
    cache_enabled: bool = True
    # Per-region tag overrides by op name: {"exp": Precision.LOWER, ...}.
    overrides: dict = field(default_factory=dict)
    # The weight-cast cache shared by the outermost region and its children
    # (None when this region has cache_enabled=False).
    cache: Any = None


@dataclass
class AutocastScope:
    """What a region hands to the regions nested in it, enabled or not."""

    cache: Any                           # the outermost region's WeightCastCache
    overrides: dict = field(default_factory=dict)
    cache_enabled: bool = True


_autocast_state: ContextVar["AutocastState | None"] = ContextVar("tinyamp_autocast", default=None)
_autocast_scope: ContextVar["AutocastScope | None"] = ContextVar("tinyamp_autocast_scope", default=None)

# The accessors are the context variables' own bound methods: the tape calls
# current_autocast() on every op, and a Python wrapper would double its cost.
# current_autocast(): the active state, or None when autocast is off.
current_autocast: Callable[[], "AutocastState | None"] = _autocast_state.get
set_autocast = _autocast_state.set          # returns a token for reset_autocast
reset_autocast = _autocast_state.reset
current_scope: Callable[[], "AutocastScope | None"] = _autocast_scope.get
set_scope = _autocast_scope.set
reset_scope = _autocast_scope.reset


# --------------------------------------------------------------------------
# Global per-op overrides
# --------------------------------------------------------------------------

# Op name -> tag, in force in every autocast region (ta.amp.set_op_precision,
# which checks the names, writes it; Function.effective_precision reads it).
_GLOBAL_OVERRIDES: dict[str, Precision] = {}


def global_overrides() -> dict[str, Precision]:
    """Tag overrides by op name that apply in every autocast region (the live dict)."""
    return _GLOBAL_OVERRIDES


# --------------------------------------------------------------------------
# float32 matmul precision
# --------------------------------------------------------------------------

_MATMUL_PRECISIONS = ("highest", "high", "medium")
_float32_matmul_precision = ["highest"]  # a list: one shared, mutable setting (PyTorch's is process-wide)


def get_float32_matmul_precision() -> str:
    """"highest" (float32 GEMMs in float32), "high" or "medium" (float32 GEMMs may use TF32)."""
    return _float32_matmul_precision[0]


def set_float32_matmul_precision(precision: str) -> None:
    """``torch.set_float32_matmul_precision``: "high"/"medium" let float32 GEMMs run in TF32 (10-bit mantissas)."""
    if precision not in _MATMUL_PRECISIONS:
        warnings.warn(f"{precision} is not one of 'highest', 'high', or 'medium'; the current "
                      f"setFloat32MatmulPrecision call has no effect.", stacklevel=2)
        return
    _float32_matmul_precision[0] = precision


def tf32_matmul() -> bool:
    """Whether float32 GEMMs run in TF32 now (the setting is anything but "highest")."""
    return _float32_matmul_precision[0] != "highest"


# --------------------------------------------------------------------------
# fp8: the accumulation model of fp8 GEMMs, the fp8 region
# --------------------------------------------------------------------------

FP8_ACCUMULATE = ("fp32", "hopper_fast", "promote_128")
_fp8_accumulate = ["fp32"]  # a list: one shared, mutable setting (ta.backends.fp8.accumulate writes it)


def fp8_accumulate() -> str:
    """How fp8 GEMMs accumulate: "fp32" (exact products summed in float32), or a model of Hopper's tensor
    cores on the CPU ("hopper_fast": FAST_ACCUM's 13-bit chain; "promote_128": promoted to float32 every 128)."""
    return _fp8_accumulate[0]


def set_fp8_accumulate(model: str) -> None:
    if model not in FP8_ACCUMULATE:
        raise ValueError(f"ta.backends.fp8.accumulate must be one of {FP8_ACCUMULATE}, got {model!r}")
    _fp8_accumulate[0] = model


# The fp8 region in force (ta.amp.fp8_autocast: the recipe, the module filter, the fp8 weight cache), per thread
# like autocast; None outside every fp8 region. nn.Linear reads it.
_fp8_region: ContextVar[Any] = ContextVar("tinyamp_fp8_region", default=None)
current_fp8: Callable[[], Any] = _fp8_region.get
set_fp8 = _fp8_region.set
reset_fp8 = _fp8_region.reset


# --------------------------------------------------------------------------
# Hooks the tape calls
# --------------------------------------------------------------------------

# The open precision report (tinyamp.study.report.Trace), per thread like autocast.
_trace: ContextVar[Any] = ContextVar("tinyamp_trace", default=None)
# current_trace(): the innermost open report of this thread, or None.
current_trace: Callable[[], Any] = _trace.get
set_trace = _trace.set
reset_trace = _trace.reset


def record_cast(op: Any, source: Any, result: Any, direction: str, *, fused: bool = True, **context: Any) -> None:
    """Tell the open trace, if any, that ``op`` rounded array ``source`` into ``result`` (a fused cast).

    For ops that convert inside themselves (no Cast node): one context-variable
    read when no trace is open. ``direction``: "forward" or "backward";
    ``context``: the ``rule``/``cache``/``position`` of a cast autocast asked
    for. See ``Trace.record_cast`` (tinyamp/study/report.py) and docs/ARCHITECTURE.md.
    """
    tracer = _trace.get()
    if tracer is not None:
        tracer.record_cast(op, source, result, direction, fused=fused, **context)


_cast_function: "Callable[..., Any] | None" = None


def install_cast_function(function: Callable[..., Any]) -> None:
    """Make ``function`` the one that :func:`insert_cast` calls (tinyamp.amp.casting installs it, on import)."""
    global _cast_function
    _cast_function = function


def insert_cast(op: Any, tensor: Any, target: np.dtype, state: "AutocastState | None",
                tag: "Precision | None") -> Any:
    """The recorded cast of one of ``op``'s inputs to ``target`` (a Tensor).

    ``state`` is the autocast region in force (None for a PROMOTE cast outside
    autocast); ``tag`` is the tag that asked for the cast (None for
    ``custom_fwd(cast_inputs=...)``). Implemented by ``amp.casting.cast_input``.
    """
    return _cast_function(op, tensor, target, state, tag)
