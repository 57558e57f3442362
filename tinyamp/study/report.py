"""The precision report: ``with ta.amp.trace() as t: ...`` then ``print(t)``.

While a trace is open it records, for forward and backward:

- every op that ran: name, tag in force, the dtypes its inputs arrived in and
  the dtypes it computed in, its output dtypes, and (in backward) the node
  whose backward ran it;
- every cast: from, to, the op it was made for and the rule that made it
  ("LOWER: float32 -> float16 for matmul"), weight-cache hits included (a Cast
  node over an array converted earlier: no conversion runs), and in
  backward the cast that returns a gradient to its source dtype;
- what every conversion lost (:mod:`tinyamp.study.rounding`): values that became
  zero, became subnormal or overflowed to inf, NaNs, and the smallest and
  largest magnitude, for Cast nodes and for the roundings an op makes inside
  itself (a *fused* cast, reported through :meth:`Trace.record_cast`);
- every fp8 quantisation (an ``Fp8Cast`` node, ``ta.amp.fp8_autocast``): its
  quantiser (recipe, role, format), the scale used, the values the saturating
  rule clipped, the values that became zero, the MSE and SQNR
  (:func:`~tinyamp.study.rounding.fp8_stats`; a weight-cache hit is listed,
  not measured again);
- the bytes each node keeps for backward, per dtype, each array counted once
  (an fp8 operand under its fp8 format).

``print(t)`` shows one row per op with its casts just before it, then what
each down-cast lost, then totals; ``t.to_dict()`` gives the same data to programs.

How it hooks in: an open trace is the value of a context variable in
:mod:`tinyamp.precision` (``current_trace()``, None when no trace is open),
which ``Function.__call__`` reads once per op and the engine once per backward;
``amp.casting.cast_input`` tells the trace why each cast happened. Nothing else
is paid when no trace is open. An op that rounds an array itself (a fused
cast: no Cast node) reports it through ``precision.record_cast`` (one
context-variable read) or, holding the trace already, ``tracer.record_cast``
(docs/ARCHITECTURE.md, "Reporting a rounding"). Being a context variable, a trace records the
ops of the thread (or asyncio task) that opened it; traces nest (an inner
trace's events also reach the outer one).
"""

from __future__ import annotations

import math
import weakref
from dataclasses import asdict, dataclass, field
from typing import Any

from .. import dtypes as dt
from .. import precision
from ..autograd.custom_function import CustomFunction
from ..ops.cast import Cast, Fp8Cast
from .rounding import Fp8Stats, RoundingStats, empty_stats, fp8_stats, rounding_stats


@dataclass
class OpRecord:
    """One op that ran while the trace was open."""

    index: int
    phase: str                      # "forward" or "backward"
    name: str
    tag: str                        # the tag in force ("LOWER", ...; "custom" for user Functions)
    arrived: list[str]              # input dtypes as the caller passed them
    inputs: list[str]               # input dtypes the op computed in (after autocast casts)
    shapes: list[list[int]]
    outputs: list[str]
    casts: list[int] = field(default_factory=list)  # indices into Trace.casts made for this op
    saved_bytes: int = 0            # bytes this node newly keeps for backward
    during: str = ""                # backward: the node whose backward ran this op
    math: str = ""                  # "tf32": a float32 GEMM of this op ran in TF32 (allow_tf32)


@dataclass
class CastRecord:
    """One cast: a conversion that ran, or a Cast node over a weight-cache entry (no conversion)."""

    index: int
    phase: str
    source: str
    target: str
    op: str                         # the op the cast was made for ("" when not known)
    rule: str
    kind: str                       # "autocast", "cache hit", "backward", "explicit"
    shape: list[int]
    op_index: int = -1              # the OpRecord it fed (a fused cast: the op that made it), when known
    row: int = -1                   # the OpRecord of the Cast op itself (-1 for a fused cast)
    fused: bool = False             # made inside an op (no Cast node on the tape)
    rounding: "RoundingStats | None" = None  # what the conversion lost (None: a cache hit, nothing ran)

    @property
    def converted(self) -> bool:
        """False for a cache hit (no conversion ran)."""
        return self.kind != "cache hit"


