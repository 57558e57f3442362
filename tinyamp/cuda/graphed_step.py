"""``ta.cuda.make_graphed_step``: a whole training step (forward, backward, loss scaling, optimizer) replayed as
one CUDA graph.

::

    def train_step(x, y):
        optimizer.zero_grad()
        with ta.autocast("cuda", dtype=ta.float16):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        return loss

    step = ta.cuda.make_graphed_step(train_step, (x0, y0))
    for x, y in loader:
        loss = step(x, y)            # a device tensor: no synchronisation
    print(loss.item(), step.scale.item(), step.skipped_steps.item())

**Calls.** Every call copies its inputs into the step's static input buffers
(same shapes, dtypes and device as ``sample_inputs``, which only give those)
and then, by call number:

- the first ``num_warmup_iters`` calls run ``train_step`` eagerly, on a side
  stream: real steps, so the training follows eager training from the first
  call. They also make everything a step creates once (optimizer state, the
  scale, master weights, tinyamp's kernel tables) before the capture, where
  creating it would be recorded and redone at every replay;
- the next call captures ``train_step`` into a CUDA graph (``ta.cuda.graph``,
  a private memory pool) and replays it once: that replay is this call's step;
- every later call replays the graph: one launch, no Python of ``train_step``
  runs.

**What a call returns.** What ``train_step`` returns, with every tensor
detached. From the capture on, these are the graph's static outputs: the
same tensors every call, overwritten by each replay, read on the device
without a synchronisation until the user reads them (``.item()``); keep a
value with ``loss.clone()`` (a device copy). The scale of the step's
GradScaler is ``step.scale`` (a 0-d float32 device tensor, the live value)
and ``step.skipped_steps`` counts, on the device, the calls whose scaler found
an inf/nan and skipped the update (warm-up calls included).

**Gradients.** The graph writes the gradient arrays the capture made, at
every replay. With ``zero_grad()`` (``set_to_none=True``) inside the step, the
capture's backward allocates them in the graph's pool and ``p.grad`` holds
them between calls: each replay overwrites them with that step's gradients.
With ``zero_grad(set_to_none=False)`` the gradients from the warm-up stay and
the graph zeroes them, then accumulates into them. For gradient accumulation,
graph the micro-step (forward and backward, no ``zero_grad``: the graph adds
into the existing ``p.grad``), zero the gradients with
``zero_grad(set_to_none=False)`` between windows, and step the optimizer
outside the graph (or in a second graphed step). Setting ``p.grad`` to None
(``zero_grad()`` outside the step), or replacing a parameter's array or an
optimizer state tensor after the capture (``p.data = t``,
``optimizer.load_state_dict``) detaches them from the graph: the next call
raises. The step holds every such array, so the memory the graph writes stays
allocated.

**Weights written between calls.** Values written into the weights' own
arrays (``model.load_state_dict``, ``copy_`` or ``zero_()`` under ``no_grad``,
a write through ``p.data``) move their version or storage counter; before the
next replay the step converts each such weight again into the 16-bit copy the
captured forward reads instead of casting (``WeightCastCache.refresh``) and
refreshes O2's float32 masters as an eager step would (``Optimizer._refresh_masters``).

**Changes the graph cannot follow** raise at the next call, naming them: a
module's ``training`` flag (``model.eval()``: PyTorch's
``make_graphed_callables`` runs such a call eagerly; a whole step cannot be),
a parameter's ``requires_grad``, the GradScaler's growth factor, backoff
factor or growth interval, the grad mode (``no_grad`` around the call) and the
float32 matmul precision.

**Hyper-parameters.** A learning rate a scheduler changes between calls keeps
working when the optimizer's kernels read it from device memory (SGD and
Adam/AdamW on a GPU): before each replay the changed values are copied into
that memory (``Optimizer._graph_device_keys``, ``_refresh_device_hyper``). Any other
change of an optimizer hyper-parameter after the capture (``nesterov``, a
momentum turned on or off, any value an optimizer passes to its kernels as a
launch argument) raises a clear error at the next call: the graph would use
the old value.

**Errors.** A host read inside ``train_step`` (``.item()``, ``.numpy()``,
``float(loss)``, printing a tensor) raises at the capture, naming the read and
the line; so does ``GradScaler.step`` with an optimizer that cannot skip a
step on the device (``_step_supports_amp_scaling``). Inputs of another shape,
dtype or device, and an autocast state (enabled, dtype, per-op overrides)
other than the capture's, raise at the call. A failed capture leaves the step
unusable (make a new one; the model and optimizer are as before that call).
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Sequence

from .. import backend, precision
from ..amp.casting import CachedCopy, refresh_cached_copy
from ..amp.grad_scaler import GradScaler
from ..grad_mode import is_grad_enabled
from ..nn.module import Module
from ..optim.optimizer import Optimizer, _write_stamp, _written_since, register_optimizer_step_pre_hook
from ..tensor import Tensor
from ..kernels.cuda.capture import CUDAGraph, GraphPool, graph, side_stream


def make_graphed_step(train_step: Callable[..., Any], sample_inputs: Sequence[Tensor], *,
                      num_warmup_iters: int = 3, pool: "GraphPool | None" = None) -> "GraphedStep":
    """``train_step`` as a callable that runs eagerly ``num_warmup_iters`` times, then is captured once and
    replayed (see the module docstring). ``sample_inputs`` give the inputs' shapes, dtypes and device."""
    return GraphedStep(train_step, sample_inputs, num_warmup_iters=num_warmup_iters, pool=pool)


