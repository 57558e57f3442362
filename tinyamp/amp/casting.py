"""How autocast inserts a cast: ``cast_input``, the weight-cast cache, and the trace's "why".

``Function.__call__`` asks :mod:`tinyamp.precision` for an op's compute dtype
and, for every input that must move, calls ``precision.insert_cast``, which is
:func:`cast_input` (installed below when tinyamp is imported: a ``Cast`` is an
op, so the tape cannot import this module). Every cast is an ordinary ``Cast``
op, recorded when its input requires grad, inserted *before* the op records its
inputs, so a LOWER op saves float16 tensors for backward and the Cast's
backward hands float32 gradients to float32 weights (docs/ARCHITECTURE.md, "The
life of one op call"). There is no other way autocast changes a dtype.

The weight-cast cache (:data:`WEIGHT_CACHE`) serves the forward of a float32
leaf weight's Cast node: converted once per weight, version and array, then
every later use inside the region gets its own ``CachedCast`` node over the same
array (a node and no conversion). As in PyTorch, the outermost region's exit
empties it, so any change to a weight between regions (through the API, a raw
array write, a replaced array) is seen by the next region's first cast. One
exception, on a GPU: an optimizer that updates the weight writes the rounded
new weight into its entry (``low_copy_to_refresh``), which the next region then
uses without a conversion.
"""

from __future__ import annotations

import weakref
from typing import Any, NamedTuple

import numpy as np

from .. import backend
from .. import dtypes as dt
from .. import precision
from ..kernels.convert import convert
from ..ops.cast import CachedCast, Cast
from ..tensor import ALIASED_WRITES
from ..precision import PROMOTE, AutocastState, Precision


class CachedCopy(NamedTuple):
    """A cached low-precision copy a CUDA graph capture read in place of converting ``weight``."""

    weight: Any
    dtype: np.dtype
    array: Any


