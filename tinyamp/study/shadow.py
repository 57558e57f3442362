"""The float32 shadow run: one training step under AMP and in float32, compared op by op.

``report = ta.amp.shadow_run(step, model, *inputs, optimizer=opt, scaler=scaler)``
calls ``step(model, *inputs)`` (the user's forward and loss, with the user's own
``autocast`` inside; it returns the loss) twice, each on a copy of the model:

- the **AMP run**: the model copied as it is, autocast as the step asks, and
  backward from the loss times the scaler's current scale, as
  ``scaler.scale(loss).backward()`` would;
- the **twin**: the model copied and converted to ``reference_dtype``
  (float32, or float64 on request), floating inputs likewise, every autocast
  region entered made disabled (its overrides kept, nothing lowered), and
  backward from the unscaled loss. Under master weights the twin starts from
  the optimizer's float32 masters, the weights the AMP step really updates.

Both runs draw the same random numbers (the CPU generators are rewound between
them). The user's model, optimizer, scaler, gradients and CPU random state are
left exactly as they were: only copies run, and the optimizer and scaler are
only read.

**What is compared.** Every op the AMP run recorded in forward, except Cast
ops, becomes one row with two errors:

- *forward*: the op's outputs against the twin's;
- *backward*: the gradients the op's backward handed back for its inputs as
  the caller passed them (a gradient that a Cast node returned through an
  autocast cast is read after that cast, where the twin, which has no cast,
  produced its own), divided by the loss scale.

and one row per parameter compares the gradients that landed in ``.grad``.
Every error is relative to the size of the twin's tensor, computed in float64:
``max |amp - ref| / max |ref|`` and the normwise ``rms(amp - ref) / rms(ref)``
(the 2-norm relative error); an inf or NaN in only one run makes them inf.

**Flagging.** An op is flagged when its normwise (RMS) error exceeds the
tolerance; the *first bad op* is the first flagged row in forward order, and
in backward the flagged row whose backward ran first. The default tolerance
is 0.1 for float16 (0.2 for bfloat16), chosen between three magnitudes:

- rounding alone: one float16 rounding is at most 2^-11 (about 5e-4)
  relative, and smooth ops compound it to about 1e-3;
- a piecewise op taking the other branch (ReLU, max pooling): a value within
  rounding of the kink flips, and its gradient element changes entirely; with
  a flipped fraction f the normwise error is about sqrt(f), a few 1e-2 for
  float16 (so the *max* error of such an op is of order 1 and is shown, not
  used for flagging);
- a failure: overflow gives inf, a tensor whose values flush to zero or an
  accumulation that stalls gives errors of order 1.

**How the two runs are aligned.** The AMP run has Cast nodes the twin lacks
(autocast's casts, PROMOTE's, an explicit ``.float()`` that is a no-op in the
twin), and an op may round inside itself instead (a fused cast): neither
changes which *other* ops run. So Cast ops are dropped from both runs, and the
remaining forward ops are matched in order on (op name, output shapes) by a
longest-common-subsequence match (``difflib``): an op only one run has (a
dtype-dependent branch, an op fused only under autocast) is listed as
unmatched instead of shifting every later comparison. The user's explicit
casts to float16 run as written in both runs (the twin compares autocast's
decisions, not the step's own dtypes).
"""

from __future__ import annotations

import copy
import difflib
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import numpy as np

from .. import backend
from .. import dtypes as dt
from .. import random as ta_random
from ..autograd.engine import backward as run_backward
from ..grad_mode import enable_grad
from ..nn.module import Module
from ..ops.cast import Cast, Fp8Cast
from ..tensor import Tensor
from ..amp import recipe as fp8_recipes
from ..amp.autocast import regions_disabled
from ..amp.fp8_autocast import recipe_override
from .report import Trace

# Default tolerances on the normwise error, by the lowest precision the AMP run
# computed in (see "Flagging" above); float32 is for an AMP-free run against a float64 twin.
_DEFAULT_TOLERANCE = {"float16": 0.1, "bfloat16": 0.2, "float32": 1e-3}


@dataclass
class ErrorStats:
    """Relative error of one tensor (or several, pooled) against the twin's."""

    max: float      # max |amp - ref| / max |ref|
    rms: float      # rms(amp - ref) / rms(ref)


