"""GradScaler: dynamic loss scaling with PyTorch's semantics, decided on the device.

``scaler.scale(loss).backward(); scaler.step(opt); scaler.update()`` as in PyTorch,
plus hysteresis, ``min_scale``/``max_scale``, a record of the last step
(``scaler.last_step``) and automatic disabling under bfloat16.

Where the values live. The scale, the growth tracker, the hysteresis tracker and
every ``found_inf`` are 0-d device arrays (float32, int32, int32, float32) on the
device of the first tensor passed to ``scale()``; NumPy arrays *are* the device
arrays on the CPU. ``unscale_`` makes one ``unscale_group`` call per device
holding gradients (on NumPy a loop over its tensors; on a GPU one fused kernel
per dtype pair) that multiplies by ``1/scale`` (computed in float64,
stored float32: exact for powers of two) and records whether any result is
inf/nan, without reading it; ``update``
runs the scale rule on those arrays; tinyamp's optimizers take ``found_inf`` as an
array and mask their update (see ``tinyamp/optim/optimizer.py``). Nothing in a
training step reads a device value on the host.

Host synchronisations (``ta.cuda.sync_count()``) counted here, on the CPU too,
one per device value read on the host: ``get_scale()`` (once initialised),
``_get_growth_tracker()``, ``_get_hysteresis_tracker()``, ``state_dict()`` (three),
each property read of ``last_step``, and ``step()`` with an optimizer that does
not implement the masked-update contract (one per device holding gradients: the
host must know whether to call ``optimizer.step``). A step with tinyamp's
optimizers counts zero.

The per-device math lives in ``tinyamp/kernels/loss_scale.py`` (``unscale_group``,
``update_scale``), so fused GPU kernels can replace it one for one. The settings'
checks, getters and setters, ``state_dict`` and ``update(new_scale)`` are in
``scaler_settings.py`` (``ScalerSettings``, this class's base).
"""

from __future__ import annotations

import enum
import warnings
from collections import defaultdict
from typing import Any, Callable

import numpy as np

from .. import backend
from .. import dtypes as dt
from .. import precision
from ..autograd.graph import reachable_nodes
from ..kernels.loss_scale import unscale_group, update_scale
from ..ops.elementwise import ScaleBy
from ..tensor import Tensor
from .scaler_settings import ScalerSettings, _check_int, _check_positive
from .scaler_step import ScalerStep, read_host


class OptState(enum.Enum):
    """Where one optimizer is in the current iteration (reset by ``update()``)."""

    READY = 0
    UNSCALED = 1
    STEPPED = 2


_HOST_ZERO = np.zeros((), dtype=np.float32)  # copied into each step's CPU found_inf flag
# Called with {device: found_inf} after unscaling, before the optimizer step: the process group
# (porting/distributed/found_inf.py) adds its all-reduce here, so the scaler needs no distributed import.
FOUND_INF_REDUCERS: list[Callable[[dict], None]] = []


def _refresh_per_optimizer_state() -> dict:
    return {"stage": OptState.READY, "found_inf_per_device": {}}


# ------------------------------------------------------------ helpers
def _flatten(outputs: Any, found: list) -> None:
    if isinstance(outputs, Tensor):
        found.append(outputs)
    elif isinstance(outputs, (list, tuple)):
        for item in outputs:
            _flatten(item, found)


def _computed_in_bfloat16(outputs: Any) -> bool:
    """True when any output, or any tensor an op on the way to them read, is bfloat16."""
    tensors: list = []
    _flatten(outputs, tensors)
    if any(t.dtype == dt.bfloat16 for t in tensors):
        return True
    return any(dt.bfloat16 in node.input_dtypes for node in reachable_nodes(tensors))








