"""autocast: the context manager/decorator, the weight-cast cache and per-op overrides.

(``custom_fwd``/``custom_bwd`` for user-defined Functions are in
:mod:`tinyamp.amp.custom_function`.)

How an op is autocast (DESIGN.md section 4): ``Function.__call__`` reads the
state (:mod:`tinyamp.amp.state`); when a region is on, it asks the policy for
the op's compute dtype and calls :func:`cast_input` for every input that must
move. A cast is an ordinary recorded ``Cast`` node, inserted *before* the op
records its inputs, so a LOWER op saves float16 tensors for backward and the
Cast's backward hands float32 gradients to float32 weights.

Regions form a stack kept in context variables (so per thread): an inner region
(``enabled=False``, another dtype, more overrides) is undone on exit, and the
weight-cast cache made by the outermost region is shared by every region inside
it and dropped when the outermost one exits.
"""

from __future__ import annotations

import difflib
import functools
import warnings
import weakref
from typing import Any, Callable, Iterable, Mapping

import numpy as np

import tinyamp

from .. import backend
from .. import dtypes as dt
from . import state as amp_state
from .policy import FP32, LOWER, NEUTRAL, PROMOTE, Precision, as_precision

_GLOBAL_OVERRIDES: dict[str, Precision] = {}

# Mirrors ``autograd.function._trace_hook`` (set together by amp.report) so a
# cast can tell the open trace why it happened without importing upward.
_trace_hook: Any = None

_DEVICE_TYPES = ("cpu", "cuda")


# --------------------------------------------------------------------------
# Per-op overrides
# --------------------------------------------------------------------------

def global_overrides() -> dict[str, Precision]:
    """Tag overrides by op name that apply in every autocast region."""
    return _GLOBAL_OVERRIDES


def _check_op_name(name: Any, where: str) -> str:
    from .op_table import known_op_names

    known = known_op_names()
    if not isinstance(name, str) or name not in known:
        close = difflib.get_close_matches(str(name), sorted(known), n=3)
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise ValueError(f"{where}: unknown op name {name!r}{hint} (ta.amp.op_table() lists the ops)")
    return name


def set_op_precision(name: str, tag: "Precision | str") -> None:
    """Override op ``name``'s tag in every autocast region (Paddle's custom white/black lists).

    ``ta.amp.set_op_precision("exp", "lower")`` runs ``exp`` in float16 under
    autocast; :func:`reset_op_precision` undoes it. Outside autocast only the
    class tag counts (PROMOTE ops always promote).
    """
    _GLOBAL_OVERRIDES[_check_op_name(name, "set_op_precision")] = as_precision(tag)


def get_op_precision(name: str) -> Precision:
    """The tag op ``name`` has in autocast regions, global overrides included."""
    from .op_table import op_classes

    _check_op_name(name, "get_op_precision")
    return _GLOBAL_OVERRIDES.get(name, op_classes()[name][0].precision)


def reset_op_precision(name: "str | None" = None) -> None:
    """Drop the global override of ``name`` (all of them when None)."""
    if name is None:
        _GLOBAL_OVERRIDES.clear()
    else:
        _GLOBAL_OVERRIDES.pop(_check_op_name(name, "reset_op_precision"), None)


def _region_overrides(overrides: "Mapping[str, Any] | None", sets: dict[Precision, Iterable[str] | None]) -> dict:
    """Validate a region's ``overrides=`` mapping and ``lower_ops=``-style sets."""
    result: dict[str, Precision] = {}
    for name, tag in (overrides or {}).items():
        result[_check_op_name(name, "autocast(overrides=...)")] = as_precision(tag)
    for tag, names in sets.items():
        if names is None:
            continue
        if isinstance(names, str):
            raise TypeError(f"autocast({tag.value}_ops=...): expected a set of op names, got the string "
                            f"{names!r} (write {{{names!r}}})")
        for name in names:
            _check_op_name(name, f"autocast({tag.value}_ops=...)")
            if name in result and result[name] is not tag:
                raise ValueError(f"autocast: op {name!r} is given two tags, {result[name].name} and {tag.name}")
            result[name] = tag
    return result


# --------------------------------------------------------------------------
# The weight-cast cache
# --------------------------------------------------------------------------

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


_CachedCast: Any = None


def _cached_cast_class() -> type:
    """``Cast`` whose forward hands back an array converted earlier (made on first use:
    the op library is imported after this module)."""
    global _CachedCast
    if _CachedCast is None:
        from ..ops.cast import Cast

        class CachedCast(Cast):
            """y = x as dtype, from the region's weight-cast cache; dx = gy as x's dtype"""

            name = "cast"

            def __init__(self, dtype: np.dtype, array: Any) -> None:
                super().__init__(dtype)
                self.array = array

            def forward(self, xp: Any, x: Any) -> Any:
                self.source = x.dtype
                return self.array

        _CachedCast = CachedCast
    return _CachedCast


