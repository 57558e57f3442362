"""How autocast inserts a cast: ``cast_input``, the weight-cast cache, and the trace's "why".

``Function.__call__`` asks :mod:`tinyamp.precision` for an op's compute dtype
and, for every input that must move, calls ``precision.insert_cast``, which is
:func:`cast_input` (installed below when tinyamp is imported: a ``Cast`` is an
op, so the tape cannot import this module). A cast is an ordinary recorded
``Cast`` node, inserted *before* the op records its inputs, so a LOWER op saves
float16 tensors for backward and the Cast's backward hands float32 gradients to
float32 weights (docs/ARCHITECTURE.md, "The life of one op call").

Two kinds of op do the cast themselves, with the same numerics and no node
(``Function.upcasts_inputs``, ``Function.lowers_weights``): :func:`lower_weights`
hands a LOWER op the cached low-precision copies of its float32 weights, and
:func:`note_fused_cast` tells an open precision report about every such cast,
so ``ta.amp.trace()`` lists each rounding as before.

The weight-cast cache (:data:`WEIGHT_CACHE`) is persistent: an entry lives as
long as its weight and is used while the weight's version is unchanged, across
regions and steps. An optimizer that updates the weight on a GPU writes the
rounded new weight into the entry and re-stamps it (:func:`low_copy_to_refresh`),
so the next step's forward converts nothing. On the CPU the next use rewrites
the entry in place: the copy and, for a weight linear multiplies, its float32
widening (the CPU GEMM's operand), in one numba pass
(``kernels/round_through.LowCopy``). PyTorch instead empties its cache
whenever the outermost region exits (one conversion per weight per step);
``ta.amp.clear_autocast_cache()`` empties this one.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from .. import backend
from .. import dtypes as dt
from .. import precision
from ..kernels import cuda_launch
from ..kernels.convert import convert
from ..kernels.round_through import LowCopy
from ..ops.cast import CachedCast, Cast, cast
from ..tensor import ALIASED_WRITES, Tensor
from ..precision import PROMOTE, AutocastState, Precision


class WeightCastCache:
    """Low-precision copies of float32 leaf weights, converted once per weight version.

    An entry is keyed on the weight's identity and the target dtype, and holds
    a weak reference to the weight, the weight's version at conversion time and
    the converted array (a ``LowCopy``: the copy, and on the CPU its float32
    widening once asked for). It is used only while the reference still points at
    the same tensor (ids are reused after garbage collection) and the version
    is unchanged (an in-place update, such as an optimizer step, bumps it).
    PyTorch and Apex key on identity alone and have served stale casts. An
    entry goes when its weight is garbage collected.

    The cache holds arrays, not graph nodes: every use gets its own recorded
    Cast node over the shared array (no conversion runs), or none when the op
    lowers the weight itself. So a use under ``no_grad`` can never leave a later
    use without its link to the weight (PyTorch's cache can), and each use's
    gradient is upcast and summed in float32 at the weight, bit for bit as
    without the cache (a shared node would sum the uses' float16 gradients in
    float16 first).
    """

    def __init__(self) -> None:
        self._entries: dict[tuple[int, np.dtype], list] = {}  # (id, dtype) -> [weakref, version, LowCopy]
        self.hits = 0
        self.misses = 0
        self._aliased_writes = ALIASED_WRITES[0]

    def forget_aliased_writes(self) -> None:
        """Drop every entry if some array was written through a ``.data`` alias (or ``.data`` set) since the
        last call: those writes leave the version counter as it was, as in PyTorch. Called at each outermost
        autocast entry, so a weight written that way is converted anew by the next region."""
        if self._aliased_writes != ALIASED_WRITES[0]:
            self._aliased_writes = ALIASED_WRITES[0]
            self._entries.clear()

    def get(self, weight: Any, dtype: np.dtype) -> Any:
        """The converted array of ``weight``, or None when absent or stale."""
        entry = self._entries.get((id(weight), dtype))
        if entry is not None and entry[0]() is weight and entry[1] == weight._version[0]:
            self.hits += 1
            return _held_by_capture(entry[2].low)
        return None

    def put(self, weight: Any, dtype: np.dtype, array: Any) -> None:
        """Keep ``array``, ``weight`` converted to ``dtype`` (by a Cast node), for the weight's current version."""
        self._keep(weight, dtype, LowCopy(weight.array, array))

    def _keep(self, weight: Any, dtype: np.dtype, copy: LowCopy) -> None:
        _held_by_capture(copy.low)
        self.misses += 1
        key = (id(weight), dtype)
        entries = self._entries

        def forget(ref: Any, key: tuple = key) -> None:  # the weight was collected: drop its copy
            entry = entries.get(key)
            if entry is not None and entry[0] is ref:
                del entries[key]

        # [weak reference, version converted at, copies]: a list, so current() restamps it in place
        self._entries[key] = [weakref.ref(weight, forget), weight._version[0], copy]

    def current(self, weight: Any, dtype: np.dtype) -> "tuple[LowCopy, bool]":
        """(the copies of ``weight`` for ``dtype``, whether they were current): converted now when not.

        A stale entry on the CPU is rewritten in place: that saves allocations
        per weight and step there, where the optimizer does not write the copy
        (and a prepared numba pass makes the rewrite one kernel call); whoever
        kept the old copy for backward shares the weight's version counter and
        sees the update. This runs for every lowered weight of every step (the
        optimizer's update makes each one stale), so the entry is restamped in
        place (a list) rather than rebuilt.
        """
        entry = self._entries.get((id(weight), dtype))
        if entry is not None and entry[0]() is weight:
            copy, version = entry[2], weight._version[0]
            if entry[1] == version:
                self.hits += 1
                capture = backend.current_capture()  # _held_by_capture, inlined: on every lowered weight
                if capture is not None:
                    capture.keep_alive(copy.low)
                return copy, True
            source, prepared = weight.array, copy._pass
            if prepared is not None and source is copy.source:
                # LowCopy.rewrite's common call (a CPU weight after each optimizer step), without the
                # call around it: the prepared numba pass alone, for every lowered weight of every step.
                prepared[0](*prepared[1])
            elif not copy.rewrite(source):
                copy = None  # on a GPU: converted anew below
            if copy is not None:
                self.misses += 1
                entry[1] = version
                return copy, False
        copy = LowCopy.of(weight.array, dtype)
        self._keep(weight, dtype, copy)
        return copy, False

    def prepared(self, weight: Any, dtype: np.dtype) -> "LowCopy | None":
        """:meth:`current`'s copies of ``weight`` for ``dtype`` when they are a CPU weight's with a
        prepared numba pass (rewritten by it when stale), else None and nothing done.

        ``lower_weights``' fast path, for every lowered weight of every CPU step:
        the same copies, counts and bits as :meth:`current`, without its general
        checks. The caller has checked the PyTorch rule (:func:`_cacheable`'s
        leaf test) and that no CUDA graph capture is open.
        """
        entry = self._entries.get((id(weight), dtype))
        if entry is None:
            return None
        copy = entry[2]
        prepared = copy._pass
        if prepared is None or copy.source is not weight.array or entry[0]() is not weight:
            return None
        version = weight._version[0]
        if entry[1] == version:
            self.hits += 1
        else:
            prepared[0](*prepared[1])
            self.misses += 1
            entry[1] = version
        return copy

    def to_refresh(self, weight: Any) -> "tuple[np.dtype, Any] | None":
        """(dtype, array) of a current entry of ``weight`` that an update may overwrite, else None.

        The optimizer writes the rounded updated weight into the array and then
        calls :meth:`restamp`; other dtypes' entries of the weight become stale.
        """
        for dtype in (dt.float16, dt.bfloat16):
            entry = self._entries.get((id(weight), dtype))
            if entry is not None and entry[0]() is weight and entry[1] == weight._version[0]:
                return dtype, entry[2].low
        return None

    def restamp(self, weight: Any, dtype: np.dtype) -> None:
        """The entry of ``weight`` holds the weight's current value (written by the optimizer)."""
        entry = self._entries.get((id(weight), dtype))
        if entry is not None and entry[0]() is weight:
            entry[1] = weight._version[0]

    def clear(self) -> None:
        """Drop every entry and start the hit and miss counts again."""
        self._entries.clear()
        self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def info(self) -> dict:
        nbytes = sum(e[2].low.nbytes + (0 if e[2].wide is None else e[2].wide.nbytes) for e in self._entries.values())
        return {"entries": len(self._entries), "hits": self.hits, "misses": self.misses, "bytes": int(nbytes)}


def _held_by_capture(array: Any) -> Any:
    """A cached copy a CUDA graph capture reads or writes is held by the graph: the cache may drop it
    (a new version, ``clear_autocast_cache``), the graph keeps using it at every replay."""
    capture = backend.current_capture()
    if capture is not None:
        capture.keep_alive(array)
    return array


def _cacheable(tensor: Any, target: np.dtype) -> bool:
    # PyTorch's rule: a float32 leaf that requires grad, cast down.
    return (tensor.grad_fn is None and tensor._requires_grad and tensor.array.dtype == dt.float32
            and (target == dt.float16 or target == dt.bfloat16))


def _cause(op: Any, tag: "Precision | None", source: np.dtype, target: np.dtype,
           state: "AutocastState | None") -> str:
    """Why this cast happens, in words (only built while a trace is open)."""
    move = f"{dt.dtype_name(source)} -> {dt.dtype_name(target)} for {op.name}"
    if tag is None:
        return f"custom_fwd(cast_inputs={dt.dtype_name(target)}): {move}"
    rule = f"{tag.name}: {move}"
    if tag is PROMOTE:
        rule += " (widest input)"
    if tag is not op.precision:
        where = "region" if state is not None and op.name in state.overrides else "global"
        rule += f" ({where} override of {op.precision.name})"
    return rule


WEIGHT_CACHE = WeightCastCache()
"""The process's weight-cast cache (used by every region with ``cache_enabled``)."""


def cast_input(op: Any, tensor: Any, target: np.dtype, state: "AutocastState | None",
               tag: "Precision | None") -> Any:
    """The recorded cast of one of ``op``'s inputs to ``target``.

    A float32 leaf that requires grad, cast down inside a region with the cache
    on, is converted once; later uses get a Cast node over the same array.
    ``tag`` None means the cast comes from ``custom_fwd(cast_inputs=...)``.
    """
    tracer = precision.current_trace()
    if tracer is None and not tensor._requires_grad:
        # Nothing to record and nothing to cache (an input batch): the conversion alone.
        return Tensor._wrap(convert(tensor.array, target))
    cache = None if state is None else state.cache
    if cache is not None and _cacheable(tensor, target):
        array = cache.get(tensor, target)
        if array is not None:
            node = CachedCast(target, array)
            if tracer is None:
                return _shares_version(node(tensor), tensor)
            return _shares_version(_traced_cast(node, tensor, tracer, op, _cause(op, tag, tensor.dtype, target,
                                                                                 state) + "; cache hit", "hit"),
                                   tensor)
        cause = None if tracer is None else _cause(op, tag, tensor.dtype, target, state) + "; cached"
        out = _make_cast(tensor, target, tracer, op, cause, "miss")
        cache.put(tensor, target, out.array)
        return _shares_version(out, tensor)
    cause = None if tracer is None else _cause(op, tag, tensor.dtype, target, state)
    return _make_cast(tensor, target, tracer, op, cause, None)


def _make_cast(tensor: Any, target: np.dtype, tracer: Any, op: Any, cause: "str | None",
               cache: "str | None") -> Any:
    if tracer is None:
        return cast(tensor, target)
    return _traced_cast(Cast(target), tensor, tracer, op, cause, cache)


def _traced_cast(node: Any, tensor: Any, tracer: Any, op: Any, cause: str, cache: "str | None") -> Any:
    tracer.expect_cast(op, cause, cache)
    out = node(tensor)
    if out.grad_fn is not None:
        out.grad_fn._amp_cause = cause  # so the report can say why its backward casts
    return out


def _shares_version(out: Any, weight: Any) -> Any:
    """A cached copy changes when its weight does (an optimizer may rewrite it in place on a GPU):
    the cast output takes the weight's version counter, so a node that saved it sees the update."""
    out._version = weight._version
    return out


def lower_weights(op: Any, inputs: list, positions: "tuple[int, ...]", target: np.dtype, state: AutocastState,
                  tag: Precision) -> None:
    """``precision.lower_weights``: the ``target`` copies of the float32 weights an op lowers itself.

    For each input at ``positions`` (those of ``op.lowers_weights`` that must move): a float32 leaf
    that requires grad goes to ``op.lowered`` as its ``target`` copy and to
    ``op.widened`` as that copy's float32 widening or None; any other input gets
    an ordinary recorded cast in ``inputs``. With the cache on, the copy is the
    cached one (converted on a miss, rewritten in place when stale) and, on the
    CPU, comes with the widening the cache keeps beside it (the CPU GEMM's
    operand); without the cache, a fresh conversion and no widening. Each copy
    is reported to an open trace, in input order. One call for all of an op's
    weights (linear: weight and bias), on every such op under autocast.
    """
    cache = state.cache
    tracing = precision.current_trace() is not None
    lowered, widened = op.lowered, op.widened
    current = None if cache is None else cache.current
    # The CPU step's call (no report, no capture open): a weight whose copies have a prepared numba
    # pass takes WeightCastCache.prepared, the same copies as current() with fewer checks.
    prepared = None if cache is None or tracing or backend.current_capture() is not None else cache.prepared
    for position in positions:
        tensor = inputs[position]
        if prepared is not None and tensor.grad_fn is None and tensor._requires_grad:  # _cacheable's leaf test;
            copy = prepared(tensor, target)  # an entry (float32 when made, its array unreplaced) implies the rest
            if copy is not None:
                if lowered is None:
                    lowered = op.lowered = {}
                    widened = op.widened = {}
                lowered[position], widened[position] = copy.low, copy.wide
                continue
        if not _cacheable(tensor, target):
            inputs[position] = cast_input(op, tensor, target, state, tag)
            continue
        if current is not None:
            copy, cached = current(tensor, target)
            array, wide = copy.low, copy.wide
            if wide is None:  # not asked for yet (or not kept: a large weight, a GPU)
                wide = copy.widened()
        else:
            array, wide, cached = convert(tensor.array, target), None, None
        if lowered is None:
            lowered = op.lowered = {}
            widened = op.widened = {}
        lowered[position], widened[position] = array, wide
        if tracing:
            kind = None if cached is None else "hit" if cached else "miss"
            note_fused_cast(op, position, tensor, target, state, tag, kind, array)


def note_fused_cast(op: Any, position: int, tensor: Any, target: np.dtype, state: "AutocastState | None",
                    tag: "Precision | None", cache: "str | None" = None, result: Any = None) -> None:
    """``precision.note_fused_cast``: report a cast an op does itself, with autocast's rule."""
    cause = _cause(op, tag, tensor.dtype, target, state)
    if cache is not None:
        cause += "; cache hit" if cache == "hit" else "; cached"
    causes = op.__dict__.setdefault("_amp_fused_causes", {})
    causes[position] = cause  # the backward names the same rule when it rounds the gradient back
    if result is None:
        result = convert(tensor.array, target)  # the op converts inside; the report needs the values
    precision.record_cast(op, tensor.array, result, "forward", rule=cause, cache=cache, position=position)


def low_copy_to_refresh(weight: Any) -> "tuple[np.dtype, Any] | None":
    """(dtype, array) of ``weight``'s current cached copy, for an optimizer to overwrite, else None."""
    return WEIGHT_CACHE.to_refresh(weight)


def restamp_low_copy(weight: Any, dtype: np.dtype) -> None:
    """After the optimizer wrote the rounded new weight into the copy: it is current again."""
    WEIGHT_CACHE.restamp(weight, dtype)


def clear_autocast_cache() -> None:
    """Empty the weight-cast cache (PyTorch's name)."""
    WEIGHT_CACHE.clear()


def autocast_cache_info() -> dict:
    """Entries, hits, misses and bytes of the weight-cast cache."""
    return WEIGHT_CACHE.info()


precision.install_cast_function(cast_input, fused=note_fused_cast, lower_weights=lower_weights)
