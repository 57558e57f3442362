"""autocast: the context manager/decorator that turns mixed precision on for a region.

``with ta.amp.autocast(): ...`` installs an :class:`~tinyamp.precision.AutocastState`
for the region; ``Function.__call__`` reads it on every op and inserts recorded
casts (:mod:`tinyamp.amp.casting`) as the op's tag asks (docs/ARCHITECTURE.md,
"Where each AMP decision is made"). ``custom_fwd``/``custom_bwd`` for
user-defined Functions are in :mod:`tinyamp.amp.custom_fwd`; the global per-op
overrides in :mod:`tinyamp.amp.op_table`.

Regions form a stack kept in context variables (so per thread): an inner region
(``enabled=False``, another dtype, more overrides) is undone on exit. The
weight-cast cache (``casting.WEIGHT_CACHE``) lives while the outermost region
does: its exit empties it, as PyTorch's does, so a weight changed between
regions by any route is converted afresh (a GPU entry an optimizer step
refreshed is kept, unless a write through ``.data`` happened since, which the
outermost entry checks).
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from contextvars import ContextVar
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from .. import backend
from .. import dtypes as dt
from .. import precision
from ..precision import FP32, LOWER, NEUTRAL, PROMOTE, Precision, as_precision
from .casting import WEIGHT_CACHE
from .op_table import check_op_name

_DEVICE_TYPES = ("cpu", "cuda")

# True while every autocast region entered is made disabled (the float32 twin of
# ta.amp.shadow_run runs the user's own code, autocast regions included, without
# lowering anything). Read once per region entered, never per op.
_regions_disabled: ContextVar[bool] = ContextVar("tinyamp_autocast_regions_disabled", default=False)


def regions_are_disabled() -> bool:
    """Whether every region entered now is made disabled (the shadow run's twin): ``fp8_autocast`` reads it too."""
    return _regions_disabled.get()


@contextlib.contextmanager
def regions_disabled() -> Any:
    """Inside: every ``autocast`` (and ``fp8_autocast``) region entered behaves as ``enabled=False``."""
    token = _regions_disabled.set(True)
    try:
        yield
    finally:
        _regions_disabled.reset(token)


# --------------------------------------------------------------------------
# Checking the arguments
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


def _region_overrides(overrides: "Mapping[str, Any] | None", sets: dict[Precision, Iterable[str] | None]) -> dict:
    """Validate a region's ``overrides=`` mapping and ``lower_ops=``-style sets."""
    result: dict[str, Precision] = {}
    for name, tag in (overrides or {}).items():
        result[check_op_name(name, "autocast(overrides=...)")] = as_precision(tag)
    for tag, names in sets.items():
        if names is None:
            continue
        if isinstance(names, str):
            raise TypeError(f"autocast({tag.value}_ops=...): expected a set of op names, got the string "
                            f"{names!r} (write {{{names!r}}})")
        for name in names:
            check_op_name(name, f"autocast({tag.value}_ops=...)")
            if name in result and result[name] is not tag:
                raise ValueError(f"autocast: op {name!r} is given two tags, {result[name].name} and {tag.name}")
            result[name] = tag
    return result


# --------------------------------------------------------------------------
# autocast
# --------------------------------------------------------------------------

# The states of regions without overrides, one per (dtype, device type, cache on, cache): nothing
# writes a state once made, so every such region (a training loop enters one per step) installs the
# same object instead of building a new one.
_PLAIN_STATES: dict = {}


def _region_state(dtype: np.dtype, device_type: "str | None", cache_enabled: bool,
                  scope: precision.AutocastScope) -> precision.AutocastState:
    """The state an enabled region installs: its settings, the scope's overrides and cache."""
    cache = scope.cache if cache_enabled else None
    if scope.overrides:
        return precision.AutocastState(dtype, device_type, cache_enabled, scope.overrides, cache)
    key = (dtype, device_type, cache_enabled, id(cache))
    state = _PLAIN_STATES.get(key)
    if state is None or state.cache is not cache:
        state = _PLAIN_STATES[key] = precision.AutocastState(dtype, device_type, cache_enabled, {}, cache)
    return state


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
        if self._enabled and self.device_type == "cuda" and not backend.cuda_available():
            warnings.warn("User provided device_type of 'cuda', but CUDA is not available. Disabling "
                          "(use device_type='cpu' or None to autocast CPU ops)", stacklevel=2)
            self._enabled = False
        self._tokens: list[tuple[Any, Any, Any, bool]] = []
        self._errstates: list = []  # per entry: NumPy's errstate of an outermost region, else None

    @property
    def enabled(self) -> bool:
        return self._enabled

    def __enter__(self) -> "autocast":
        outer = precision.current_scope()
        cache_enabled = (outer.cache_enabled if outer is not None else True) \
            if self._cache_enabled is None else self._cache_enabled
        if outer is None:
            WEIGHT_CACHE.forget_aliased_writes()
            scope = precision.AutocastScope(WEIGHT_CACHE, dict(self.overrides), cache_enabled)
        else:
            scope = precision.AutocastScope(outer.cache, {**outer.overrides, **self.overrides}, cache_enabled)
        state = None
        if self._enabled and not _regions_disabled.get():
            state = _region_state(self.fast_dtype, self.device_type, cache_enabled, scope)
        self._tokens.append((precision.set_scope(scope), precision.set_autocast(state), scope, outer is None))
        # Inf and nan are expected in a low-precision forward (the scaler deals with
        # them): NumPy's floating-point warnings are off for the whole region, as
        # PyTorch prints none. Set once by the outermost region, not per op;
        # nested regions inherit it.
        quiet = np.errstate(all="ignore") if outer is None else None
        if quiet is not None:
            quiet.__enter__()
        self._errstates.append(quiet)
        return self

    def __exit__(self, *exc: Any) -> bool:
        scope_token, state_token, scope, outermost = self._tokens.pop()
        precision.reset_autocast(state_token)
        precision.reset_scope(scope_token)
        if outermost:
            scope.cache.end_region()
        quiet = self._errstates.pop()
        if quiet is not None:
            quiet.__exit__(*exc)
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


def _state_applies(state: "precision.AutocastState | None", device_type: "str | None") -> bool:
    if state is None:
        return False
    return device_type is None or state.device_type is None or state.device_type == device_type


def is_autocast_enabled(device_type: "str | None" = None) -> bool:
    """Whether ops (on ``device_type``, or on any device when None) are autocast here."""
    return _state_applies(precision.current_autocast(), _check_device_type(device_type))


def get_autocast_dtype(device_type: "str | None" = None) -> np.dtype:
    """The low-precision dtype of the active region (float16 when none is active)."""
    state = precision.current_autocast()
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
    scope = precision.current_scope()
    return True if scope is None else scope.cache_enabled