class WeightCastCache:
    """Low-precision copies of float32 leaf weights, converted once per weight version.

    An entry is keyed on the weight's identity and the target dtype, and holds
    a weak reference to the weight, the weight's version and array at conversion
    time and the converted array. It is used only while the reference still
    points at the same tensor (ids are reused after garbage collection), the
    version is unchanged (an in-place update bumps it) and the weight still holds
    the same array (``p.data = new_array`` replaces it). A raw write into the
    array bumps nothing: the outermost autocast region's exit empties the cache
    (:meth:`end_region`), so such a write is seen by the next region (on a GPU,
    where every write through a Tensor bumps the version, an optimizer step may
    carry the copy it wrote into the next region).

    The cache holds arrays, not graph nodes: every use gets its own recorded
    Cast node over the shared array (no conversion runs). So a use under
    ``no_grad`` can never leave a later use without its link to the weight
    (PyTorch's cache can), and each use's gradient is upcast and summed in
    float32 at the weight, bit for bit as without the cache.
    """

    def __init__(self) -> None:
        # (id, dtype) -> [weakref, version, source array, low copy, usable in the next region's casts]
        self._entries: dict[tuple[int, np.dtype], list] = {}
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
        if entry is not None and entry[4] and entry[0]() is weight and entry[1] == weight._version[0] \
                and entry[2] is weight.array:
            self.hits += 1
            if type(entry[3]) is not np.ndarray:  # a GPU copy: a capture in progress reads it at every replay
                capture = backend.current_capture()
                if capture is not None:  # the graph reads this copy at every replay, not the weight
                    capture.keep_alive(entry[3])
                    backend.observe(CachedCopy(weight, dtype, entry[3]))
            return entry[3]
        return None

    def put(self, weight: Any, dtype: np.dtype, array: Any) -> None:
        """Keep ``array``, ``weight`` converted to ``dtype`` (by a Cast node), for the weight's current version."""
        if type(array) is not np.ndarray:  # a GPU copy: a capture in progress must hold it
            _held_by_capture(array)
        self.misses += 1
        key = (id(weight), dtype)
        entries = self._entries

        def forget(ref: Any, key: tuple = key) -> None:  # the weight was collected: drop its copy
            entry = entries.get(key)
            if entry is not None and entry[0] is ref:
                entries.pop(key, None)  # another thread's region exit may have dropped it meanwhile

        entries[key] = [weakref.ref(weight, forget), weight._version[0], weight.array, array, True]

    def to_refresh(self, weight: Any) -> "tuple[np.dtype, Any] | None":
        """(dtype, array) of a current entry of ``weight`` that an update may overwrite, else None.

        An optimizer stepping inside a region writes the rounded updated weight
        into the array and then calls :meth:`restamp`; other dtypes' entries of
        the weight become stale.
        """
        for dtype in (dt.float16, dt.bfloat16):
            entry = self._entries.get((id(weight), dtype))
            if entry is not None and entry[0]() is weight and entry[1] == weight._version[0] \
                    and entry[2] is weight.array:
                return dtype, entry[3]
        return None

    def refresh(self, copy: "CachedCopy") -> None:
        """Convert ``copy``'s weight into its array again (a graph reads it), and use it as current."""
        convert(copy.weight.array, copy.dtype, out=copy.array)
        entry = self._entries.get((id(copy.weight), copy.dtype))
        if entry is not None and entry[0]() is copy.weight and entry[3] is copy.array:
            entry[1], entry[2], entry[4] = copy.weight._version[0], copy.weight.array, True

    def restamp(self, weight: Any, dtype: np.dtype) -> None:
        """The entry of ``weight`` holds the weight's current value (written by the optimizer)."""
        entry = self._entries.get((id(weight), dtype))
        if entry is not None and entry[0]() is weight:
            entry[1], entry[4] = weight._version[0], True

    def end_region(self) -> None:
        """The outermost autocast region exited: PyTorch's rule, every entry goes (counts are kept).

        A GPU weight's entry is parked instead: unusable by a cast until an
        optimizer step writes round(new weight) into it and restamps it
        (:meth:`restamp`), so the next region's cast converts nothing. Any
        change after that step bumps the version or replaces the array.
        The walk is over a copy: the cache is the process's, and other threads'
        regions add and drop entries meanwhile (``dict.copy`` runs no Python code).
        """
        entries = self._entries
        for key, entry in entries.copy().items():
            if type(entry[3]) is np.ndarray:
                entries.pop(key, None)
            else:
                entry[4] = False

    def clear(self) -> None:
        """Drop every entry and start the hit and miss counts again."""
        self._entries.clear()
        self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def info(self) -> dict:
        entries = self._entries.copy()  # other threads may add and drop entries meanwhile
        nbytes = sum(e[3].nbytes for e in entries.values())
        return {"entries": len(entries), "hits": self.hits, "misses": self.misses, "bytes": int(nbytes)}


def _held_by_capture(array: Any) -> None:
    """A cached GPU copy a CUDA graph capture reads or writes is held by the graph: the cache may drop it
    (a new version, ``clear_autocast_cache``), the graph keeps using it at every replay."""
    capture = backend.current_capture()
    if capture is not None:
        capture.keep_alive(array)


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
    """The cast of one of ``op``'s inputs to ``target``: a ``Cast`` op, recorded when ``tensor`` requires grad.

    A float32 leaf that requires grad, cast down inside a region with the cache
    on, is converted once; later uses get a Cast node over the same array.
    ``tag`` None means the cast comes from ``custom_fwd(cast_inputs=...)``.
    """
    tracer = precision.current_trace()
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
        cause = None if tracer is None else _cause(op, tag, tensor.dtype, target, state) + "; cache miss"
        out = _make_cast(tensor, target, tracer, op, cause, "miss")
        cache.put(tensor, target, out.array)
        return _shares_version(out, tensor)
    cause = None if tracer is None else _cause(op, tag, tensor.dtype, target, state)
    return _make_cast(tensor, target, tracer, op, cause, None)


def _make_cast(tensor: Any, target: np.dtype, tracer: Any, op: Any, cause: "str | None",
               cache: "str | None") -> Any:
    if tracer is None:
        return Cast(target)(tensor)  # the tape asks only for casts that move (target is not tensor's dtype)
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


def refresh_cached_copy(copy: CachedCopy) -> None:
    """A graphed step's weight was written since its capture: its low-precision copy follows (a device cast)."""
    WEIGHT_CACHE.refresh(copy)


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


precision.install_cast_function(cast_input)