@dataclass
class OpComparison:
    """One forward op of the AMP run and its twin."""

    index: int                       # row number (forward order, Cast ops left out)
    name: str
    tag: str                         # the tag in force in the AMP run
    inputs: list[str]                # the AMP run's compute dtypes
    outputs: list[str]
    forward: "ErrorStats | None"     # None: no floating output
    backward: "ErrorStats | None"    # gradients w.r.t. the op's inputs; None when none flowed
    trace_row: int                   # the op's row in ``report.trace.ops``
    backward_order: "int | None" = None  # when its backward ran (0 first); None if it did not


@dataclass
class ParameterComparison:
    name: str
    shape: list[int]
    dtype: str                       # the AMP run's gradient dtype
    error: "ErrorStats | None"
    note: str = ""


@dataclass
class ShadowReport:
    """What :func:`shadow_run` found: ``print(report)`` or ``report.to_dict()``."""

    reference_dtype: str
    tolerance: float
    loss_scale: float
    amp_loss: float
    reference_loss: float
    ops: list[OpComparison]
    parameters: list[ParameterComparison]
    unmatched: dict[str, list[str]]
    trace: Trace = field(repr=False)  # the AMP run's precision trace (casts and what they lost)
    against: str = ""                 # fp8_recipes=(a, b): "recipe a against recipe b"; "" for a dtype twin

    @property
    def first_bad_forward(self) -> "OpComparison | None":
        """The first op, in forward order, whose forward normwise (RMS) error exceeds the tolerance."""
        return next((r for r in self.ops if r.forward is not None and _bad(r.forward.rms, self.tolerance)), None)

    @property
    def first_bad_backward(self) -> "OpComparison | None":
        """The op whose backward ran first among those whose gradient normwise error exceeds the tolerance."""
        bad = [r for r in self.ops if r.backward is not None and r.backward_order is not None
               and _bad(r.backward.rms, self.tolerance)]
        return min(bad, key=lambda r: r.backward_order) if bad else None

    def worst(self, which: str = "rms") -> float:
        """The largest ``"rms"`` (or ``"max"``) error of any op, forward or backward, or parameter gradient."""
        errors = [getattr(e, which) for r in self.ops for e in (r.forward, r.backward) if e is not None]
        errors += [getattr(p.error, which) for p in self.parameters if p.error is not None]
        return max(errors, default=0.0)

    def to_dict(self) -> dict:
        def row(r: "OpComparison | None") -> "dict | None":
            return None if r is None else asdict(r)
        return {"reference_dtype": self.reference_dtype, "against": self.against, "tolerance": self.tolerance,
                "loss_scale": self.loss_scale,
                "amp_loss": self.amp_loss, "reference_loss": self.reference_loss,
                "ops": [asdict(r) for r in self.ops], "parameters": [asdict(p) for p in self.parameters],
                "first_bad_forward": row(self.first_bad_forward), "first_bad_backward": row(self.first_bad_backward),
                "unmatched": self.unmatched}

    def __str__(self) -> str:
        tol = self.tolerance
        first_f, first_b = self.first_bad_forward, self.first_bad_backward
        what = self.against or f"AMP against a {self.reference_dtype} twin"
        lines = [f"shadow run: {what}; loss {self.amp_loss:.6g} (AMP) vs "
                 f"{self.reference_loss:.6g}; loss scale {self.loss_scale:g}; tolerance {tol:.3g} "
                 f"on the normwise error rms(amp - ref) / rms(ref) ('!' marks one above it)"]
        rows = [("#", "op", "tag", "AMP dtypes", "fwd max", "fwd rms", "bwd max", "bwd rms", "")]
        for r in self.ops:
            note = []
            if r is first_f:
                note.append("<- first bad op (forward)")
            if r is first_b:
                note.append("<- first bad op (backward)")
            dtypes = ",".join(_short(d) for d in r.inputs) + "->" + ",".join(_short(d) for d in r.outputs)
            rows.append((str(r.index), r.name, r.tag, dtypes, *_cells(r.forward, tol), *_cells(r.backward, tol),
                         " ".join(note)))
        lines.extend(_table(rows))
        lines.append("")
        lines.append("parameter gradients (unscaled) against the twin's:")
        prows = [("parameter", "shape", "grad dtype", "max", "rms", "")]
        for p in self.parameters:
            prows.append((p.name, "x".join(map(str, p.shape)) or "scalar", p.dtype, *_cells(p.error, tol), p.note))
        lines.extend(_table(prows))
        lines.append("")
        lines.append("first op over the tolerance: forward " + (_name(first_f) if first_f else "none") +
                     "; backward " + (_name(first_b) if first_b else "none"))
        for side, names in self.unmatched.items():
            if names:
                lines.append(f"ops only the {side} run has (not compared): {', '.join(names)}")
        return "\n".join(lines)