def _cacheable(tensor: Any, target: np.dtype) -> bool:
    # PyTorch's rule: a float32 leaf that requires grad, cast down.
    return (tensor.grad_fn is None and tensor._requires_grad and tensor.data.dtype == dt.float32
            and (target == dt.float16 or target == dt.bfloat16))


def _cause(op: Any, tag: "Precision | None", source: np.dtype, target: np.dtype,
           state: "amp_state.AutocastState | None") -> str:
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


def cast_input(op: Any, tensor: Any, target: np.dtype, state: "amp_state.AutocastState | None",
               tag: "Precision | None") -> Any:
    """The recorded cast of one of ``op``'s inputs to ``target``.

    A float32 leaf that requires grad, cast down inside a region with the cache
    on, is converted once; later uses get a Cast node over the same array.
    ``tag`` None means the cast comes from ``custom_fwd(cast_inputs=...)``.
    """
    tracer = _trace_hook
    cache = None if state is None else state.cache
    if cache is not None and _cacheable(tensor, target):
        array = cache.get(tensor, target)
        if array is not None:
            node = _cached_cast_class()(target, array)
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
        return tinyamp.ops.cast(tensor, target)
    from ..ops.cast import Cast

    return _traced_cast(Cast(target), tensor, tracer, op, cause, cache)


def _traced_cast(node: Any, tensor: Any, tracer: Any, op: Any, cause: str, cache: "str | None") -> Any:
    tracer.expect_cast(op, cause, cache)
    out = node(tensor)
    if out.grad_fn is not None:
        out.grad_fn._amp_cause = cause  # so the report can say why its backward casts
    return out


def clear_autocast_cache() -> None:
    """Empty the weight-cast cache of the current region stack (PyTorch's name)."""
    scope = amp_state.current_scope()
    if scope is not None:
        scope.cache.clear()


def autocast_cache_info() -> dict:
    """Entries, hits, misses and bytes of the current region stack's weight-cast cache."""
    scope = amp_state.current_scope()
    if scope is None:
        return {"entries": 0, "hits": 0, "misses": 0, "bytes": 0}
    return scope.cache.info()


# --------------------------------------------------------------------------
# autocast
# --------------------------------------------------------------------------

def _check_device_type(device_type: Any) -> "str | None":
    if device_type is None:
        return None
    if not isinstance(device_type, str):
        raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
    if device_type not in _DEVICE_TYPES:
        raise RuntimeError(f"User specified an unsupported autocast device_type '{device_type}' "
                           f"(tinyamp supports 'cpu', 'cuda', or None for every device)")
    return device_type


def _check_dtype(dtype: Any, where: str) -> np.dtype:
    if dtype is None:
        return dt.float16  # float16 on every device: the numerics this project studies
    resolved = dt.as_dtype(dtype)
    if resolved not in dt.LOW_PRECISION:
        raise ValueError(f"{where}: dtype must be float16 or bfloat16 (the dtype LOWER ops run in), "
                         f"got {dt.dtype_name(resolved)}")
    return resolved


