"""How autocast inserts a cast: ``cast_input``, the weight-cast cache, and the trace's "why".

``Function.__call__`` asks :mod:`tinyamp.precision` for an op's compute dtype
and, for every input that must move, calls ``precision.insert_cast``, which is
:func:`cast_input` (installed below when tinyamp is imported: a ``Cast`` is an
op, so the tape cannot import this module). A cast is an ordinary recorded
``Cast`` node, inserted *before* the op records its inputs, so a LOWER op saves
float16 tensors for backward and the Cast's backward hands float32 gradients to
float32 weights (docs/ARCHITECTURE.md, "The life of one op call").

The weight-cast cache made by the outermost autocast region lives in the
region's state; this module defines it and decides when it is used.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from .. import dtypes as dt
from .. import precision
from ..ops.cast import Cast, cast
from ..precision import PROMOTE, AutocastState, Precision


class WeightCastCache:
    """Low-precision copies of float32 leaf weights, converted once per outermost region.

    An entry is keyed on the weight's identity and the target dtype, and holds
    a weak reference to the weight, the weight's version at conversion time and
    the converted array. It is used only while the reference still points at
    the same tensor (ids are reused after garbage collection) and the version
    is unchanged (an in-place update, such as an optimizer step inside the
    region, bumps it). PyTorch and Apex key on identity alone and have served
    stale casts.

    The cache holds arrays, not graph nodes: every use gets its own recorded
    Cast node over the shared array (no conversion runs). So a use under
    ``no_grad`` can never leave a later use without its link to the weight
    (PyTorch's cache can), and each use's gradient is upcast and summed in
    float32 at the weight, bit for bit as without the cache (a shared node
    would sum the uses' float16 gradients in float16 first).
    """

    def __init__(self) -> None:
        self._entries: dict[tuple[int, np.dtype], tuple[Any, int, Any]] = {}
        self.hits = 0
        self.misses = 0

    def get(self, weight: Any, dtype: np.dtype) -> Any:
        """The converted array of ``weight``, or None when absent or stale."""
        entry = self._entries.get((id(weight), dtype))
        if entry is not None and entry[0]() is weight and entry[1] == weight._version[0]:
            self.hits += 1
            return entry[2]
        return None

    def put(self, weight: Any, dtype: np.dtype, array: Any) -> None:
        self.misses += 1
        self._entries[(id(weight), dtype)] = (weakref.ref(weight), weight._version[0], array)

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def info(self) -> dict:
        nbytes = sum(e[2].nbytes for e in self._entries.values())
        return {"entries": len(self._entries), "hits": self.hits, "misses": self.misses, "bytes": int(nbytes)}


class CachedCast(Cast):
    """y = x as dtype, from the region's weight-cast cache; dx = gy as x's dtype"""

    name = "cast"

    def __init__(self, dtype: np.dtype, array: Any) -> None:
        super().__init__(dtype)
        self.array = array

    def forward(self, xp: Any, x: Any) -> Any:
        self.source = x.dtype
        return self.array


def _cacheable(tensor: Any, target: np.dtype) -> bool:
    # PyTorch's rule: a float32 leaf that requires grad, cast down.
    return (tensor.grad_fn is None and tensor._requires_grad and tensor.data.dtype == dt.float32
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


def cast_input(op: Any, tensor: Any, target: np.dtype, state: "AutocastState | None",
               tag: "Precision | None") -> Any:
    """The recorded cast of one of ``op``'s inputs to ``target``.

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
                return node(tensor)
            return _traced_cast(node, tensor, tracer, op, _cause(op, tag, tensor.dtype, target, state)
                                + "; cache hit", "hit")
        cause = None if tracer is None else _cause(op, tag, tensor.dtype, target, state) + "; cached"
        out = _make_cast(tensor, target, tracer, op, cause, "miss")
        cache.put(tensor, target, out.data)
        return out
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


def clear_autocast_cache() -> None:
    """Empty the weight-cast cache of the current region stack (PyTorch's name)."""
    scope = precision.current_scope()
    if scope is not None:
        scope.cache.clear()


def autocast_cache_info() -> dict:
    """Entries, hits, misses and bytes of the current region stack's weight-cast cache."""
    scope = precision.current_scope()
    if scope is None:
        return {"entries": 0, "hits": 0, "misses": 0, "bytes": 0}
    return scope.cache.info()


precision.install_cast_function(cast_input)
