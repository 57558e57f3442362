"""``ta.amp.fp8_autocast``: the region in which ``nn.Linear`` runs its three GEMMs in fp8.

Transformer Engine's spelling, so TE-style scripts port::

    with ta.autocast(dtype=ta.bfloat16):                 # optional: the 16-bit rules for everything else
        with ta.amp.fp8_autocast(enabled=True, fp8_recipe=ta.amp.recipe.DelayedScaling()):
            y = model(x)
    loss_fn(y).backward()                                # outside the region, as with TE

Inside the region each ``nn.Linear`` that ``module_filter_fn`` admits (all, by
default; :func:`exclude_first_last` keeps a model's first and last Linear in
16 bits) quantises its input and weight with ``Fp8Cast`` nodes carrying the
layer's quantisers (made on first use from the recipe, kept on the module
and in its ``state_dict``), and ``Fp8Linear`` multiplies them; its backward
quantises the output gradient with the layer's gradient quantiser. Every other
op keeps the 16-bit autocast rules (or float32 outside a 16-bit region). The
operands stand for values of the 16-bit region's dtype (else the input's).

The region owns the **fp8 weight cache**: a weight used twice in one region is
quantised once; the entry holds the codes and their scale together (one
``Fp8Array``), keyed on the weight's identity, version and array and on the
quantiser, and it is emptied at the region's exit.

Delayed scaling's state moves at region boundaries, on the device: the forward
quantisers used in the region at its exit, the gradient quantisers used by a
backward since then at the next region's entry (``recipe.PENDING_BACKWARD``).
"""

from __future__ import annotations

import contextlib
import functools
import weakref
from contextvars import ContextVar
from typing import Any, Callable

import numpy as np

from .. import backend
from .. import precision
from ..ops.cast import Fp8Cast
from ..ops.fp8_linalg import fp8_linear
from . import recipe as recipes
from .autocast import regions_are_disabled


# A recipe every fp8 region entered uses instead of its own (the shadow run's "what if this step used another
# recipe"); read once per region entered.
_recipe_override: ContextVar["recipes.Recipe | None"] = ContextVar("tinyamp_fp8_recipe_override", default=None)


@contextlib.contextmanager
def recipe_override(recipe: recipes.Recipe) -> Any:
    """Inside: every enabled ``fp8_autocast`` region entered runs ``recipe`` instead of its own."""
    if not isinstance(recipe, recipes.Recipe):
        raise TypeError(f"recipe_override: expected a ta.amp.recipe recipe, got {type(recipe).__name__}")
    token = _recipe_override.set(recipe)
    try:
        yield
    finally:
        _recipe_override.reset(token)


class Fp8Region:
    """The state of one fp8 region: its recipe, module filter, weight cache and forward quantisers used."""

    def __init__(self, recipe: recipes.Recipe, module_filter_fn: "Callable[[Any], bool] | None") -> None:
        self.recipe, self.module_filter_fn = recipe, module_filter_fn
        self.cache: dict[int, tuple] = {}   # id(weight) -> (weakref, version, array, quantizer, Fp8Array)
        self.touched: dict[int, Any] = {}   # delayed forward quantisers used here (updated at exit)

    def quantizers(self, module: Any) -> dict:
        """The module's quantisers for this recipe (made on first use; new ones when the recipe changes)."""
        meta = module.__dict__.get("_fp8_meta")
        if meta is None or type(meta[0]) is not type(self.recipe) or meta[0] != self.recipe:
            meta = (self.recipe, {role: self.recipe.make_quantizer(role) for role in recipes.ROLES})
            for quantizer in meta[1].values():
                quantizer.layer = f"{type(module).__name__}({module.in_features}, {module.out_features})"
            object.__setattr__(module, "_fp8_meta", meta)
            loaded = module.__dict__.pop("_fp8_loaded", None)  # a checkpoint's state, loaded before this run
            if loaded is not None:
                module.set_extra_state(loaded)
        return meta[1]

    def linear(self, module: Any, x: Any) -> Any:
        """``module(x)`` with fp8 GEMMs, or None when the filter keeps this module in 16 bits."""
        if self.module_filter_fn is not None and not self.module_filter_fn(module):
            return None
        q = self.quantizers(module)
        state = precision.current_autocast()
        applies = state is not None and (state.device_type is None or state.device_type == x.device.type)
        nominal = state.dtype if applies else x.dtype
        xq = Fp8Cast(q["input"], nominal, self)(x)
        wq = self.weight(module.weight, q["weight"], nominal)
        return fp8_linear(xq, wq, module.bias, q["grad_output"])

    def weight(self, weight: Any, quantizer: Any, nominal: np.dtype) -> Any:
        """The weight's Fp8Cast node: its forward from the cache when this region already quantised it."""
        entry = self.cache.get(id(weight))
        if entry is not None and entry[0]() is weight and entry[1] == weight._version[0] \
                and entry[2] is weight.array and entry[3] is quantizer and entry[4].dtype == nominal:
            return Fp8Cast(quantizer, nominal, self, cached=_held(entry[4]))(weight)
        out = Fp8Cast(quantizer, nominal, self)(weight)
        self.cache[id(weight)] = (weakref.ref(weight), weight._version[0], weight.array, quantizer, _held(out.array))
        return out

    def exit(self) -> None:
        for quantizer in self.touched.values():
            quantizer.update()
        self.touched.clear()
        self.cache.clear()