def _autocast_signature() -> tuple:
    """What decides the casts a step records: the enclosing autocast state and every per-op override.

    Outside an enabled region only the overrides a region opened inside the step
    would inherit count: ``autocast(enabled=False)`` around the step is autocast
    off, as no region at all is (a cache setting changes no value).
    """
    state, scope = precision.current_autocast(), precision.current_scope()
    inherited = () if scope is None else tuple(sorted(scope.overrides.items()))
    return (None if state is None else (state.dtype, state.device_type, state.cache_enabled,
                                        tuple(sorted(state.overrides.items()))),
            inherited if state is None else (scope.cache_enabled, inherited) if scope is not None else None,
            tuple(sorted(precision.global_overrides().items())))


def _describe_autocast(signature: tuple) -> str:
    state, scope, global_overrides = signature
    text = "autocast off" if state is None else f"autocast({state[0]} on {state[1] or 'every device'})"
    inherited = dict(scope) if state is None else {}
    overrides = {**dict(global_overrides), **inherited, **(dict(state[3]) if state is not None else {})}
    return text + (f" with overrides {overrides}" if overrides else "")


def _numerics_state() -> dict:
    """The process-wide settings besides autocast that decide what a step's kernels compute."""
    return {"grad mode": "enabled" if is_grad_enabled() else "disabled (no_grad)",
            "float32 matmul precision": precision.get_float32_matmul_precision()}


_SCALER_SETTINGS = ("_enabled", "_growth_factor", "_backoff_factor", "_growth_interval", "_hysteresis",
                    "_min_scale", "_max_scale")
_SCALER_SETTERS = {"_growth_factor": "set_growth_factor", "_backoff_factor": "set_backoff_factor",
                   "_growth_interval": "set_growth_interval"}


def _module_names(modules: list[Module]) -> dict[int, str]:
    """A readable name per module: its path from the outermost module the step called (``Sequential.1``)."""
    names: dict[int, str] = {}
    for root in modules:
        if id(root) in names:
            continue
        for sub, module in root.named_modules():
            names.setdefault(id(module), type(root).__name__ + (f".{sub}" if sub else ""))
    return names


def _detached(outputs: Any) -> Any:
    if isinstance(outputs, Tensor):
        return outputs.detach()
    if isinstance(outputs, (list, tuple)):
        items = [_detached(item) for item in outputs]
        return type(outputs)(*items) if hasattr(outputs, "_fields") else type(outputs)(items)
    if isinstance(outputs, dict):
        return {key: _detached(value) for key, value in outputs.items()}
    return outputs


def _hyper_snapshot(optimizer: Optimizer) -> list[dict]:
    """The hyper-parameters (the keys of ``defaults``) of each group, copied."""
    return [{key: copy.deepcopy(group[key]) for key in optimizer.defaults if key in group}
            for group in optimizer.param_groups]