# --------------------------------------------------------------------------
# Recording one run
# --------------------------------------------------------------------------

class _Recorder(Trace):
    """A precision trace that also keeps every forward op's outputs and every node's input gradients."""

    def __init__(self) -> None:
        super().__init__()
        self.paused = False
        self.outputs: dict[int, list] = {}         # trace row -> float64 host copies of the outputs
        self.sources: dict[int, list] = {}         # trace row -> per input, (node, position) of its gradient
        self.grads: dict[tuple[int, int], Any] = {}  # (id(node), position) -> float64 host gradient
        self.order: dict[int, int] = {}            # id(node) -> when its backward ran
        self._cast_outputs: dict[int, tuple] = {}  # id(cast output) -> (output, cast node, its input)
        self.row_ops: dict[int, Any] = {}          # trace row -> the op (its node, when recorded)

    def __enter__(self) -> "_Recorder":
        super().__enter__()
        self._parent = None  # a trace the user has open does not see the shadow's runs
        return self

    def record_op(self, op: Any, inputs: list, outputs: list) -> None:
        if self.paused:
            return
        self._record_op(op, inputs, outputs)
        if self._depth:
            return  # ops run by backward: the nodes' gradients are what is compared
        row = len(self.ops) - 1
        if isinstance(op, (Cast, Fp8Cast)):  # looked through: an fp8 quantisation is a cast too
            self._cast_outputs[id(outputs[0])] = (outputs[0], op, inputs[0])
            return
        self.outputs[row] = [_host(o.array) for o in outputs]
        self.row_ops[row] = op
        sources = []
        for position, t in enumerate(inputs):
            source = (op, position)
            entry = self._cast_outputs.get(id(t))
            while entry is not None and entry[0] is t:  # look through casts to what the caller passed
                _, cast_node, t = entry
                source = (cast_node, 0)
                entry = self._cast_outputs.get(id(t))
            sources.append(source)
        self.sources[row] = sources

    def record_gradients(self, node: Any, grads: tuple) -> None:
        if self.paused:
            return
        self.order.setdefault(id(node), len(self.order))
        needs = node.needs_input_grad
        for position, g in enumerate(grads):
            # A gradient for an input that needs none is dropped by the engine: not compared.
            if g is not None and position < len(needs) and needs[position]:
                self.grads[(id(node), position)] = _host(g.array)

    def compared_rows(self) -> list[int]:
        """Trace rows of the forward ops that are compared (Cast ops left out)."""
        return sorted(self.outputs)

    def input_gradients(self, row: int) -> "list | None":
        """The gradients w.r.t. the op's inputs as passed (None where none flowed); None if none did."""
        grads = [self.grads.get((id(node), position)) for node, position in self.sources[row]]
        return grads if any(g is not None for g in grads) else None

    def backward_order(self, row: int) -> "int | None":
        """When the op's own backward ran (0 first), or None if it did not."""
        return self.order.get(id(self.row_ops[row]))


def _host(array: Any) -> np.ndarray:
    return backend.to_host(array).astype(np.float64)


# --------------------------------------------------------------------------
# The shadow run
# --------------------------------------------------------------------------

