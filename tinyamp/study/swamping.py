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


class Tracking:
    """The optimizer's side of the measurement (``torch.optim.Optimizer`` has none): opt in, get the report.

    ``Optimizer`` takes this as a base; its ``step`` calls :meth:`_swamping_before`
    and :meth:`_swamping_after` around each group's update, which copy and
    measure only while tracking is on.
    """

    _swamping_dtype: "np.dtype | None" = None  # None: off (the default)
    _swamping_names: "dict[int, str] | None" = None
    _swamping_report: Any = None

    def track_swamping(self, enabled: bool = True, *, dtype: Any = dt.float16, names: Any = None) -> None:
        """Measure, at every step from now on, which update elements ``dtype`` weights would lose.

        Opt-in: a step copies each updated weight before it writes it only while
        this is on. ``names``: ``model.named_parameters()`` (or a dict) to label
        the rows. :meth:`swamping` returns the last step's report.
        """
        if not enabled:
            self._swamping_dtype = self._swamping_names = self._swamping_report = None
            return
        low = dt.as_dtype(dtype)
        if low not in dt.LOW_PRECISION:
            raise ValueError(f"{type(self).__name__}.track_swamping: dtype must be float16 or bfloat16, "
                             f"got {dt.dtype_name(low)}")
        self._swamping_dtype = low
        labels = dict(names.items() if isinstance(names, dict) else names) if names is not None else {}
        self._swamping_names = {id(p): name for name, p in labels.items()}

    def swamping(self) -> Any:
        """The :class:`SwampingReport` of the last step taken while tracking, or None."""
        return self._swamping_report

    def _swamping_before(self, entries: list) -> "list | None":
        """The weights and parameters of a group's entries before its update (None when not tracking)."""
        if self._swamping_dtype is None:
            return None
        return [(w.copy(), p.array.copy()) for p, w, _, _, _ in entries]

    def _swamping_after(self, group_index: int, group: dict, entries: list, before: "list | None") -> list:
        """The group's rows, from ``before`` and the weights the update wrote (none when not tracking)."""
        if before is None:
            return []
        index = {id(p): i for i, p in enumerate(group["params"])}
        names = self._swamping_names or {}
        return [measure(names.get(id(p), f"group{group_index}.{index[id(p)]}"), p, old_weight, weight, old_param,
                        master is not None, self._swamping_dtype)
                for (p, weight, _, _, master), (old_weight, old_param) in zip(entries, before)]