def _storage_of(optimizer: Optimizer) -> list[tuple[str, Callable[[], Any], Any]]:
    """(what, how to find it, the array now) for each parameter, gradient and state tensor of ``optimizer``."""
    name = type(optimizer).__name__
    found = []
    for gi, group in enumerate(optimizer.param_groups):
        for pi, p in enumerate(group["params"]):
            where = f"{name}.param_groups[{gi}]['params'][{pi}] (shape {list(p.shape)})"
            found.append((f"the data of {where}", lambda p=p: p.array, p.array))
            if p.grad is not None:
                found.append((f"{where}.grad", lambda p=p: None if p.grad is None else p.grad.array, p.grad.array))
            for key, value in optimizer.state.get(p, {}).items():
                if isinstance(value, Tensor):
                    found.append((f"{name}.state[{where}][{key!r}]", lambda p=p, key=key: _state_array(optimizer, p,
                                                                                                      key), value.array))
    return found


def _state_array(optimizer: Optimizer, p: Tensor, key: str) -> Any:
    value = optimizer.state.get(p, {}).get(key)
    return value.array if isinstance(value, Tensor) else None


class GraphedStep:
    """What :func:`make_graphed_step` returns: call it with the step's inputs."""

    def __init__(self, train_step: Callable[..., Any], sample_inputs: Sequence[Tensor], *,
                 num_warmup_iters: int = 3, pool: "GraphPool | None" = None) -> None:
        if not callable(train_step):
            raise TypeError(f"make_graphed_step: train_step must be callable, got {type(train_step).__name__}")
        if isinstance(sample_inputs, Tensor):
            sample_inputs = (sample_inputs,)
        sample_inputs = tuple(sample_inputs)
        if isinstance(num_warmup_iters, bool) or not isinstance(num_warmup_iters, int) or num_warmup_iters < 1:
            raise ValueError(f"make_graphed_step: num_warmup_iters must be an integer >= 1, got {num_warmup_iters!r} "
                             "(eager steps before the capture make the optimizer state, the scale and tinyamp's "
                             "kernel tables; made during the capture, they would be made again at every replay)")
        for index, t in enumerate(sample_inputs):
            if not isinstance(t, Tensor):
                raise TypeError(f"make_graphed_step: sample_inputs[{index}] must be a Tensor, got {type(t).__name__}")
            if t.device.type != "cuda":
                raise ValueError(f"make_graphed_step: sample_inputs[{index}] (shape {list(t.shape)}, {t.dtype}) is "
                                 f"on {t.device}; a CUDA graph's inputs live on a CUDA device (move the batch "
                                 "there first: a host copy cannot be part of a graph)")
            if t.requires_grad:
                raise ValueError(f"make_graphed_step: sample_inputs[{index}] requires grad; a graphed training "
                                 "step takes data (inputs, targets), and gradients reach the parameters")
        if not sample_inputs:
            raise ValueError("make_graphed_step: sample_inputs is empty; pass the step's input tensors "
                             "(for example (x, y) of one batch)")
        devices = {t.device for t in sample_inputs}
        if len(devices) > 1:
            raise ValueError(f"make_graphed_step: sample_inputs are on several devices {sorted(map(str, devices))}; "
                             "a graph runs on one")
        self._train_step = train_step
        self.num_warmup_iters = num_warmup_iters
        self.static_inputs = tuple(Tensor._wrap(t.array.copy()) for t in sample_inputs)
        self._device = sample_inputs[0].device
        self.cuda_graph = CUDAGraph()
        self._pool = pool if pool is not None else GraphPool()
        self.calls = 0
        self._outputs: Any = None
        self._captured = False
        self._failed: "str | None" = None
        self._optimizers: dict[int, Optimizer] = {}
        self._scalers: dict[int, GradScaler] = {}
        self._modules: dict[int, Module] = {}  # every module the step called, in call order
        self._copies: dict[tuple[int, Any], list] = {}  # weight copies the capture read: [copy, write stamp]
        self._module_state: list[tuple[str, Callable[[], Any], Any, str]] = []  # (what, read it, value, advice)
        self._scaler_settings: dict[int, dict] = {}
        self._numerics: dict = {}
        self._seen_this_call: list = []
        self._autocast: tuple = ()
        self._hyper: dict[int, list[dict]] = {}
        self._frozen: dict[int, list] = {}
        # (what, how to find it now, the array it was at the capture): memory the graph reads and writes,
        # held here so it stays allocated, and compared by identity before each replay.
        self._storage: list[tuple[str, Callable[[], Any], Any]] = []
        with backend.cupy().cuda.Device(self._device.index):
            self.skipped_steps = Tensor._wrap(self._device.xp.zeros((), dtype="int64"))

    # ------------------------------------------------------------------ reading
    @property
    def scale(self) -> "Tensor | None":
        """The step's GradScaler's current scale (a 0-d float32 device tensor, live; None without a scaler)."""
        for scaler in self._scalers.values():
            if scaler.is_enabled() and scaler._scale is not None:
                return Tensor._wrap(scaler._scale)
        return None

    @property
    def captured(self) -> bool:
        """True once the step has been captured (calls now replay the graph)."""
        return self._captured

    # ------------------------------------------------------------------ calling
    def __call__(self, *inputs: Tensor) -> Any:
        if self._failed is not None:
            raise RuntimeError(f"graphed step: its capture failed, so it cannot replay ({self._failed}); "
                               "fix the step and make a new graphed step")
        self._check_inputs(inputs)
        if self._captured:
            self._check_replay_state()
            self._refresh_hyper_parameters()  # before the inputs' copies: no host work between them and the replay
        self._load(inputs)
        if self.calls < self.num_warmup_iters:
            outputs = self._run_eagerly()
        elif not self._captured:
            outputs = self._capture()
            self.cuda_graph.replay()
        else:
            self.cuda_graph.replay()
            outputs = self._outputs
        self.calls += 1
        return outputs

    def _check_inputs(self, inputs: tuple) -> None:
        if len(inputs) != len(self.static_inputs):
            raise TypeError(f"graphed step: takes {len(self.static_inputs)} input tensor(s), as its sample_inputs, "
                            f"got {len(inputs)}")
        for index, (x, static) in enumerate(zip(inputs, self.static_inputs)):
            if not isinstance(x, Tensor):
                raise TypeError(f"graphed step: input {index} must be a Tensor, got {type(x).__name__}")
            if x.shape != static.shape or x.dtype != static.dtype or x.device != static.device:
                raise ValueError(
                    f"graphed step: input {index} has shape {list(x.shape)}, dtype {x.dtype} on {x.device}, but the "
                    f"step was made for shape {list(static.shape)}, dtype {static.dtype} on {static.device}: a CUDA "
                    "graph replays fixed shapes, dtypes and devices. Make one graphed step per input signature "
                    "(or drop the last, smaller batch: DataLoader(..., drop_last=True))")

    def _load(self, inputs: tuple) -> None:
        """Copy the inputs into the static buffers (one device copy each; none for a static buffer itself):
        ``copyto``, a ``cudaMemcpyAsync`` for a contiguous input, the fewest host calls before the replay."""
        for x, static in zip(inputs, self.static_inputs):
            if x is not static and x.array is not static.array:
                self._device.xp.copyto(static.array, x.array)
                static._version[0] += 1

    def _observe_optimizer(self, optimizer: Optimizer, args: tuple, kwargs: dict) -> None:
        self._observe(optimizer)  # a global step pre-hook: every optimizer the step drives

    def _observe(self, participant: Any) -> None:
        if isinstance(participant, Module):
            self._modules.setdefault(id(participant), participant)
        elif isinstance(participant, CachedCopy):
            self._copies.setdefault((id(participant.weight), participant.dtype), [participant, None])
        elif isinstance(participant, Optimizer):
            self._optimizers.setdefault(id(participant), participant)
        elif isinstance(participant, GradScaler):
            self._scalers.setdefault(id(participant), participant)
            self._seen_this_call.append(participant)

    def _step(self) -> Any:
        """One run of ``train_step`` on the static inputs, then the skip counter (eager or captured)."""
        self._seen_this_call = []
        with backend.observing(self._observe), register_optimizer_step_pre_hook(self._observe_optimizer):
            outputs = self._train_step(*self.static_inputs)
        found = [s.last_step._found_inf for s in self._seen_this_call
                 if s.last_step is not None and s.last_step._found_inf is not None]
        if found:
            xp = self._device.xp
            skipped = found[0] > 0
            for flag in found[1:]:
                skipped = xp.logical_or(skipped, flag > 0)
            xp.add(self.skipped_steps.array, skipped, out=self.skipped_steps.array, casting="unsafe")
        return _detached(outputs)

    def _run_eagerly(self) -> Any:
        """A warm-up step: eager, on the side stream, allocating from the graph's pool.

        In the graph's pool, the capture's allocations repeat the warm-up's
        addresses, so tinyamp's kernel tables (keyed on the addresses they
        point to) are found, not uploaded (an upload cannot be captured), and
        what the warm-up makes to keep (optimizer state, gradients) never
        shares a pool with work outside the graph.
        """
        cupy = backend.cupy()
        current, side = cupy.cuda.get_current_stream(), side_stream()
        side.wait_event(current.record())  # the side stream starts after the work queued so far
        with side, cupy.cuda.using_allocator(self._pool.malloc):
            outputs = self._step()
        current.wait_event(side.record())  # and the caller's stream continues after the step
        return outputs

    def _capture(self) -> Any:
        self._autocast = _autocast_signature()
        try:
            with graph(self.cuda_graph, pool=self._pool):
                outputs = self._step()
        except BaseException as exc:
            self._failed = f"{type(exc).__name__}: {exc}"[:300]
            raise
        self._captured = True
        self._outputs = outputs
        for key, optimizer in self._optimizers.items():
            self._hyper[key] = _hyper_snapshot(optimizer)
            self._frozen[key] = [optimizer._graph_frozen(group) for group in optimizer.param_groups]
            self._storage += _storage_of(optimizer)
        self._snapshot_modules()
        for copy in self._copies.values():
            copy[1] = _write_stamp(copy[0].weight)
        for key, scaler in self._scalers.items():
            self._scaler_settings[key] = {name: getattr(scaler, name) for name in _SCALER_SETTINGS}
            for name in ("_scale", "_growth_tracker", "_hysteresis_tracker"):
                if getattr(scaler, name, None) is not None:
                    self._storage.append((f"GradScaler.{name}", lambda s=scaler, n=name: getattr(s, n),
                                          getattr(scaler, name)))
        self._numerics = _numerics_state()
        return outputs

    def _snapshot_modules(self) -> None:
        """What the replay cannot follow in the modules the step called: modes, requires_grad, arrays."""
        modules = list(self._modules.values())
        names = _module_names(modules)
        retrain = ("PyTorch's make_graphed_callables runs a module whose training flag changed eagerly; a "
                   "graphed step replays as a whole: call model.train() (or .eval()) as at the capture before "
                   "the step, or make a graphed step per mode")
        for module in modules:
            name = names[id(module)]
            self._module_state.append((f"{name}.training", lambda m=module: m.training, module.training, retrain))
            for pname, p in list(module._parameters.items()) + list(module._buffers.items()):
                if p is None:
                    continue
                where = f"{name}.{pname} (shape {list(p.shape)})"
                self._module_state.append((f"{where}.requires_grad", lambda p=p: p.requires_grad, p.requires_grad,
                                           "the graph still computes and applies its gradient as captured; "
                                           "make a new graphed step"))
                self._storage.append((f"the data of {where}", lambda p=p: p.array, p.array))
        for optimizer in self._optimizers.values():
            for gi, group in enumerate(optimizer.param_groups):
                for pi, p in enumerate(group["params"]):
                    self._module_state.append((
                        f"{type(optimizer).__name__}.param_groups[{gi}]['params'][{pi}] (shape {list(p.shape)})"
                        f".requires_grad", lambda p=p: p.requires_grad, p.requires_grad,
                        "the graph still computes and applies its gradient as captured; make a new graphed step"))

    # ------------------------------------------------------------------ replay checks
    def _check_replay_state(self) -> None:
        signature = _autocast_signature()
        if signature != self._autocast:
            raise RuntimeError(f"graphed step: called under {_describe_autocast(signature)}, but it was captured "
                               f"under {_describe_autocast(self._autocast)}; the graph replays the casts decided at "
                               "capture. Call it under the same autocast state, or make a new graphed step")
        numerics = _numerics_state()
        for key, then in self._numerics.items():
            if numerics[key] != then:
                raise RuntimeError(f"graphed step: called with {key} {numerics[key]}, but it was captured with "
                                   f"{key} {then}; the graph replays the kernels chosen then. Call it as at the "
                                   "capture, or make a new graphed step")
        for what, read, then, advice in self._module_state:
            now = read()
            if now != then:
                raise RuntimeError(f"graphed step: {what} is {now!r} since the capture ({then!r} then), and the "
                                   f"graph cannot follow: {advice}")
        for key, scaler in self._scalers.items():
            for name, then in self._scaler_settings[key].items():
                now = getattr(scaler, name)
                if now != then:
                    how = f" (GradScaler.{_SCALER_SETTERS[name]})" if name in _SCALER_SETTERS else ""
                    raise RuntimeError(f"graphed step: GradScaler.{name[1:]} changed from {then!r} to {now!r}"
                                       f"{how} after the step was captured, but the captured scale update still "
                                       f"uses {then!r}. Set it before the capture or make a new graphed step")
        for what, find, captured in self._storage:
            current = find()
            if current is not captured:
                now = "None" if current is None else "another array"
                advice = ("Do not set gradients to None outside the graphed step (zero_grad(set_to_none=False), or "
                          "let the step zero them)" if what.endswith(".grad") else
                          "Load values into the existing arrays (copy_ under no_grad), or make a new graphed step")
                raise RuntimeError(f"graphed step: {what} is {now} since the capture, but the graph keeps reading "
                                   f"and writing the array it had then. {advice}")
        for key, optimizer in self._optimizers.items():
            self._check_hyper_parameters(optimizer, self._hyper[key], self._frozen[key])

    def _check_hyper_parameters(self, optimizer: Optimizer, captured: list[dict], frozen: list) -> None:
        name = type(optimizer).__name__
        if len(optimizer.param_groups) != len(captured):
            raise RuntimeError(f"graphed step: {name} has {len(optimizer.param_groups)} parameter groups, but had "
                               f"{len(captured)} when the step was captured; make a new graphed step")
        for index, (group, before, frozen_then) in enumerate(zip(optimizer.param_groups, captured, frozen)):
            on_device = optimizer._graph_device_keys(group)
            for key, old in before.items():
                new = group.get(key)
                if new == old or key in on_device:
                    continue
                movable = (f" ({name}'s kernels read {', '.join(on_device)} from device memory, so those may change)"
                           if on_device else "")
                raise RuntimeError(
                    f"graphed step: {name}.param_groups[{index}][{key!r}] changed from {old!r} to {new!r} after "
                    f"the step was captured, but the captured update still uses {old!r}{movable}. Set it before "
                    "the capture or make a new graphed step")
            frozen_now = optimizer._graph_frozen(group)
            if frozen_now != frozen_then:
                raise RuntimeError(
                    f"graphed step: {name}.param_groups[{index}] changed in a way the captured kernels cannot follow "
                    f"({frozen_then!r} at capture, {frozen_now!r} now); make a new graphed step")

    def _refresh_hyper_parameters(self) -> None:
        """Before a replay, bring what the graph reads but does not derive up to date, on the device.

        Changed device-resident hyper-parameters (a scheduler's learning rate);
        float32 masters of O2 parameters written since the last step (as the
        eager step's ``_master`` does); and the 16-bit weight copies the
        captured forward reads instead of casting, for weights written since
        (``load_state_dict``, ``copy_`` or ``zero_()`` under ``no_grad``, a write
        through ``.data``: each moves the weight's version or storage counter).
        """
        for optimizer in self._optimizers.values():
            optimizer._refresh_device_hyper()
            optimizer._refresh_masters()
        for copy in self._copies.values():
            if _written_since(copy[1], copy[0].weight):
                refresh_cached_copy(copy[0])
                copy[1] = _write_stamp(copy[0].weight)