def shadow_run(step: Callable[..., Tensor], model: Module, *inputs: Any, optimizer: Any = None,
               scaler: Any = None, reference_dtype: Any = dt.float32,
               tolerance: "float | None" = None, fp8_recipes: "tuple | None" = None) -> ShadowReport:
    """Run ``step(model, *inputs)`` (forward and loss, autocast inside) under AMP and in float32; compare.

    ``optimizer``: read for float32 master weights (the twin starts from them).
    ``scaler``: its current scale seeds the AMP run's backward. ``reference_dtype``:
    float32 (default) or float64. ``tolerance``: the normwise relative error
    above which an op is flagged (default 0.1 for float16, 0.2 for bfloat16).
    ``fp8_recipes=(a, b)``: instead of a float32 twin, the step runs twice as
    written, every ``fp8_autocast`` region under recipe ``a`` in the first run
    and ``b`` in the reference ("what if this step used another recipe"; fp8
    casts are looked through, as casts are). Nothing the caller owns is
    modified. See the module docstring.
    """
    if fp8_recipes is not None:
        return _compare_recipes(step, model, inputs, fp8_recipes, scaler, tolerance)
    if not callable(step):
        raise TypeError(f"shadow_run: step must be callable as step(model, *inputs) -> loss, got "
                        f"{type(step).__name__}")
    if not isinstance(model, Module):
        raise TypeError(f"shadow_run: model must be a ta.nn.Module, got {type(model).__name__}")
    reference = dt.as_dtype(reference_dtype)
    if reference not in (dt.float32, dt.float64):
        raise ValueError(f"shadow_run: reference_dtype must be float32 or float64, got {dt.dtype_name(reference)}")
    if tolerance is not None and not (isinstance(tolerance, (int, float)) and tolerance > 0
                                      and math.isfinite(tolerance)):
        raise ValueError(f"shadow_run: tolerance must be a positive finite number, got {tolerance!r}")
    scale = float(scaler.get_scale()) if scaler is not None and scaler.is_enabled() else 1.0

    rng_states = _random_states()
    try:
        amp_model = copy.deepcopy(model)
        _drop_grads(amp_model)
        amp, amp_loss = _run(step, amp_model, [_amp_input(x) for x in inputs], scale)
        _set_random_states(rng_states)
        twin = _twin(model, optimizer, reference)
        with regions_disabled():
            ref, ref_loss = _run(step, twin, [_twin_input(x, reference) for x in inputs], 1.0)
    finally:
        _set_random_states(rng_states)

    if tolerance is None:
        tolerance = _DEFAULT_TOLERANCE[_lowest_precision(amp)]
    ops, unmatched = _compare_ops(amp, ref, scale)
    parameters = _compare_parameters(model, amp_model, twin, scale)
    return ShadowReport(dt.dtype_name(reference), float(tolerance), scale, amp_loss, ref_loss, ops, parameters,
                        unmatched, amp)


def _compare_recipes(step: Callable[..., Tensor], model: Module, inputs: tuple, pair: tuple, scaler: Any,
                     tolerance: "float | None") -> ShadowReport:
    """:func:`shadow_run` with ``fp8_recipes=(a, b)``: two copies of the model, the step under each recipe."""
    if not (isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(r, fp8_recipes.Recipe) for r in pair)):
        raise TypeError(f"shadow_run: fp8_recipes must be a pair of ta.amp.recipe recipes, got {pair!r}")
    scale = float(scaler.get_scale()) if scaler is not None and scaler.is_enabled() else 1.0
    rng_states, pending = _random_states(), set(fp8_recipes.PENDING_BACKWARD)
    copies, runs = [], []
    try:
        for recipe in pair:
            _set_random_states(rng_states)
            copy_ = copy.deepcopy(model)
            _drop_grads(copy_)
            with recipe_override(recipe):
                runs.append(_run(step, copy_, [_amp_input(x) for x in inputs], scale))
            copies.append(copy_)
    finally:
        _set_random_states(rng_states)
        for key in set(fp8_recipes.PENDING_BACKWARD) - pending:  # the copies' gradient quantisers
            del fp8_recipes.PENDING_BACKWARD[key]
    (amp, amp_loss), (ref, ref_loss) = runs
    tolerance = _DEFAULT_TOLERANCE[_lowest_precision(amp)] if tolerance is None else tolerance
    ops, unmatched = _compare_ops(amp, ref, 1.0)
    parameters = _compare_parameters(model, copies[0], copies[1], 1.0)
    return ShadowReport(type(pair[1]).__name__, float(tolerance), scale, amp_loss, ref_loss, ops, parameters,
                        unmatched, amp, against=f"fp8 recipe {pair[0]!r} against {pair[1]!r}")