class GradScaler(ScalerSettings):
    """Dynamic loss scaling (``torch.amp.GradScaler``) with hysteresis and scale bounds.

    The signature is ``torch.amp.GradScaler``'s: ``GradScaler("cuda", init_scale=...)``
    or ``GradScaler("cpu", 2.0 ** 10)``. The scale lives on the device of the
    outputs you scale, so ``device`` is otherwise informational; as in PyTorch,
    ``GradScaler("cuda")`` on a machine without CUDA warns and disables itself.
    Under bfloat16 (autocast or a bfloat16 graph) it warns once that scaling is not
    needed and keeps scaling, as PyTorch's does, so its state and ``state_dict``
    are PyTorch's; ``auto_disable_bf16=True`` switches it off there instead, and
    ``auto_disable_bf16=False`` keeps scaling without the warning.
    """

    def __init__(self, device: str | None = None, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000, enabled: bool = True,
                 hysteresis: int = 1, min_scale: float | None = None, max_scale: float | None = None, *,
                 auto_disable_bf16: "bool | None" = None) -> None:
        if device is not None and not isinstance(device, str):
            # torch.cuda.amp.GradScaler(65536.0) took init_scale first; torch.amp's takes the device.
            raise TypeError(f"GradScaler: the first argument is the device ('cuda' or 'cpu'), as in "
                            f"torch.amp.GradScaler, got {device!r}; pass init_scale={device!r} by keyword")
        self.device = device
        self._enabled = bool(enabled)
        if device == "cuda" and self._enabled and not backend.cuda_available():
            # PyTorch's behaviour and words: a CUDA scaler on a machine without CUDA turns itself off.
            warnings.warn("torch.cuda.amp.GradScaler is enabled, but CUDA is not available.  Disabling.",
                          UserWarning, stacklevel=2)
            self._enabled = False
        self._init_scale = _check_positive("init_scale", init_scale)
        self._check_growth_factor(growth_factor)
        self._check_backoff_factor(backoff_factor)
        self._growth_factor = float(growth_factor)
        self._backoff_factor = float(backoff_factor)
        self._growth_interval = _check_int("growth_interval", growth_interval)
        self._hysteresis = _check_int("hysteresis", hysteresis)
        # Bounds are kept rounded to float32, the dtype the scale is stored in.
        self._min_scale = None if min_scale is None else float(np.float32(_check_positive("min_scale", min_scale)))
        self._max_scale = None if max_scale is None else float(np.float32(_check_positive("max_scale", max_scale)))
        if self._min_scale is not None and self._min_scale > self._init_scale:
            raise ValueError(f"GradScaler: min_scale ({min_scale}) must be <= init_scale ({init_scale})")
        if self._max_scale is not None and self._max_scale < self._init_scale:
            raise ValueError(f"GradScaler: max_scale ({max_scale}) must be >= init_scale ({init_scale})")
        self._auto_disable_bf16 = bool(auto_disable_bf16)
        self._bf16_seen = auto_disable_bf16 is False  # asked to keep scaling: nothing to look for or say
        self._init_growth_tracker = 0
        self._init_hysteresis_tracker = self._hysteresis
        self._scale: Any = None
        self._scale_device: "backend.Device | None" = None
        self._scale_wrapper: "Tensor | None" = None
        self._growth_tracker: Any = None
        self._hysteresis_tracker: Any = None
        self._per_optimizer_states: defaultdict = defaultdict(_refresh_per_optimizer_state)
        self.last_step: ScalerStep | None = None

    # ------------------------------------------------------------ scale
    def scale(self, outputs: Any) -> Any:
        """``outputs * scale``: a Tensor, or nested lists/tuples of Tensors (types kept)."""
        if not self._enabled:
            return outputs
        self._maybe_disable_for_bfloat16(outputs)
        if not self._enabled:
            return outputs
        with np.errstate(all="ignore"):  # an inf loss (or loss * scale past float32) is the scaler's to handle
            if isinstance(outputs, Tensor):
                return self._scaled(outputs, None)
            return self._scale_nested(outputs, {})

    def _scaled(self, value: Tensor, moved: "dict | None") -> Tensor:
        """``value * scale``: a float32 loss on the scale's device (the usual case) through the light
        ``scale_by`` node (one input recorded, its backward on arrays); anything else through ``mul``,
        which promotes (a float16 output times the float32 scale is float32)."""
        scale = self._scale_on(value.device, moved)
        if value.array.dtype == scale.array.dtype:
            return ScaleBy(scale.array)(value)
        return value * scale

    def _scale_nested(self, value: Any, moved: dict) -> Any:
        if isinstance(value, Tensor):
            return self._scaled(value, moved)
        if isinstance(value, (list, tuple)):
            items = [self._scale_nested(item, moved) for item in value]
            return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
        raise ValueError(f"outputs must be a Tensor or an iterable of Tensors: GradScaler.scale takes a "
                         f"Tensor or nested lists/tuples of Tensors, got {type(value).__name__}")

    def _scale_on(self, dev: backend.Device, moved: "dict | None") -> Tensor:
        """The scale as a Tensor on ``dev``: on its own device one kept wrapper (update rewrites its
        array in place); on another device a copy, made once per ``scale()`` call (``moved``)."""
        if self._scale is None:
            self._lazy_init(dev)
        if dev is self._scale_device or dev == self._scale_device:  # devices are interned: identity first
            return self._scale_wrapper
        if moved is None:
            return Tensor._wrap(backend.to_device(self._scale, dev))
        if dev not in moved:
            moved[dev] = Tensor._wrap(backend.to_device(self._scale, dev))
        return moved[dev]

    def _lazy_init(self, dev: backend.Device) -> None:
        xp = dev.xp
        self._scale = xp.full((), self._init_scale, dtype=np.float32)
        self._scale_device = dev
        self._scale_wrapper = Tensor._wrap(self._scale)  # what scale() multiplies by, kept
        self._growth_tracker = xp.full((), self._init_growth_tracker, dtype=np.int32)
        self._hysteresis_tracker = xp.full((), self._init_hysteresis_tracker, dtype=np.int32)

    def _maybe_disable_for_bfloat16(self, outputs: Any) -> None:
        if self._bf16_seen:
            return
        state = precision.current_autocast()
        reason = None
        if state is not None and state.dtype == dt.bfloat16:
            reason = "scale() was called inside autocast(dtype=bfloat16)"
        elif self._scale is None and _computed_in_bfloat16(outputs):
            # Looked at once, on the first scale(): the usual loop calls scale()
            # after leaving the autocast region, so the graph is the witness.
            reason = "the outputs were computed from bfloat16 tensors (bfloat16 autocast or model)"
        if reason is None:
            return
        self._bf16_seen = True  # warned once per scaler
        if self._auto_disable_bf16:
            warnings.warn(f"GradScaler: {reason}. bfloat16 has float32's exponent range, so loss scaling "
                          f"is unnecessary and would only cost time and skipped steps; disabling the scaler "
                          f"(auto_disable_bf16=True).", UserWarning, stacklevel=3)
            self._enabled = False
        else:
            warnings.warn(f"GradScaler: {reason}. bfloat16 has float32's exponent range, so loss scaling "
                          f"is unnecessary and only costs time and skipped steps; the scaler keeps scaling, as "
                          f"PyTorch's does (auto_disable_bf16=True switches it off here, False keeps it quietly).",
                          UserWarning, stacklevel=3)

    @staticmethod
    def _no_scale_yet(funcname: str) -> RuntimeError:
        """PyTorch's error for unscale_/step/update before the first scale() (the scale does not exist yet)."""
        return RuntimeError(f"Attempted {funcname} but _scale is None.  This may indicate your script did "
                            f"not use scaler.scale(loss or outputs) earlier in the iteration.")

    # ------------------------------------------------------------ unscale_
    def unscale_(self, optimizer: Any) -> None:
        """Divide the optimizer's gradients by the scale, in place, and record inf/nan on the device."""
        if not self._enabled:
            return
        if self._scale is None:
            raise self._no_scale_yet("unscale_")
        state = self._per_optimizer_states[id(optimizer)]
        if state["stage"] is OptState.UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since the last update().")
        if state["stage"] is OptState.STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        state["found_inf_per_device"] = self._unscale_grads_(optimizer)
        state["stage"] = OptState.UNSCALED

    def _unscale_grads_(self, optimizer: Any) -> dict:
        """One ``unscale_group`` call per device; returns {device: found_inf array}.

        ``unscale_group`` takes a device's gradients of every dtype (a GPU launches
        one fused kernel per dtype pair), so they are gathered by device only.
        """
        master_of = getattr(optimizer, "_master", None)
        per_device: dict = {}     # device -> (grads, outs, tensors written): the rest
        refused = []
        for group in optimizer.param_groups:
            # Only a group that keeps master weights can hold a parameter with one (the optimizer's
            # _master decides which): the usual O1 group skips the per-parameter call.
            masters = master_of is not None and group.get("master_weights")
            for p in group["params"]:
                grad = p.grad
                if grad is None:
                    continue
                data = grad.array
                master = master_of(p, group) if masters else None
                if master is not None:
                    if master.grad is None:
                        master.grad = Tensor._wrap(p.device.xp.empty(p.shape, dtype=np.float32))
                    grad = master.grad
                elif data.dtype == dt.float16:
                    refused.append(p)
                    continue
                dev = backend.CPU if type(data) is np.ndarray else backend.device_of(data)
                bucket = per_device.get(dev)
                if bucket is None:
                    bucket = per_device[dev] = ([], [], [])
                bucket[0].append(data)
                bucket[1].append(grad.array)
                bucket[2].append(grad)
        if refused:
            self._refuse_fp16_grads(optimizer, refused)
        found_per_device: dict = {}
        moved: dict = {}  # the scale copied to another device, once per device
        for dev, (grads, outs, written) in per_device.items():
            xp = dev.xp
            found = found_per_device.get(dev)
            if found is None:
                found = found_per_device[dev] = _HOST_ZERO.copy() if dev is backend.CPU else xp.zeros((), np.float32)
            unscale_group(xp, grads, outs, self._scale_on(dev, moved).array, found)
            for t in written:
                t._version[0] += 1
        for reduce in FOUND_INF_REDUCERS:  # data parallel: one rank's overflow skips the step everywhere
            reduce(found_per_device)
        return found_per_device

    @staticmethod
    def _refuse_fp16_grads(optimizer: Any, refused: list) -> None:
        where = [f"param_groups[{gi}]['params'][{pi}] (shape {list(p.shape)})"
                 for gi, group in enumerate(optimizer.param_groups)
                 for pi, p in enumerate(group["params"]) if any(p is q for q in refused)]
        raise ValueError(
            f"Attempting to unscale FP16 gradients. GradScaler.unscale_: {len(refused)} float16 parameter(s) "
            f"have float16 gradients and no float32 master copy: {', '.join(where)}. Unscaling in float16 "
            f"would flush small gradients to zero. Build the optimizer with master_weights=True (for example "
            f"ta.optim.Adam(model.parameters(), master_weights=True)) to keep float32 master weights, or keep "
            f"the parameters in float32 and use autocast (O1).")

    # ------------------------------------------------------------ step
    def step(self, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
        """Unscale if needed, then step unless inf/nan was found; returns ``optimizer.step``'s value.

        tinyamp's optimizers get ``found_inf`` as a device array and mask their
        update (no host sync); any other optimizer is stepped after a host check.
        """
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs or (args and callable(args[0])):
            raise RuntimeError("Closure use is not currently supported if GradScaler is enabled.")
        if self._scale is None:
            raise self._no_scale_yet("step")
        state = self._per_optimizer_states[id(optimizer)]
        if state["stage"] is OptState.STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if state["stage"] is OptState.READY:  # unscale_(optimizer), its checks made above
            state["found_inf_per_device"] = found = self._unscale_grads_(optimizer)
            state["stage"] = OptState.UNSCALED
        else:
            found = state["found_inf_per_device"]
        if len(found) == 0:
            raise RuntimeError("No inf checks were recorded for this optimizer.")
        if getattr(optimizer, "_step_supports_amp_scaling", False):
            # One device (the usual step): its flag as it is; else the flags summed on the first device.
            if len(found) == 1:
                (total,) = found.values()
            else:
                total = self._sum_found(found.values(), next(iter(found)))
            retval = optimizer.step(*args, found_inf=total, **kwargs)  # the contract takes the array as it is
        else:
            backend.refuse_in_capture(
                f"GradScaler.step({type(optimizer).__name__})",
                f"{type(optimizer).__name__} does not implement the device-side skip contract "
                "(_step_supports_amp_scaling: step(found_inf=...) masks its own update), so the host would have to "
                "read found_inf to decide whether to step. Use a tinyamp optimizer (SGD, Adam, AdamW, ...) or "
                "implement the contract")
            total = sum(read_host(value) for value in found.values())
            retval = optimizer.step(*args, **kwargs) if total == 0 else None
        state["stage"] = OptState.STEPPED
        return retval

    @staticmethod
    def _sum_found(values: Any, dev: backend.Device) -> Any:
        """The found_inf flags summed on ``dev`` (the flag itself when there is one: the usual step)."""
        total = None
        for value in values:
            if type(value) is not np.ndarray or dev is not backend.CPU:  # a CPU flag for a CPU scale stays
                value = backend.to_device(value, dev)
            total = value if total is None else total + value
        return total

    def found_inf(self, optimizer: Any) -> Tensor:
        """This iteration's inf/nan flag for ``optimizer`` (a 0-d float32 device Tensor; reading it syncs)."""
        if not self._enabled:
            return Tensor._wrap(np.zeros((), dtype=np.float32))
        state = self._per_optimizer_states.get(id(optimizer))
        if state is None or not state["found_inf_per_device"]:
            raise RuntimeError("found_inf: no inf checks were recorded for this optimizer since the last "
                               "update(); call scaler.unscale_(optimizer) or scaler.step(optimizer) first")
        found = state["found_inf_per_device"]
        return Tensor._wrap(self._sum_found(found.values(), next(iter(found))).copy())

    # ------------------------------------------------------------ update
    def update(self, new_scale: "float | Tensor | None" = None) -> None:
        """Update the scale from every optimizer stepped since the last update, or set it."""
        if not self._enabled:
            self.last_step = ScalerStep(None, None)
            return
        if self._scale is None:
            raise self._no_scale_yet("update")
        dev = self._scale_device
        xp = np if dev is backend.CPU else dev.xp
        found = [v for s in self._per_optimizer_states.values() for v in s["found_inf_per_device"].values()]
        combined = self._sum_found(found, dev)
        if new_scale is not None:
            scales = xp.empty((2,), dtype=np.float32)  # the scale before and after, kept by last_step
            scales[0] = self._scale
            self._set_scale(new_scale, xp, dev)
            scales[1] = self._scale
        else:
            if combined is None:
                raise RuntimeError("No inf checks were recorded prior to update.")
            # On a GPU the rule's kernel writes the scale before and after into a fresh pair (kept by
            # last_step); on the CPU the rule hands them back as Python floats (no array to fill).
            record = None if xp is np else xp.empty((2,), dtype=np.float32)
            scales = update_scale(xp, self._scale, self._growth_tracker, self._hysteresis_tracker, combined,
                                  growth_factor=self._growth_factor, backoff_factor=self._backoff_factor,
                                  growth_interval=self._growth_interval, hysteresis=self._hysteresis,
                                  min_scale=self._min_scale, max_scale=self._max_scale, record=record)
            if record is not None:
                scales = record
        self.last_step = ScalerStep(combined, scales)
        self._per_optimizer_states.clear()  # nothing else holds the mapping: emptied, not rebuilt
        backend.observe(self)  # a graphed step counts this update's skipped step (tinyamp/cuda/graphed_step.py)


AmpScaler = GradScaler  # the name the original proposal used
