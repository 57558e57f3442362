"""Update swamping: which elements of an optimizer step float16 weights would have lost.

The mixed-precision paper's first argument for float32 master weights: a
float16 weight keeps 11 significant bits, so an update smaller than half its
ulp (a weight 2048 times the update, or more) rounds away, ``w16 + u == w16``,
however many steps repeat it. After a step the optimizer recorded (opt in with
``optimizer.track_swamping()``; nothing is measured otherwise), each parameter
gets one :class:`ParameterSwamping` row, computed from the weights the step
actually wrote, for every optimizer alike:

- ``u = new - old``: the float32 weight's change (the parameter's, or its
  float32 master's under ``master_weights=True``), exact in float64;
- ``kept_fp32``: elements with ``u != 0``, the updates float32 (master)
  weights keep;
- ``vanished_fp16``: those of them that float16 weights would have lost:
  ``float16(w16 + u) == w16`` with ``w16`` the float16 weight before the step
  (the parameter's float16 copy under master weights, else the float32 weight
  rounded), the sum exact before the one rounding;
- ``held_by_master`` (master weights only): kept updates that the float16
  copy the model computes with does not show yet; the master holds them and
  they move the copy once they add up to half an ulp. Without a master, these
  would be lost.

For a float16/bfloat16 parameter *without* a master there is no float32 update
to compare: only ``moved`` (elements the step changed) is known.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .. import backend
from .. import dtypes as dt
from ..optim.optimizer import Optimizer


@dataclass
class ParameterSwamping:
    """One parameter's step: how many update elements float32 keeps and float16 would lose."""

    name: str
    shape: list[int]
    weights: str                      # "float32", "float32 master" or the low dtype (no master)
    elements: int
    moved: int                        # elements whose stored parameter changed
    kept_fp32: "int | None"           # elements whose float32 (master) weight changed: u != 0
    vanished_fp16: "int | None"       # of those, the ones float16 weights would have lost
    held_by_master: "int | None"      # master weights: kept updates the float16 copy does not show yet

    @property
    def survived_fraction(self) -> "float | None":
        """Fraction of the parameter's elements whose update survives with float32 (master) weights."""
        return None if self.kept_fp32 is None else self.kept_fp32 / max(self.elements, 1)

    @property
    def vanished_fraction(self) -> "float | None":
        """Fraction of the parameter's elements whose update would vanish if applied to float16 weights."""
        return None if self.vanished_fp16 is None else self.vanished_fp16 / max(self.elements, 1)