def _run(step: Callable[..., Tensor], model: Module, inputs: list, scale: float) -> tuple[_Recorder, float]:
    recorder = _Recorder()
    with enable_grad(), recorder:
        loss = step(model, *inputs)
        if not isinstance(loss, Tensor) or loss.numel() != 1 or loss.dtype not in dt.FLOATING:
            what = (f"a {dt.dtype_name(loss.dtype)} tensor of shape {list(loss.shape)}" if isinstance(loss, Tensor)
                    else type(loss).__name__)
            raise TypeError(f"shadow_run: step(model, *inputs) must return the loss, a one-element floating "
                            f"Tensor, got {what}")
        if not loss.requires_grad:
            raise RuntimeError("shadow_run: the loss step returned does not require grad (no parameter reached it)")
        recorder.paused = True  # the scaling multiply is not the user's op
        # As GradScaler.scale: loss times a float32 scale (a float16 loss is promoted).
        seed_scale = Tensor._wrap(loss.device.xp.asarray(scale, dtype=np.float32))
        root = loss * seed_scale
        recorder.paused = False
        run_backward(root)
    return recorder, float(loss.item())


def _amp_input(x: Any) -> Any:
    """The AMP run's input: the caller's tensor, or a fresh leaf copy when it requires grad (its .grad is the caller's)."""
    if isinstance(x, Tensor) and x.requires_grad:
        return Tensor._wrap(x.array.copy()).requires_grad_()
    return x


def _twin_input(x: Any, reference: np.dtype) -> Any:
    if isinstance(x, Tensor) and x.dtype in dt.FLOATING:
        copy_ = Tensor._wrap(x.array.astype(reference))
        return copy_.requires_grad_() if x.requires_grad else copy_
    return x


def _twin(model: Module, optimizer: Any, reference: np.dtype) -> Module:
    """A copy of ``model`` in ``reference`` dtype, starting from the optimizer's masters where it keeps them."""
    twin = copy.deepcopy(model)
    state = getattr(optimizer, "state", None) or {}
    for (_, p), (_, q) in zip(model.named_parameters(), twin.named_parameters()):
        master = state.get(p, {}).get("master_param") if p in state else None
        if master is not None:
            q.array = master.array.astype(np.float32)
    _drop_grads(twin)
    return twin.to(reference)


def _drop_grads(model: Module) -> None:
    for p in model.parameters():
        p.grad = None


def _random_states() -> dict:
    """The CPU generators' states (a GPU generator is left to run on: reading its state is a host copy)."""
    return {dev: gen.get_state() for dev, gen in ta_random._default.items() if dev.type == "cpu"}


def _set_random_states(states: dict) -> None:
    for dev in list(ta_random._default):
        if dev.type == "cpu" and dev not in states:
            del ta_random._default[dev]  # made during a run: made again, freshly seeded, on first use
    for dev, state in states.items():
        ta_random._default[dev].set_state(state)


def _lowest_precision(amp: _Recorder) -> str:
    """The lowest-precision float the AMP run computed in (float32 when it used neither 16-bit type)."""
    seen = {d for r in amp.ops for d in r.inputs + r.outputs}
    return next((name for name in ("bfloat16", "float16") if name in seen), "float32")


# --------------------------------------------------------------------------
# Comparing
# --------------------------------------------------------------------------

def relative_error(amp: np.ndarray, ref: np.ndarray) -> ErrorStats:
    """max |amp - ref| / max |ref| and rms(amp - ref) / rms(ref), in float64; inf where only one is inf/NaN."""
    amp = np.asarray(amp, dtype=np.float64).ravel()
    ref = np.asarray(ref, dtype=np.float64).ravel()
    if amp.shape != ref.shape:
        raise ValueError(f"relative_error: {amp.size} values against {ref.size}")
    if amp.size == 0:
        return ErrorStats(0.0, 0.0)
    with np.errstate(invalid="ignore", over="ignore"):
        same = (amp == ref) | (np.isnan(amp) & np.isnan(ref))
        diff = np.where(same, 0.0, np.abs(amp - ref))
        diff = np.where(np.isnan(diff), np.inf, diff)
        finite_ref = ref[np.isfinite(ref)]
        size_max = float(np.abs(finite_ref).max()) if finite_ref.size else 0.0
        size_rms = float(np.sqrt(np.mean(finite_ref ** 2))) if finite_ref.size else 0.0
        err_max = float(diff.max())
        err_rms = float(np.sqrt(np.mean(diff ** 2)))
    return ErrorStats(_ratio(err_max, size_max), _ratio(err_rms, size_rms))


def _ratio(error: float, size: float) -> float:
    if error == 0:
        return 0.0
    return error / size if size > 0 and math.isfinite(error) else math.inf