def _held(q: Any) -> Any:
    """A cached fp8 weight a CUDA graph capture reads is held by the graph (the cache forgets it at exit)."""
    capture = backend.current_capture()
    if capture is not None:
        for array in (q.data, q.scale_inv):
            capture.keep_alive(array)
    return q


class fp8_autocast:
    """Run ``nn.Linear`` GEMMs in fp8 inside the region (Transformer Engine's ``fp8_autocast``).

    ``fp8_recipe``: a ``ta.amp.recipe`` recipe (default ``DelayedScaling()``,
    TE's default). ``module_filter_fn(module) -> bool``: which Linear layers
    take fp8 (all by default). ``calibrating`` and ``fp8_group`` are TE's
    arguments for calibration and the data-parallel amax all-reduce, which this
    single-process emulation does not offer: they must stay at their defaults.
    """

    def __init__(self, enabled: bool = True, calibrating: bool = False, fp8_recipe: "recipes.Recipe | None" = None,
                 fp8_group: Any = None, *, module_filter_fn: "Callable[[Any], bool] | None" = None) -> None:
        if not isinstance(enabled, (bool, np.bool_)):
            raise TypeError(f"fp8_autocast: enabled must be a bool, got {type(enabled).__name__}")
        if calibrating:
            raise ValueError("fp8_autocast: calibrating=True is not supported (it collects amaxes without fp8 "
                             "GEMMs in Transformer Engine); run the region with enabled=True instead")
        if fp8_group is not None:
            raise ValueError("fp8_autocast: fp8_group (the amax all-reduce group) is not supported: tinyamp's "
                             "fp8 runs in one process")
        if fp8_recipe is not None and not isinstance(fp8_recipe, recipes.Recipe):
            raise TypeError(f"fp8_autocast: fp8_recipe must be a ta.amp.recipe recipe, got "
                            f"{type(fp8_recipe).__name__}")
        if module_filter_fn is not None and not callable(module_filter_fn):
            raise TypeError("fp8_autocast: module_filter_fn must be callable (module -> bool)")
        self.enabled = bool(enabled)
        self.fp8_recipe = fp8_recipe if fp8_recipe is not None else recipes.DelayedScaling()
        self.module_filter_fn = module_filter_fn
        self._tokens: list = []

    def __enter__(self) -> "fp8_autocast":
        region = None
        if self.enabled and not regions_are_disabled():  # the shadow run's float32 twin: no fp8 either
            recipes.update_pending_backward()
            region = Fp8Region(_recipe_override.get() or self.fp8_recipe, self.module_filter_fn)
        self._tokens.append((precision.set_fp8(region), region))
        return self

    def __exit__(self, *exc: Any) -> bool:
        token, region = self._tokens.pop()
        precision.reset_fp8(token)
        if region is not None:
            region.exit()
        return False

    def __call__(self, func: Callable) -> Callable:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with fp8_autocast(self.enabled, False, self.fp8_recipe, module_filter_fn=self.module_filter_fn):
                return func(*args, **kwargs)
        return wrapper

    def __repr__(self) -> str:
        return f"fp8_autocast(enabled={self.enabled}, fp8_recipe={self.fp8_recipe!r})"


def is_fp8_enabled() -> bool:
    """Whether an enabled fp8 region is in force here."""
    return precision.current_fp8() is not None


def exclude_first_last(model: Any, first: int = 1, last: int = 1) -> "Callable[[Any], bool]":
    """A ``module_filter_fn`` that keeps the model's first ``first`` and last ``last`` Linear layers in 16 bits
    (Megatron's ``--first-last-layers-bf16``, torchao's usual filter), in ``model.modules()`` order."""
    from_model = [m for m in model.modules() if getattr(m, "fp8_capable", False)]
    kept = {id(m) for m in from_model[:first]} | {id(m) for m in from_model[len(from_model) - last:]}
    return lambda module: id(module) not in kept


__all__ = ["Fp8Region", "exclude_first_last", "fp8_autocast", "is_fp8_enabled", "recipe_override"]
