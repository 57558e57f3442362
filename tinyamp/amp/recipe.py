"""fp8 recipes (``ta.amp.recipe``): Transformer Engine's names and rules, as small classes, and their quantisers.

A recipe says how each GEMM operand of an ``nn.Linear`` inside
``ta.amp.fp8_autocast`` is quantised; it makes one :class:`Quantizer` per role
(``"input"``, ``"weight"``, ``"grad_output"``) of each module. The quantiser
carries the state (scale, amax history) and is what the fp8 Cast node on the
tape holds (``ops/cast.py``, ``Fp8Cast``). Formats (:class:`Format`): ``HYBRID``
is E4M3 forward and E5M2 for gradients; ``E4M3`` is E4M3 everywhere; pure
``E5M2`` is refused, as by every Transformer Engine recipe.

- :class:`DelayedScaling`: each quantisation writes ``max(history[0], amax)``;
  at the region boundary (forward roles at the region's exit, gradient roles
  at the next region's entry, after the backward ran: :data:`PENDING_BACKWARD`) the amax is the
  history's max (``"max"``) or ``history[0]`` (``"most_recent"``), the scale
  becomes ``(fp8_max / amax) / 2^margin`` (previous scale kept on an amax of 0,
  inf or NaN; an infinite scale capped at float32's max), then the history
  rolls by one and slot 0 is zeroed. State starts at scale 1 and a zero
  history, so the first step casts with scale 1 (TE's rule).
- :class:`Float8CurrentScaling`: the scale from this tensor's own amax.
- :class:`Float8BlockScaling`: DeepSeek-V3's 1x128 tiles for inputs and
  gradients, 128x128 tiles for weights, power-of-two scales; E4M3 by default.
- :class:`MXFP8BlockScaling`: 32-element blocks along the reduction dimension
  sharing an E8M0 scale, rounded up (``"rceil"``, NVIDIA/TE) or down
  (``"floor"``, the OCP rule, which can saturate a block's maximum).

Every update is array arithmetic on the device: no host read, so a CUDA graph
captures an fp8 step. ``state_dict()``/``load_state_dict()`` of a quantiser
hold its arrays (``nn.Linear``'s ``_extra_state`` gathers them).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import backend, precision
from ..kernels import fp8, fp8_quantize as fq

ROLES = ("input", "weight", "grad_output")
_FORWARD = ("input", "weight")


class Format(enum.Enum):
    """fp8 formats of the forward operands and of the gradients (Transformer Engine's ``Format``)."""

    E4M3 = "E4M3"       # E4M3 forward and backward
    E5M2 = "E5M2"       # E5M2 everywhere: refused by every recipe (TE's rule)
    HYBRID = "HYBRID"   # E4M3 forward, E5M2 gradients

    def formats(self) -> "tuple[fp8.Fp8Format, fp8.Fp8Format]":
        if self is Format.E5M2:
            raise ValueError("fp8 recipe: pure E5M2 training is not supported (Transformer Engine refuses it "
                             "too); use Format.HYBRID (E4M3 forward, E5M2 gradients) or Format.E4M3")
        return fp8.E4M3, fp8.E4M3 if self is Format.E4M3 else fp8.E5M2


def _as_format(value: Any) -> Format:
    if isinstance(value, Format):
        return value
    if isinstance(value, str) and value.upper() in Format.__members__:
        return Format[value.upper()]
    raise ValueError(f"fp8 recipe: fp8_format must be a ta.amp.recipe.Format, got {value!r}")


class Recipe:
    """Base of the recipes: the format, and a quantiser per (module, role)."""

    fp8_format: Format = Format.HYBRID

    def _check_format(self) -> None:
        self.fp8_format = _as_format(self.fp8_format)
        self.fp8_format.formats()  # refuses E5M2

    def fmt(self, role: str) -> fp8.Fp8Format:
        forward, backward = self.fp8_format.formats()
        return backward if role == "grad_output" else forward

    def make_quantizer(self, role: str) -> "Quantizer":
        raise NotImplementedError

    def delayed(self) -> bool:
        return False


class Quantizer:
    """One operand role's quantisation rule and state; what an fp8 Cast node carries."""

    def __init__(self, recipe: Recipe, role: str) -> None:
        if role not in ROLES:
            raise ValueError(f"fp8 quantizer: role must be one of {ROLES}, got {role!r}")
        self.recipe, self.role, self.fmt = recipe, role, recipe.fmt(role)
        self.last_scale: Any = None  # the scale(s) of the last quantisation, for the trace
        self.last_amax: Any = None

    @property
    def name(self) -> str:
        return f"{type(self.recipe).__name__} {self.fmt.name} {self.role}"

    def quantize(self, x: Any, nominal: Any) -> fq.Fp8Array:
        raise NotImplementedError

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        if state:
            raise ValueError(f"{self.name}: this quantiser keeps no state, got {sorted(state)}")


# --------------------------------------------------------------------------
# Delayed scaling
# --------------------------------------------------------------------------

@dataclass
class DelayedScaling(Recipe):
    """Per-tensor scales from an amax history, updated at region boundaries (Transformer Engine's default)."""

    margin: float = 0
    fp8_format: Format = Format.HYBRID
    amax_history_len: int = 1024
    amax_compute_algo: str = "max"
    reduce_amax: bool = True  # one process here: there is nothing to all-reduce

    def __post_init__(self) -> None:
        self._check_format()
        if not isinstance(self.amax_history_len, (int, np.integer)) or self.amax_history_len < 1:
            raise ValueError(f"DelayedScaling: amax_history_len must be a positive int, got {self.amax_history_len!r}")
        if self.amax_compute_algo not in ("max", "most_recent"):
            raise ValueError(f"DelayedScaling: amax_compute_algo must be 'max' or 'most_recent', got "
                             f"{self.amax_compute_algo!r}")
        if not np.isfinite(self.margin):
            raise ValueError(f"DelayedScaling: margin must be finite, got {self.margin!r}")

    def make_quantizer(self, role: str) -> "DelayedQuantizer":
        return DelayedQuantizer(self, role)

    def delayed(self) -> bool:
        return True


PENDING_BACKWARD: dict = {}
"""Delayed gradient quantisers a backward used since the last fp8 region entry (id -> quantiser)."""


def update_pending_backward() -> None:
    """The gradient quantisers that ran in a backward since the last fp8 region entry take their new scales."""
    pending = list(PENDING_BACKWARD.values())
    PENDING_BACKWARD.clear()
    for quantizer in pending:
        quantizer.update()


class DelayedQuantizer(Quantizer):
    """State: ``scale`` (1,), ``amax_history`` (amax_history_len,), float32 arrays on the operands' device."""

    def __init__(self, recipe: DelayedScaling, role: str) -> None:
        super().__init__(recipe, role)
        self.scale: Any = None
        self.amax_history: Any = None

    def _state_on(self, x: Any) -> None:
        """Make the state (scale 1, zero history) on ``x``'s device, or move a loaded one there."""
        xp, device = backend.array_module(x), backend.device_of(x)
        if self.scale is None:
            self.scale = xp.ones(1, dtype=xp.float32)
            self.amax_history = xp.zeros(self.recipe.amax_history_len, dtype=xp.float32)
        elif backend.device_of(self.scale) != device:
            self.scale = backend.to_device(self.scale, device)
            self.amax_history = backend.to_device(self.amax_history, device)

    def quantize(self, x: Any, nominal: Any, region: Any = None) -> fq.Fp8Array:
        xp = backend.array_module(x)
        self._state_on(x)
        amax = fp8.amax(x)
        self.amax_history[:1] = xp.maximum(self.amax_history[:1], amax)  # TE's kernels max into slot 0
        self.last_amax = amax
        if self.role == "grad_output":
            PENDING_BACKWARD[id(self)] = self
        elif region is not None:
            region.touched[id(self)] = self
        q = fq.quantize_tensorwise(x, self.fmt, self.scale, nominal)
        self.last_scale = q.scale
        return q

    def update(self) -> None:
        """amax from the window, the new scale, then roll the window and zero slot 0 (all on the device)."""
        if self.scale is None:
            return
        xp = backend.array_module(self.scale)
        history = self.amax_history
        amax = history.max() if self.recipe.amax_compute_algo == "max" else history[0]
        self.scale[...] = fq.delayed_scale(amax, self.scale, self.fmt, self.recipe.margin)
        if history.size > 1:
            history[...] = xp.concatenate([history[1:], history[:1]])  # TE's roll by -1
        history[:1] = 0

    def state_dict(self) -> dict:
        """The arrays (shared, not copied) and whether an update is still due (a backward ran since)."""
        if self.scale is None:
            return {}
        return {"scale": self.scale, "amax_history": self.amax_history,
                "update_pending": np.array(id(self) in PENDING_BACKWARD)}

    def load_state_dict(self, state: dict) -> None:
        PENDING_BACKWARD.pop(id(self), None)
        if not state:
            self.scale = self.amax_history = None
            return
        scale, history = (getattr(state[k], "array", state[k]) for k in ("scale", "amax_history"))
        if tuple(history.shape) != (self.recipe.amax_history_len,) or tuple(scale.shape) != (1,):
            raise ValueError(f"{self.name}: state of shapes scale {list(scale.shape)}, amax_history "
                             f"{list(history.shape)} does not fit amax_history_len={self.recipe.amax_history_len}")
        xp = backend.array_module(scale)
        self.scale = xp.array(scale, dtype=xp.float32)
        self.amax_history = xp.array(history, dtype=xp.float32)
        pending = state.get("update_pending", False)
        if bool(np.asarray(getattr(pending, "array", pending))):
            if precision.current_fp8() is not None:
                self.update()  # loaded on first use inside a region: its entry's update is due now
            else:
                PENDING_BACKWARD[id(self)] = self


# --------------------------------------------------------------------------
# Current scaling
# --------------------------------------------------------------------------

@dataclass
class Float8CurrentScaling(Recipe):
    """Per-tensor scales from each tensor's own amax (two reads: amax, then the cast)."""

    fp8_format: Format = Format.HYBRID
    power_2_scale: bool = False
    amax_epsilon: float = 0.0

    def __post_init__(self) -> None:
        self._check_format()

    def make_quantizer(self, role: str) -> "CurrentQuantizer":
        return CurrentQuantizer(self, role)


class CurrentQuantizer(Quantizer):
    def quantize(self, x: Any, nominal: Any, region: Any = None) -> fq.Fp8Array:
        q, self.last_amax = fq.quantize_current(x, self.fmt, nominal, pow2=self.recipe.power_2_scale,
                                                epsilon=self.recipe.amax_epsilon)
        self.last_scale = q.scale
        return q


# --------------------------------------------------------------------------
# Block scaling (DeepSeek-V3) and MXFP8
# --------------------------------------------------------------------------

@dataclass
class Float8BlockScaling(Recipe):
    """1x128 tiles for inputs and gradients, 128x128 for weights, power-of-two current scales per tile."""

    fp8_format: Format = Format.E4M3
    x_block_scaling_dim: int = 1
    w_block_scaling_dim: int = 2
    grad_block_scaling_dim: int = 1
    block: int = 128
    power_2_scale: bool = True
    amax_epsilon: float = 0.0

    def __post_init__(self) -> None:
        self._check_format()
        for name in ("x_block_scaling_dim", "w_block_scaling_dim", "grad_block_scaling_dim"):
            if getattr(self, name) not in (1, 2):
                raise ValueError(f"Float8BlockScaling: {name} must be 1 or 2, got {getattr(self, name)!r}")
        if self.x_block_scaling_dim == 2 and self.w_block_scaling_dim == 2:
            raise ValueError("Float8BlockScaling: 2-D blocks for both inputs and weights are not supported "
                             "(Transformer Engine's rule)")
        if not isinstance(self.block, int) or self.block < 1:
            raise ValueError(f"Float8BlockScaling: block must be a positive int, got {self.block!r}")

    def make_quantizer(self, role: str) -> "BlockQuantizer":
        dim = {"input": self.x_block_scaling_dim, "weight": self.w_block_scaling_dim,
               "grad_output": self.grad_block_scaling_dim}[role]
        return BlockQuantizer(self, role, (self.block, self.block) if dim == 2 else (1, self.block))


class BlockQuantizer(Quantizer):
    def __init__(self, recipe: Float8BlockScaling, role: str, block: "tuple[int, int]") -> None:
        super().__init__(recipe, role)
        self.block = block

    def quantize(self, x: Any, nominal: Any, region: Any = None) -> fq.Fp8Array:
        q = fq.quantize_blocks(x, self.fmt, self.block, nominal, pow2=self.recipe.power_2_scale,
                               columnwise=self.block[0] == 1, epsilon=self.recipe.amax_epsilon)
        self.last_scale = q.scales()
        return q


@dataclass
class MXFP8BlockScaling(Recipe):
    """32 elements along the reduction dimension share an E8M0 scale; E4M3 elements by default."""

    fp8_format: Format = Format.E4M3
    scale_rule: str = "rceil"
    block: int = 32

    def __post_init__(self) -> None:
        self._check_format()
        if self.scale_rule not in fp8.E8M0_RULES:
            raise ValueError(f"MXFP8BlockScaling: scale_rule must be one of {fp8.E8M0_RULES}, got "
                             f"{self.scale_rule!r}")
        if not isinstance(self.block, int) or self.block < 1:
            raise ValueError(f"MXFP8BlockScaling: block must be a positive int, got {self.block!r}")

    def make_quantizer(self, role: str) -> "MXQuantizer":
        return MXQuantizer(self, role)


class MXQuantizer(Quantizer):
    def quantize(self, x: Any, nominal: Any, region: Any = None) -> fq.Fp8Array:
        # Row-wise and column-wise copies both from the high-precision values: a transposed MX array is not
        # the same numbers (TE quantises both).
        q = fq.quantize_mx(x, self.fmt, nominal, rule=self.recipe.scale_rule, block=self.recipe.block,
                           columnwise=True)
        self.last_scale = q.scales()
        return q


RECIPES = {"delayed": DelayedScaling, "current": Float8CurrentScaling, "block": Float8BlockScaling,
           "mxfp8": MXFP8BlockScaling}
"""The recipes by the short names the examples take (``--fp8 delayed``)."""

__all__ = ["PENDING_BACKWARD", "DelayedScaling", "Float8BlockScaling", "Float8CurrentScaling", "Format",
           "MXFP8BlockScaling", "Quantizer", "Recipe", "update_pending_backward"]