def _pooled(amp: list, ref: list, divide: float = 1.0) -> "ErrorStats | None":
    """One error over several tensors (the pairs present in both runs)."""
    pairs = [(a / divide, r) for a, r in zip(amp, ref) if a is not None and r is not None and a.shape == r.shape]
    if not pairs:
        return None
    return relative_error(np.concatenate([a.ravel() for a, _ in pairs]), np.concatenate([r.ravel() for _, r in pairs]))


def _compare_ops(amp: _Recorder, ref: _Recorder, scale: float) -> tuple[list[OpComparison], dict]:
    amp_rows, ref_rows = amp.compared_rows(), ref.compared_rows()
    amp_keys = [_op_key(amp, i) for i in amp_rows]
    ref_keys = [_op_key(ref, i) for i in ref_rows]
    matcher = difflib.SequenceMatcher(None, amp_keys, ref_keys, autojunk=False)
    pairs: dict[int, int] = {}
    for block in matcher.get_matching_blocks():
        for k in range(block.size):
            pairs[block.a + k] = block.b + k
    comparisons = []
    for position, row in enumerate(amp_rows):
        if position not in pairs:
            continue
        twin_row = ref_rows[pairs[position]]
        record = amp.ops[row]
        floating = [a if a is not None and record.outputs[i] in _FLOAT_NAMES else None
                    for i, a in enumerate(amp.outputs[row])]
        forward = _pooled(floating, ref.outputs[twin_row])
        amp_grads, ref_grads = amp.input_gradients(row), ref.input_gradients(twin_row)
        backward = None if amp_grads is None or ref_grads is None else _pooled(amp_grads, ref_grads, scale)
        comparisons.append(OpComparison(len(comparisons), record.name, record.tag, record.inputs, record.outputs,
                                        forward, backward, row, amp.backward_order(row) if backward else None))
    matched_a, matched_b = set(pairs), set(pairs.values())
    unmatched = {"AMP": [amp.ops[r].name for i, r in enumerate(amp_rows) if i not in matched_a],
                 "reference": [ref.ops[r].name for i, r in enumerate(ref_rows) if i not in matched_b]}
    return comparisons, unmatched


_FLOAT_NAMES = {dt.dtype_name(d) for d in dt.FLOATING}


def _op_key(recorder: _Recorder, row: int) -> tuple:
    # An op may stand for another in the twin (Fp8Linear for Linear: ``same_as``).
    name = getattr(recorder.row_ops[row], "same_as", None) or recorder.ops[row].name
    return (name, tuple(a.shape for a in recorder.outputs[row]))


def _compare_parameters(model: Module, amp_model: Module, twin: Module, scale: float) -> list[ParameterComparison]:
    result = []
    for (name, _), (_, a), (_, r) in zip(model.named_parameters(), amp_model.named_parameters(),
                                         twin.named_parameters()):
        if a.grad is None or r.grad is None:
            note = "no gradient in either run" if a.grad is None and r.grad is None else \
                ("no gradient in the AMP run" if a.grad is None else "no gradient in the twin")
            result.append(ParameterComparison(name, list(a.shape), "-" if a.grad is None else
                                              dt.dtype_name(a.grad.dtype), None, note))
            continue
        error = relative_error(_host(a.grad.array) / scale, _host(r.grad.array))
        result.append(ParameterComparison(name, list(a.shape), dt.dtype_name(a.grad.dtype), error))
    return result


# --------------------------------------------------------------------------
# Printing
# --------------------------------------------------------------------------

def _bad(error: float, tolerance: float) -> bool:
    return not error <= tolerance  # NaN counts as bad


def _cells(error: "ErrorStats | None", tolerance: float) -> tuple[str, str]:
    if error is None:
        return "-", "-"
    return _fmt(error.max), _fmt(error.rms) + ("!" if _bad(error.rms, tolerance) else "")


def _fmt(value: float) -> str:
    return "inf" if value == math.inf else "0" if value == 0 else f"{value:.2e}"


def _short(name: str) -> str:
    return {"float16": "f16", "bfloat16": "bf16", "float32": "f32", "float64": "f64", "int64": "i64",
            "bool": "bool"}.get(name, name)


def _name(row: OpComparison) -> str:
    return f"#{row.index} {row.name}"


def _table(rows: list[tuple]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