@dataclass
class Fp8CastRecord:
    """One fp8 quantisation (an ``Fp8Cast`` op)."""

    index: int
    phase: str
    row: int                        # the OpRecord of the Fp8Cast op
    quantizer: str                  # "DelayedScaling e4m3 input" (recipe, format, role)
    layer: str                      # the layer the quantiser belongs to ("" when not known)
    shape: list[int]
    cached: bool                    # a weight-cache hit: the codes were made earlier
    stats: "Fp8Stats | None"        # None for a cache hit


class Trace:
    """A precision report; open it with ``with ta.amp.trace() as t:``."""

    def __init__(self) -> None:
        self.ops: list[OpRecord] = []
        self.casts: list[CastRecord] = []
        self.fp8_casts: list[Fp8CastRecord] = []
        self.saved_bytes: dict[str, dict[str, int]] = {"forward": {}, "backward": {}}
        self.cache_hits = 0
        self.cache_misses = 0
        self._parent: "Trace | None" = None
        self._token: Any = None
        self._depth = 0              # > 0 while the engine runs backward
        self._node: Any = None       # the node whose backward is running
        self._pending: Any = None    # (op, cause, cache) for the Cast about to run
        self._awaiting: list[tuple[Any, int, int]] = []  # (op, cast index, id(cast output))
        self._seen: dict[int, Any] = {}  # id(array) -> weakref, so each array counts once
        self._fused_pending: list[tuple[Any, int, Any]] = []  # (op, cast index, input) until the op is recorded
        self._rows: dict[int, tuple[Any, int]] = {}     # id(op) -> (weakref, OpRecord index), forward ops
        self._open = False
        self._tf32 = False           # a float32 GEMM ran in TF32 since the last op was recorded

    # ------------------------------------------------------------ context
    def __enter__(self) -> "Trace":
        if self._open:
            raise RuntimeError("this trace is already open")
        self._open = True
        self._parent = precision.current_trace()
        self._token = precision.set_trace(self)
        return self

    def __exit__(self, *exc: Any) -> bool:
        precision.reset_trace(self._token)
        self._open = False
        self._awaiting.clear()
        self._fused_pending.clear()
        self._rows.clear()
        self._pending = None
        return False

    @property
    def phase(self) -> str:
        return "backward" if self._depth else "forward"

    # ---------------------------------------- hooks (called by tinyamp, in this trace's thread)
    def begin_backward(self) -> None:
        self._depth += 1
        if self._parent is not None:
            self._parent.begin_backward()

    def end_backward(self) -> None:
        self._depth -= 1
        self._node = None
        if self._parent is not None:
            self._parent.end_backward()

    @property
    def node(self) -> Any:
        return self._node

    @node.setter
    def node(self, node: Any) -> None:
        self._node = node
        if self._parent is not None:
            self._parent.node = node

    def expect_cast(self, op: Any, cause: str, cache: "str | None") -> None:
        """autocast is about to run a Cast for ``op`` because of ``cause``."""
        self._pending = (op, cause, cache)
        if self._parent is not None:
            self._parent.expect_cast(op, cause, cache)

    def note_tf32(self) -> None:
        """A float32 GEMM is running in TF32 (``kernels/gemm.py``): the op about to be recorded is marked."""
        self._tf32 = True
        if self._parent is not None:
            self._parent.note_tf32()

    def record_op(self, op: Any, inputs: list, outputs: list) -> None:
        self._record_op(op, inputs, outputs)
        if self._parent is not None:
            self._parent.record_op(op, inputs, outputs)

    def record_gradients(self, node: Any, grads: tuple) -> None:
        """The engine ran ``node``'s backward, which returned ``grads`` (one per input, or None).

        The report keeps nothing of it; the shadow run (study/shadow.py) compares them.
        """
        if self._parent is not None:
            self._parent.record_gradients(node, grads)

    def record_cast(self, op: Any, source: Any, result: Any, direction: str, *, fused: bool,
                    rule: "str | None" = None, cache: "str | None" = None, position: "int | None" = None
                    ) -> CastRecord:
        """Report that ``op`` rounded the array ``source`` into ``result`` (another dtype), in ``direction``.

        The one way a rounding reaches the report: an op that converts an array
        inside itself (``fused=True``: a user-defined op converting in its
        forward or backward) calls it with the raw
        arrays; ``op`` is the op instance (or a name). ``direction`` is
        ``"forward"`` or ``"backward"``. Cast nodes reach the same accounting
        through the tape's op hook (``fused=False``). Returns the record.

        ``rule`` names the rule, as a Cast node's would be ("LOWER: float32 ->
        float16 for linear"), ``cache`` says "hit" (a cached copy: nothing
        converted) or "miss", and ``position`` is the input the cast was for, so
        the op's row shows what that input arrived as and what the op computed in.
        """
        if direction not in ("forward", "backward"):
            raise ValueError(f"record_cast: direction must be 'forward' or 'backward', got {direction!r}")
        name = op if isinstance(op, str) else op.name
        stats = None if cache == "hit" else rounding_stats(source, result)
        record = self._record_fused(op, name, source, result, direction, fused, stats, rule, cache, position)
        return record

    def _record_fused(self, op: Any, name: str, source: Any, result: Any, direction: str, fused: bool,
                      stats: "RoundingStats | None", rule: "str | None" = None, cache: "str | None" = None,
                      position: "int | None" = None) -> CastRecord:
        move = f"{dt.dtype_name(source.dtype)} -> {dt.dtype_name(result.dtype)}"
        what = "gradient " if direction == "backward" else ""
        if rule is None:
            kind = "fused" if fused else "reported"
            rule = f"{kind}: {what}{move} inside {name}"
        else:  # an autocast cast the op did itself: the kind its Cast node would have had
            kind = "backward" if direction == "backward" else "cache hit" if cache == "hit" else "autocast"
        if cache == "miss":
            self.cache_misses += 1
        elif cache == "hit":
            self.cache_hits += 1
        record = CastRecord(len(self.casts), direction, dt.dtype_name(source.dtype), dt.dtype_name(result.dtype),
                            name, rule, kind, list(source.shape), fused=fused, rounding=stats)
        self.casts.append(record)
        if not isinstance(op, str):
            row = self._rows.get(id(op))
            if row is not None and row[0]() is op:
                record.op_index = row[1]     # made by an op already recorded (its backward)
            else:
                self._fused_pending.append((op, record.index, position))  # recorded after its forward
        if self._parent is not None:
            self._parent._record_fused(op, name, source, result, direction, fused, stats, rule, cache, position)
        return record

    # ------------------------------------------------------------ recording
    def _add_cast(self, source: str, target: str, op: str, rule: str, kind: str, shape: tuple,
                  rounding: "RoundingStats | None" = None) -> CastRecord:
        record = CastRecord(len(self.casts), self.phase, source, target, op, rule, kind, list(shape),
                            rounding=rounding)
        self.casts.append(record)
        return record

    def _record_op(self, op: Any, inputs: list, outputs: list) -> None:
        index = len(self.ops)
        if isinstance(op, Cast):
            self._record_cast_op(op, inputs, outputs, index)
        elif isinstance(op, Fp8Cast):
            q = op.quantizer
            stats = None if op.cached is not None else fp8_stats(inputs[0].array, outputs[0].array)
            self.fp8_casts.append(Fp8CastRecord(len(self.fp8_casts), self.phase, index, q.name,
                                                getattr(q, "layer", ""), list(inputs[0].shape),
                                                op.cached is not None, stats))
        arrived = [dt.dtype_name(t.dtype) for t in inputs]
        casts = []
        if self._awaiting:
            by_output: dict[int, list[int]] = {}  # a cast output may feed two positions (x @ x)
            keep = []
            for owner, cast_index, out_id in self._awaiting:
                if owner is op:
                    by_output.setdefault(out_id, []).append(cast_index)
                else:
                    keep.append((owner, cast_index, out_id))
            self._awaiting = keep
            for position, t in enumerate(inputs):
                pending = by_output.get(id(t))
                if pending:
                    cast_index = pending.pop(0)
                    record = self.casts[cast_index]
                    record.op_index = index
                    arrived[position] = record.source
                    casts.append(cast_index)
        computed = [dt.dtype_name(t.dtype) for t in inputs]
        if self._fused_pending:
            keep_fused = []
            for owner, cast_index, position in self._fused_pending:
                if owner is op:
                    record = self.casts[cast_index]
                    record.op_index = index
                    casts.append(cast_index)
                    if position is not None and position < len(inputs):
                        # The op got this input as it arrived and computed in the cast's dtype.
                        arrived[position], computed[position] = record.source, record.target
                else:
                    keep_fused.append((owner, cast_index, position))
            self._fused_pending = keep_fused
        if not self._depth:
            self._rows[id(op)] = (_ref(op), index)
        tag = "custom" if isinstance(op, CustomFunction) else op.effective_precision(precision.current_autocast()).name
        during = ""
        if self._depth and self._node is not None:
            during = self._node.name
        record = OpRecord(index, self.phase, op.name, tag, arrived,
                          computed, [list(t.shape) for t in inputs],
                          [dt.dtype_name(t.dtype) for t in outputs], sorted(casts), 0, during,
                          "tf32" if self._tf32 else "")
        self._tf32 = False
        record.saved_bytes = self._count_saved(op)
        self.ops.append(record)

    def _record_cast_op(self, op: Any, inputs: list, outputs: list, index: int) -> None:
        source, target = dt.dtype_name(inputs[0].dtype), dt.dtype_name(outputs[0].dtype)
        shape = inputs[0].shape
        # The same accounting as record_cast: what this conversion lost (a cache
        # hit converts nothing: its loss was counted when the entry was made).
        hit = self._pending is not None and self._pending[2] == "hit"
        rounding = None if hit else rounding_stats(inputs[0].array, outputs[0].array)
        if self._pending is not None:
            owner, cause, cache = self._pending
            self._pending = None
            if cache == "miss":
                self.cache_misses += 1
            elif cache == "hit":
                self.cache_hits += 1
            record = self._add_cast(source, target, owner.name, cause,
                                    "cache hit" if cache == "hit" else "autocast", shape, rounding)
            self._awaiting.append((owner, record.index, id(outputs[0])))
        elif self._depth and isinstance(self._node, Cast):
            # A Cast node's backward: the gradient back to the source dtype.
            cause = getattr(self._node, "_amp_cause", None) or "a cast"
            record = self._add_cast(source, target, _cause_op(cause),
                                    f"gradient back to {target} (backward of {cause})", "backward", shape, rounding)
        else:
            record = self._add_cast(source, target, "", "explicit cast", "explicit", shape, rounding)
            if op.seq >= 0:
                op._amp_cause = "explicit cast"
        record.row = index

    def _count_saved(self, op: Any) -> int:
        """Bytes of arrays this node keeps for backward that no earlier node kept."""
        if op.seq < 0:
            return 0
        arrays = [array for array, _tensor in op.saved_items()]
        total = 0
        per_dtype = self.saved_bytes[self.phase]
        for array in arrays:
            owner = _owner(array)
            ref = self._seen.get(id(owner))
            if ref is not None and ref() is owner:
                continue
            self._seen[id(owner)] = _ref(owner)
            fmt = getattr(array, "fmt", None)  # an fp8 operand: counted under its fp8 format
            name = dt.dtype_name(array.dtype if fmt is None else fmt.dtype)
            per_dtype[name] = per_dtype.get(name, 0) + int(owner.nbytes)
            total += int(owner.nbytes)
        return total

    # ------------------------------------------------------------ reading
    def ops_named(self, name: str, phase: "str | None" = None) -> list[OpRecord]:
        return [r for r in self.ops if r.name == name and (phase is None or r.phase == phase)]

    def totals(self) -> dict:
        forward = [r for r in self.ops if r.phase == "forward"]
        conversions = [c for c in self.casts if c.converted]
        by_move: dict[str, int] = {}
        for c in conversions:
            key = f"{c.source} -> {c.target} ({c.phase})"
            by_move[key] = by_move.get(key, 0) + 1
        saved = {phase: dict(v) for phase, v in self.saved_bytes.items()}
        rounding = {"forward": empty_stats(), "backward": empty_stats()}
        for c in self.casts:
            if c.rounding is not None:
                rounding[c.phase] = rounding[c.phase].add(c.rounding)
        return {
            "ops": len(self.ops), "forward_ops": len(forward), "backward_ops": len(self.ops) - len(forward),
            "casts": len(conversions), "casts_by_dtype": by_move,
            "autocast_casts": sum(c.kind == "autocast" for c in self.casts),
            "backward_casts": sum(c.kind == "backward" for c in self.casts),
            "explicit_casts": sum(c.kind == "explicit" for c in self.casts),
            "fused_casts": sum(c.fused for c in self.casts),
            "tf32_ops": sum(r.math == "tf32" for r in self.ops),
            "rounding": {phase: asdict(stats) for phase, stats in rounding.items()},
            "cache_hits": self.cache_hits, "cache_misses": self.cache_misses,
            "saved_bytes": saved,
            "saved_bytes_total": sum(sum(v.values()) for v in saved.values()),
        }

    def to_dict(self) -> dict:
        return {"ops": [asdict(r) for r in self.ops], "casts": [asdict(c) for c in self.casts],
                "fp8_casts": [asdict(c) for c in self.fp8_casts], "totals": self.totals()}

    def __str__(self) -> str:
        totals = self.totals()
        rows = [("#", "phase", "op", "tag", "inputs", "output", "saved", "note")]
        rows_to_casts = {c.row: c for c in self.casts if c.row >= 0}
        for r in self.ops:
            cast = rows_to_casts.get(r.index)
            note = cast.rule if cast is not None else ""
            if r.during and cast is None:
                note = (note + " " if note else "") + f"(in {r.during} backward)"
            if r.math == "tf32":
                note = (note + " " if note else "") + "TF32 GEMM (allow_tf32)"
            ins = ", ".join(f"{d}{_shape(s)}" for d, s in zip(r.inputs, r.shapes))
            rows.append((str(r.index), r.phase, r.name, r.tag, ins, ", ".join(r.outputs),
                         _bytes(r.saved_bytes) if r.saved_bytes else "", note))
        widths = [max(len(row[i]) for row in rows) for i in range(7)]
        lines = [f"precision trace: {totals['forward_ops']} forward ops, {totals['backward_ops']} backward ops"]
        for row in rows:
            lines.append("  ".join(cell.ljust(w) for cell, w in zip(row[:7], widths)) + "  " + row[7])
        lines.append("")
        lines.append(f"casts: {totals['autocast_casts']} by autocast, {totals['backward_casts']} in backward, "
                     f"{totals['explicit_casts']} explicit; weight cache: {totals['cache_hits']} hits, "
                     f"{totals['cache_misses']} misses")
        for move, count in totals["casts_by_dtype"].items():
            lines.append(f"  {move}: {count}")
        lines.extend(self._rounding_lines(totals["rounding"]))
        lines.extend(self._fp8_lines())
        for phase, per_dtype in totals["saved_bytes"].items():
            if per_dtype:
                parts = ", ".join(f"{name} {_bytes(n)}" for name, n in sorted(per_dtype.items()))
                lines.append(f"saved for backward ({phase}): {parts}; total {_bytes(sum(per_dtype.values()))}")
        return "\n".join(lines)

    def _rounding_lines(self, totals: dict) -> list[str]:
        """The down-casts (and any cast that lost or met NaN) with what each lost, then sums per phase."""
        shown = [c for c in self.casts if c.rounding is not None
                 and (dt.is_low_precision(dt.as_dtype(c.target)) or c.rounding.lost or c.rounding.nan)]
        if not shown and not any(c.rounding is not None for c in self.casts):
            return []
        lines = ["", "information lost at casts (#: the row above that made the cast, its cast op or, for a "
                     "cast made inside an op (fused), that op; ->0: underflow, sub: now subnormal, ->inf: overflow; "
                     "|x|: smallest non-zero and largest finite source magnitude):"]
        rows = [("#", "phase", "cast", "made for", "elements", "->0", "sub", "->inf", "nan", "|x| min", "|x| max")]
        for c in shown:
            r = c.rounding
            row = c.row if c.row >= 0 else c.op_index
            rows.append((str(row) if row >= 0 else "-", c.phase, f"{c.source} -> {c.target}" + (" (fused)" if c.fused else ""),
                         c.op or "-", str(r.elements), str(r.underflow), str(r.subnormal), str(r.overflow),
                         str(r.nan), _magnitude(r.min_abs), _magnitude(r.max_abs)))
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines.extend("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)
        for phase, stats in totals.items():
            lines.append(f"  {phase}: {stats['elements']} values converted, {stats['underflow']} became zero, "
                         f"{stats['subnormal']} subnormal, {stats['overflow']} inf, {stats['nan']} NaN")
        return lines

    def _fp8_lines(self) -> list[str]:
        """One row per fp8 quantisation: quantiser, scale, saturated %, underflow %, MSE, SQNR."""
        if not self.fp8_casts:
            return []
        lines = ["", "fp8 casts (#: the fp8_cast row above; sat: clipped to the largest value, ->0: became zero, "
                     "SQNR: 10 log10(mean x^2 / MSE)):"]
        rows = [("#", "phase", "layer", "quantizer", "layout", "elements", "scale", "amax", "sat %", "->0 %", "MSE",
                 "SQNR dB")]
        for c in self.fp8_casts:
            s = c.stats
            if s is None:
                rows.append((str(c.row), c.phase, c.layer or "-", c.quantizer, "", str(math.prod(c.shape)),
                             "(weight cache hit)", "", "", "", "", ""))
                continue
            scale = _magnitude(s.scale_min) if s.scale_min == s.scale_max else \
                f"{_magnitude(s.scale_min)}..{_magnitude(s.scale_max)}"
            rows.append((str(c.row), c.phase, c.layer or "-", c.quantizer, s.layout, str(s.elements), scale,
                         _magnitude(s.amax), f"{s.saturated_pct:.3g}", f"{s.underflow_pct:.3g}", f"{s.mse:.3g}",
                         f"{s.sqnr_db:.1f}"))
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        lines.extend("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)
        return lines

    def __repr__(self) -> str:
        t = self.totals()
        return (f"<Trace {t['ops']} ops, {t['casts']} casts, {t['cache_hits']} cache hits, "
                f"{_bytes(t['saved_bytes_total'])} saved>")


def trace() -> Trace:
    """Open a precision report: ``with ta.amp.trace() as t: ...``; then ``print(t)``."""
    return Trace()


def _ref(obj: Any) -> Any:
    """A weak reference, or a strong one for objects that refuse them (NumPy scalars)."""
    try:
        return weakref.ref(obj)
    except TypeError:
        return lambda: obj


def _owner(array: Any) -> Any:
    """The array that owns the memory (a view keeps its base alive)."""
    while getattr(array, "base", None) is not None and hasattr(array.base, "nbytes"):
        array = array.base
    return array


def _cause_op(cause: str) -> str:
    return cause.split(" for ", 1)[1].split(" ")[0].rstrip(";") if " for " in cause else ""


def _magnitude(value: "float | None") -> str:
    return "-" if value is None else f"{value:.3g}"


def _shape(shape: list[int]) -> str:
    return "[" + ",".join(str(s) for s in shape) + "]"


def _bytes(n: int) -> str:
    for unit, size in (("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"