class SwampingReport:
    """The rows of one recorded step: ``print(report)``, ``report.to_dict()``, ``report.rows``."""

    def __init__(self, rows: list[ParameterSwamping], low_dtype: np.dtype) -> None:
        self.rows = rows
        self.low_dtype = dt.dtype_name(low_dtype)

    def __getitem__(self, name: str) -> ParameterSwamping:
        for row in self.rows:
            if row.name == name:
                return row
        raise KeyError(f"no parameter named {name!r} in this swamping report "
                       f"(names: {', '.join(r.name for r in self.rows)})")

    def totals(self) -> dict:
        measured = [r for r in self.rows if r.kept_fp32 is not None]
        elements = sum(r.elements for r in measured)
        kept = sum(r.kept_fp32 for r in measured)
        vanished = sum(r.vanished_fp16 for r in measured)
        return {"elements": elements, "kept_fp32": kept, "vanished_fp16": vanished,
                "survived_fraction": kept / elements if elements else None,
                "vanished_fraction": vanished / elements if elements else None}

    def to_dict(self) -> dict:
        rows = []
        for r in self.rows:
            row = asdict(r)
            row["survived_fraction"], row["vanished_fraction"] = r.survived_fraction, r.vanished_fraction
            rows.append(row)
        return {"low_dtype": self.low_dtype, "parameters": rows, "totals": self.totals()}

    def __str__(self) -> str:
        low = self.low_dtype
        header = ("parameter", "shape", "weights", "elements", "survive (fp32)", f"vanish ({low})", "held by master")
        table = [header]
        for r in self.rows:
            table.append((r.name, "x".join(map(str, r.shape)) or "scalar", r.weights, str(r.elements),
                          _fraction(r.survived_fraction), _fraction(r.vanished_fraction),
                          "-" if r.held_by_master is None else str(r.held_by_master)))
        widths = [max(len(row[i]) for row in table) for i in range(len(header))]
        lines = [f"update swamping: of each parameter's elements, the share whose update float32 (master) weights "
                 f"keep, and the share {low} weights would lose (w16 + u == w16)"]
        lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in table]
        t = self.totals()
        if t["elements"]:
            lines.append(f"  all: {t['kept_fp32']} of {t['elements']} elements updated in float32, "
                         f"{t['vanished_fp16']} of them ({t['vanished_fraction']:.2%} of all) would vanish in {low}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<SwampingReport {len(self.rows)} parameters>"


def _fraction(value: "float | None") -> str:
    return "-" if value is None else f"{value:.2%}"


def measure(name: str, param: Any, old_weight: Any, new_weight: Any, old_param: Any, master: bool,
            low_dtype: np.dtype) -> ParameterSwamping:
    """One row, from the weights before and after the step (arrays; see the module docstring).

    ``old_weight``/``new_weight``: the float32 weights the step updated (the
    master under master weights), or the parameter itself; ``old_param``: the
    parameter before the step (its float16 copy under master weights).
    """
    moved = int(np.count_nonzero(backend.to_host(old_param) != backend.to_host(param.array)))
    shape, elements = list(param.shape), int(param.array.size)
    weight_dtype = old_weight.dtype
    if dt.is_low_precision(weight_dtype):  # a 16-bit parameter without a master: no float32 update to compare
        return ParameterSwamping(name, shape, dt.dtype_name(weight_dtype), elements, moved, None, None, None)
    old = backend.to_host(old_weight).astype(np.float64)
    update = backend.to_host(new_weight).astype(np.float64) - old
    kept = update != 0
    w16 = backend.to_host(old_param).astype(low_dtype) if master else old.astype(low_dtype)
    with np.errstate(over="ignore"):
        after16 = (w16.astype(np.float64) + update).astype(low_dtype)
    vanished = kept & (after16 == w16)
    held = None
    if master:
        copy_unchanged = backend.to_host(param.array) == backend.to_host(old_param)
        held = int(np.count_nonzero(kept & copy_unchanged))
    weights = "float32 master" if master else dt.dtype_name(weight_dtype)
    return ParameterSwamping(name, shape, weights, elements, moved, int(np.count_nonzero(kept)),
                             int(np.count_nonzero(vanished)), held)


class _Tracking:
    """One optimizer's opt-in: the step hooks that copy the weights before a step and measure them after."""

    def __init__(self, optimizer: Any, low_dtype: np.dtype, names: dict, report: Any) -> None:
        self.low_dtype, self.names, self.report = low_dtype, names, report
        self._before: dict = {}
        self._handles = (optimizer.register_step_pre_hook(self._copy_weights),
                         optimizer.register_step_post_hook(self._measure_step))

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()

    def _copy_weights(self, optimizer: Any, args: tuple, kwargs: dict) -> None:
        """Before the step: each parameter's weight the step updates (its master under master weights), copied."""
        self._before = {}
        for group in optimizer.param_groups:
            for p in group["params"]:
                master = optimizer._master(p, group) if group.get("master_weights") else None
                weight = p.array if master is None else master.array
                self._before[id(p)] = (weight, weight.copy(), p.array.copy(), master is not None)

    def _measure_step(self, optimizer: Any, args: tuple, kwargs: dict) -> None:
        """After the step: one row per parameter it updated (those with a gradient), in group order."""
        rows = []
        for group_index, group in enumerate(optimizer.param_groups):
            for index, p in enumerate(group["params"]):
                if p.grad is not None and id(p) in self._before:
                    weight, old_weight, old_param, master = self._before[id(p)]
                    name = self.names.get(id(p), f"group{group_index}.{index}")
                    rows.append(measure(name, p, old_weight, weight, old_param, master, self.low_dtype))
        self._before = {}
        self.report = SwampingReport(rows, self.low_dtype)


def track_swamping(self: Any, enabled: bool = True, *, dtype: Any = dt.float16, names: Any = None) -> None:
    """Measure, at every step from now on, which update elements ``dtype`` weights would lose.

    Opt-in: a step copies each weight before it writes it only while this is on
    (a step pre-hook and post-hook of the optimizer). ``names``:
    ``model.named_parameters()`` (or a dict) to label the rows. :meth:`swamping`
    returns the last step's report.
    """
    tracking = self.__dict__.get("_swamping_tracking")
    if not enabled:
        if tracking is not None:
            tracking.remove()
        self._swamping_tracking = None
        return
    low = dt.as_dtype(dtype)
    if low not in dt.LOW_PRECISION:
        raise ValueError(f"{type(self).__name__}.track_swamping: dtype must be float16 or bfloat16, "
                         f"got {dt.dtype_name(low)}")
    labels = dict(names.items() if isinstance(names, dict) else names) if names is not None else {}
    report = None
    if tracking is not None:
        tracking.remove()
        report = tracking.report
    self._swamping_tracking = _Tracking(self, low, {id(p): name for name, p in labels.items()}, report)


def swamping(self: Any) -> Any:
    """The :class:`SwampingReport` of the last step taken while tracking, or None."""
    tracking = self.__dict__.get("_swamping_tracking")
    return None if tracking is None else tracking.report


# Registered on the optimizer from here, above it (as DeZero's setup_variable registers Tensor's operators):
# the optimizer itself knows nothing of this instrument.
Optimizer.track_swamping = track_swamping
Optimizer.swamping = swamping