class autocast:
    """Run ops in mixed precision: ``with ta.amp.autocast(): ...`` or ``@ta.amp.autocast()``.

    ``device_type``: None (every device), ``"cpu"`` or ``"cuda"`` (only ops on
    that device are autocast). ``dtype``: float16 (default, every device) or
    bfloat16. ``enabled=False`` makes a region that runs in the dtypes it
    receives. ``cache_enabled``: reuse one cast per float32 weight inside the
    outermost region (None: inherit from the enclosing region).

    Per-region overrides by op name: ``lower_ops``, ``fp32_ops``,
    ``promote_ops``, ``neutral_ops`` (sets of names) or ``overrides`` (a
    mapping name -> tag); inner regions inherit and extend the outer ones.
    """

    def __init__(self, device_type: "str | None" = None, dtype: Any = None, enabled: bool = True,
                 cache_enabled: "bool | None" = True, *, lower_ops: "Iterable[str] | None" = None,
                 fp32_ops: "Iterable[str] | None" = None, promote_ops: "Iterable[str] | None" = None,
                 neutral_ops: "Iterable[str] | None" = None,
                 overrides: "Mapping[str, Precision | str] | None" = None) -> None:
        self.device_type = _check_device_type(device_type)
        self.fast_dtype = _check_dtype(dtype, "autocast")
        if not isinstance(enabled, (bool, np.bool_)):
            raise TypeError(f"autocast: enabled must be a bool, got {type(enabled).__name__}")
        self._enabled = bool(enabled)
        self._cache_enabled = None if cache_enabled is None else bool(cache_enabled)
        self.overrides = _region_overrides(overrides, {LOWER: lower_ops, FP32: fp32_ops,
                                                       PROMOTE: promote_ops, NEUTRAL: neutral_ops})
        if self._enabled and self.device_type == "cuda" and not backend.cuda.is_available():
            warnings.warn("User provided device_type of 'cuda', but CUDA is not available. Disabling "
                          "(use device_type='cpu' or None to autocast CPU ops)", stacklevel=2)
            self._enabled = False
        self._tokens: list[tuple[Any, Any, Any, bool]] = []

    @property
    def enabled(self) -> bool:
        return self._enabled

    def __enter__(self) -> "autocast":
        outer = amp_state.current_scope()
        cache_enabled = (outer.cache_enabled if outer is not None else True) \
            if self._cache_enabled is None else self._cache_enabled
        if outer is None:
            scope = amp_state.AutocastScope(WeightCastCache(), dict(self.overrides), cache_enabled)
        else:
            scope = amp_state.AutocastScope(outer.cache, {**outer.overrides, **self.overrides}, cache_enabled)
        state = None
        if self._enabled:
            state = amp_state.AutocastState(self.fast_dtype, self.device_type, cache_enabled,
                                            scope.overrides, scope.cache if cache_enabled else None)
        self._tokens.append((amp_state.set_scope(scope), amp_state.set_state(state), scope, outer is None))
        return self

    def __exit__(self, *exc: Any) -> bool:
        scope_token, state_token, scope, outermost = self._tokens.pop()
        if outermost:
            scope.cache.clear()
        amp_state.reset_state(state_token)
        amp_state.reset_scope(scope_token)
        return False

    def __call__(self, func: Callable) -> Callable:
        settings = dict(device_type=self.device_type, dtype=self.fast_dtype, enabled=self._enabled,
                        cache_enabled=self._cache_enabled, overrides=self.overrides)

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            # A fresh region per call: the decorated function may run in
            # several threads at once or call itself.
            with autocast(**settings):
                return func(*args, **kwargs)
        return wrapper

    def __repr__(self) -> str:
        return (f"autocast(device_type={self.device_type!r}, dtype={dt.dtype_name(self.fast_dtype)}, "
                f"enabled={self._enabled}, cache_enabled={self._cache_enabled})")


def _state_applies(state: "amp_state.AutocastState | None", device_type: "str | None") -> bool:
    if state is None:
        return False
    return device_type is None or state.device_type is None or state.device_type == device_type


def is_autocast_enabled(device_type: "str | None" = None) -> bool:
    """Whether ops (on ``device_type``, or on any device when None) are autocast here."""
    return _state_applies(amp_state.current(), _check_device_type(device_type))


def get_autocast_dtype(device_type: "str | None" = None) -> np.dtype:
    """The low-precision dtype of the active region (float16 when none is active)."""
    state = amp_state.current()
    return state.dtype if _state_applies(state, _check_device_type(device_type)) else dt.float16


# The other device types PyTorch's device strings name: tinyamp has no autocast for them.
_OTHER_TORCH_DEVICE_TYPES = ("ipu", "xpu", "mkldnn", "opengl", "opencl", "ideep", "hip", "ve", "fpga", "maia",
                             "xla", "lazy", "vulkan", "mps", "meta", "hpu", "mtia", "privateuseone")


def is_autocast_available(device_type: str) -> bool:
    """Whether autocast can run on ``device_type`` (PyTorch's): True for "cpu" and "cuda".

    As in PyTorch the answer is about the device type, not about this machine:
    "cuda" is True without a GPU (an autocast region for it then warns and
    disables itself). PyTorch's other device types are False here.
    """
    if not isinstance(device_type, str):
        raise TypeError(f"is_autocast_available(): argument 'device_type' must be str, not "
                        f"{type(device_type).__name__}")
    kind = device_type.split(":", 1)[0]
    if kind in _DEVICE_TYPES:
        return True
    if kind in _OTHER_TORCH_DEVICE_TYPES:
        return False
    if not device_type:
        raise RuntimeError("is_autocast_available(): Device string must not be empty")
    raise RuntimeError(f"is_autocast_available(): expected one of cpu, cuda, {', '.join(_OTHER_TORCH_DEVICE_TYPES)} "
                       f"device type at start of device string: {device_type}")


def is_autocast_cache_enabled() -> bool:
    scope = amp_state.current_scope()
    return True if scope is None else scope.cache_enabled
