"""The Optimizer base: parameter groups, per-parameter state, master weights, state_dict.

Subclasses (``SGD``, ``Adam``, ``RMSprop``, ...) write one ``_update_group`` that works on
raw arrays; everything they share lives here:

- ``param_groups`` (list of dicts) and ``state`` (a ``defaultdict(dict)`` keyed
  by the parameter Tensor, which hashes by identity, as PyTorch's: a
  user-written optimizer's ``state = self.state[p]`` creates the entry), with
  PyTorch's construction rules and errors.
- **Master weights (O2).** With ``master_weights=True`` every float16/bfloat16
  parameter gets a float32 copy in ``state[p]["master_param"]``. The step updates
  the master and writes the rounded value back into the parameter, so updates
  smaller than half an ulp of the low-precision weight are not lost.
  ``GradScaler.unscale_`` writes float32 master gradients into
  ``master_param.grad``; without a scaler the step converts the low-precision
  gradient itself.
- **The AMP step contract.** Optimizers with ``_step_supports_amp_scaling = True``
  accept ``step(found_inf=..., grad_scale=...)``: ``found_inf`` is a one-element
  device array (or Tensor), non-zero when some gradient was inf/nan; the update is
  then *masked* (``new = where(found_inf == 0, updated, old)``) on the device for
  parameters, master weights and every state buffer including step counters, so
  a skipped step changes nothing, bit for bit, and deciding to skip needs no host
  synchronisation. ``grad_scale`` (optional) says the gradients in ``p.grad`` are
  still multiplied by that factor; the step multiplies by its reciprocal
  (computed in float64, stored float32). GradScaler never passes ``grad_scale``:
  it unscales first (one pass that also finds infs) and passes only ``found_inf``.
  On the CPU reading ``found_inf`` costs nothing, so the keep flag is a Python
  bool there and a kept step takes the plain update (the same values as the
  masked one); on a GPU it stays on the device, and SGD/Adam's fused kernels
  (``_kernels_read_found_inf``) read ``found_inf`` themselves.
- **Fused GPU updates.** SGD and Adam/AdamW update a whole group with one
  ``kernels.updates`` call (one kernel launch per GPU); what those kernels keep
  beside this base (the 16-bit copies they write, the hyper-parameters mirrored
  on the device) is ``optim/fused.py``.
- **Step hooks** (PyTorch's): ``register_step_pre_hook`` / ``register_step_post_hook``
  on one optimizer, ``register_optimizer_step_pre_hook`` / ``..._post_hook`` for
  all of them, each returning a handle whose ``remove()`` unregisters it. A CUDA
  graph learns which optimizers its step drives through a global pre-hook; the
  update-swamping instrument (``optimizer.track_swamping()``, from the study
  instruments) through the optimizer's own pair.

Updates write in place into ``p.array`` (and bump ``p._version``, which the
autocast weight-cast cache keys on, so it sees every optimizer update).
"""

from __future__ import annotations

import contextlib
import copy
import functools
from collections import OrderedDict, defaultdict
from typing import Any, Callable, Iterable

import numpy as np

from .. import backend
from .. import dtypes as dt
from ..grad_mode import enable_grad, no_grad
from ..hooks import RemovableHandle
from ..kernels.loss_scale import inverse_scale
from ..tensor import Tensor


class _RequiredParameter:
    """Marks a hyper-parameter with no default (PyTorch's ``required``)."""

    def __repr__(self) -> str:
        return "<required parameter>"


required = _RequiredParameter()


def _write_stamp(p: Tensor) -> tuple:
    """What changes when anyone writes ``p``: its version, its array, its storage counter (``.data`` writes)."""
    storage = p._storage
    return p._version[0], p.array, storage, 0 if storage is None else storage[0]


def _written_since(stamp: "tuple | None", p: Tensor) -> bool:
    """Whether ``p`` was written (or given another array) since ``stamp`` was taken."""
    if stamp is None:
        return True
    version, array, storage, writes = stamp
    return (version != p._version[0] or array is not p.array or storage is not p._storage
            or (storage is not None and writes != storage[0]))


def as_array(value: Any) -> Any:
    """The raw xp array of a Tensor (or the value itself)."""
    return value.array if isinstance(value, Tensor) else value


def _kept_on_host(found_inf: Any) -> bool:
    """True when ``found_inf`` is a NumPy flag (free to read) that says the step is kept."""
    found = found_inf.array if isinstance(found_inf, Tensor) else found_inf
    return type(found) is np.ndarray and found.size == 1 and found.item() == 0


def masked_write(xp: Any, dst: Any, src: Any, keep: Any) -> None:
    """``dst[...] = src`` where ``keep`` is true (a 0-d device bool or True), rounding to dst's dtype."""
    if keep is True:  # no AMP mask (CuPy's copyto wants an array for ``where``)
        xp.copyto(dst, src, casting="unsafe")
    else:
        xp.copyto(dst, src, casting="unsafe", where=keep)


def decayed_gradient(w32: Any, g: Any, *, maximize: bool, weight_decay: float) -> Any:
    """The gradient an update sees, in the arithmetic dtype: ``-g`` to maximize, plus ``weight_decay * w`` (L2)."""
    d = dt.opmath(g)
    if maximize:
        d = -d
    return d + weight_decay * w32 if weight_decay != 0 else d


# PyTorch's constructor checks: the words of its "Invalid ...: value" message and the allowed range.
# A NaN fails every range (``not 0.0 <= nan``), as in PyTorch's Adam family.
_HYPERPARAMETER_CHECKS = {
    "lr": ("learning rate", lambda v: 0.0 <= v),
    "eps": ("epsilon value", lambda v: 0.0 <= v),
    "weight_decay": ("weight_decay value", lambda v: 0.0 <= v),
    "momentum": ("momentum value", lambda v: 0.0 <= v),
    "alpha": ("alpha value", lambda v: 0.0 <= v),
    "lr_decay": ("lr_decay value", lambda v: 0.0 <= v),
    "initial_accumulator_value": ("initial_accumulator_value value", lambda v: 0.0 <= v),
    "momentum_decay": ("momentum_decay value", lambda v: 0.0 <= v),
    "rho": ("rho value", lambda v: 0.0 <= v <= 1.0),
}


def check_hyperparameters(**values: Any) -> None:
    """Refuse out-of-range hyper-parameters with PyTorch's messages, checked in the order given.

    ``betas`` is checked per index (``0 <= beta < 1``); every other name must be
    a key of ``_HYPERPARAMETER_CHECKS``.
    """
    for name, value in values.items():
        if name == "betas":
            for index, beta in enumerate(value):
                if not 0.0 <= beta < 1.0:
                    raise ValueError(f"Invalid beta parameter at index {index}: {beta}")
            continue
        words, allowed = _HYPERPARAMETER_CHECKS[name]
        if not allowed(value):
            raise ValueError(f"Invalid {words}: {value}")


def refuse_differentiable(name: str, differentiable: bool) -> None:
    """PyTorch's ``differentiable=True`` (autograd through the update) has no tinyamp counterpart."""
    if differentiable:
        raise NotImplementedError(f"{name}: differentiable=True is not supported: tinyamp's optimizers update "
                                  f"parameters in place, outside autograd")


# PyTorch's global step hooks (torch.optim.optimizer.register_optimizer_step_pre_hook/post_hook): every optimizer.
_GLOBAL_PRE_HOOKS: OrderedDict = OrderedDict()
_GLOBAL_POST_HOOKS: OrderedDict = OrderedDict()


def register_optimizer_step_pre_hook(hook: Callable) -> RemovableHandle:
    """``hook(optimizer, args, kwargs)`` before every optimizer's step; it may return ``(new_args, new_kwargs)``."""
    return RemovableHandle(_GLOBAL_PRE_HOOKS, hook)


def register_optimizer_step_post_hook(hook: Callable) -> RemovableHandle:
    """``hook(optimizer, args, kwargs)`` after every optimizer's step."""
    return RemovableHandle(_GLOBAL_POST_HOOKS, hook)


def _hooked(step: Callable) -> Callable:
    """``step`` with the step hooks around it, as PyTorch runs them: global pre-hooks, the optimizer's
    pre-hooks, the step, the optimizer's post-hooks, global post-hooks. A step a subclass writes
    is wrapped too; a ``super().step()`` inside it runs no hook a second time."""

    @functools.wraps(step)
    def hooked_step(self: "Optimizer", *args: Any, **kwargs: Any) -> Any:
        if self._stepping:
            return step(self, *args, **kwargs)
        for hook in (*_GLOBAL_PRE_HOOKS.values(), *self._step_pre_hooks.values()):
            result = hook(self, args, kwargs)
            if result is not None:
                if not (isinstance(result, tuple) and len(result) == 2):
                    raise RuntimeError(f"{step} must return None or a tuple of (new_args, new_kwargs), "
                                       f"but got {result}.")
                args, kwargs = result
        self._stepping = True
        try:
            out = step(self, *args, **kwargs)
        finally:
            self._stepping = False
        for hook in (*self._step_post_hooks.values(), *_GLOBAL_POST_HOOKS.values()):
            hook(self, args, kwargs)
        return out

    hooked_step.hooked = True
    return hooked_step


class Optimizer:
    """Base class of tinyamp's optimizers (PyTorch's ``torch.optim.Optimizer``)."""

    # Overridden to True by the optimizers that implement the masked-update contract.
    _step_supports_amp_scaling = False
    # True for optimizers whose GPU kernels read found_inf themselves: their keep
    # flag on a GPU is then found_inf (one-element float32), not a computed mask.
    _kernels_read_found_inf = False

    def __init__(self, params: Iterable[Any], defaults: dict) -> None:
        self.defaults = dict(defaults)
        self.state: defaultdict[Tensor, dict] = defaultdict(dict)
        self.param_groups: list[dict] = []
        # The parameter's write stamp (_write_stamp) right after we last wrote it from its
        # master: a different one means someone else wrote the parameter (a model load,
        # p.data written or replaced), and the master is refreshed from it. Host metadata, so no sync.
        self._master_versions: dict[Tensor, tuple] = {}
        self._step_pre_hooks: OrderedDict = OrderedDict()
        self._step_post_hooks: OrderedDict = OrderedDict()
        self._stepping = False
        if isinstance(params, Tensor):
            raise TypeError("params argument given to the optimizer should be an iterable of Tensors "
                            f"or dicts, but got {type(params).__name__}")
        groups = list(params)
        if len(groups) == 0:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for group in groups:
            self.add_param_group(group)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        step = cls.__dict__.get("step")
        if step is not None and not getattr(step, "hooked", False):  # a step of its own: hooks around it too
            cls.step = _hooked(step)

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__} ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            lines.extend(f"    {key}: {group[key]}" for key in sorted(group) if key != "params")
        return "\n".join(lines) + "\n)"

    # -------------------------------------------------------------- groups
    def add_param_group(self, param_group: dict) -> None:
        """Add a group (a dict with ``params`` and optional hyper-parameters)."""
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, got {type(param_group).__name__}")
        group = dict(param_group)
        params = group["params"]
        if isinstance(params, Tensor):
            params = [params]
        elif isinstance(params, set):
            raise TypeError("optimizer parameters need to be organized in ordered collections, but the "
                            "ordering of tensors in sets will change between runs. Please use a list instead.")
        group["params"] = params = list(params)
        for p in params:
            if not isinstance(p, Tensor):
                raise TypeError(f"optimizer can only optimize Tensors, but one of the params is "
                                f"{type(p).__name__}")
            if not p.is_leaf:
                raise ValueError(f"can't optimize a non-leaf Tensor (shape {list(p.shape)})")
        for name, default in self.defaults.items():
            if default is required and name not in group:
                raise ValueError(f"parameter group didn't specify a value of required optimization "
                                 f"parameter {name}")
            group.setdefault(name, default)
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if len({id(p) for p in params}) != len(params):
            raise ValueError("optimizer contains a parameter group with duplicate parameters")
        if any(id(p) in seen for p in params):
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(group)
        if group.get("master_weights"):
            for p in params:
                self._master(p, group)

    # -------------------------------------------------------------- grads
    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset gradients (and master gradients) to None, or to zeros in place."""
        for group in self.param_groups:
            for p in group["params"]:
                master = self.state.get(p, {}).get("master_param")
                if master is not None:
                    master.grad = None
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    p.grad.array[...] = 0
                    p.grad._version[0] += 1

    def _master(self, p: Tensor, group: "dict | None" = None) -> "Tensor | None":
        """The float32 master copy of ``p`` (made on first use), or None when ``p`` needs none.

        A parameter has a master when its group has ``master_weights`` and it is
        float16 or bfloat16. If the parameter was written by someone else since the
        last step (a model load, ``copy_`` under ``no_grad``, a write through ``p.data``
        or ``p.data = t``: its version, storage counter or array moved), each element
        of the master that no longer rounds to the parameter is replaced by it, on the
        device; elements that still match keep their float32 low bits. A parameter
        given another shape or device through ``p.data = t`` gets a new master.
        """
        if group is None:
            group = self._group_of(p)
        if not group.get("master_weights") or p.dtype not in dt.LOW_PRECISION:
            return None
        state = self.state.setdefault(p, {})
        master = state.get("master_param")
        if master is None:
            state["master_param"] = master = Tensor._wrap(p.array.astype(np.float32))
        elif _written_since(self._master_versions.get(p), p):
            if master.shape != p.shape or master.device != p.device:
                master.array = p.array.astype(np.float32)
                master.grad = None
            else:
                xp = backend.array_module(p.array)
                stale = master.array.astype(p.dtype) != p.array
                masked_write(xp, master.array, p.array, stale)
            master._version[0] += 1
        self._master_versions[p] = _write_stamp(p)
        return master

    def master_params(self) -> Iterable[Tensor]:
        """The tensors the step really updates: each parameter's master, or the parameter.

        Clip these after ``scaler.unscale_(optimizer)`` under O2: with master weights
        the unscaled gradients live in ``master.grad``, and ``p.grad`` stays scaled.
        """
        for group in self.param_groups:
            for p in group["params"]:
                master = self._master(p, group)
                yield p if master is None else master

    def _group_of(self, p: Tensor) -> dict:
        for group in self.param_groups:
            if any(q is p for q in group["params"]):
                return group
        raise KeyError(f"parameter of shape {list(p.shape)} is not in this optimizer")

    # -------------------------------------------------------------- step
    @_hooked
    def step(self, closure: "Callable[[], Any] | None" = None, *, found_inf: Any = None,
             grad_scale: Any = None) -> Any:
        """One update of every parameter with a gradient; returns the closure's loss.

        ``found_inf``/``grad_scale``: see the module docstring (the AMP contract).
        """
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        keeps: dict = {}  # device -> keep flag (_keep_flag), found once per device
        quiet: Any = contextlib.nullcontext()
        if found_inf is not None:
            if _kept_on_host(found_inf):  # the CPU's flag says "kept": the plain update, finite gradients
                keeps[backend.CPU] = True
            else:  # a masked step computes with the inf/nan it discards: NumPy's warnings would be noise
                quiet = np.errstate(over="ignore", invalid="ignore")
        with no_grad(), quiet:
            for group in self.param_groups:
                entries = [self._prepare(p, group, found_inf, grad_scale, keeps) for p in group["params"]
                           if p.grad is not None]
                if entries:
                    self._update_group(group, entries)
                for p, _, _, _, master in entries:
                    self._finish(p, master)
        return loss

    def register_step_pre_hook(self, hook: Callable) -> RemovableHandle:
        """``hook(optimizer, args, kwargs)`` before each step; it may return ``(new_args, new_kwargs)``."""
        return RemovableHandle(self._step_pre_hooks, hook)

    def register_step_post_hook(self, hook: Callable) -> RemovableHandle:
        """``hook(optimizer, args, kwargs)`` after each step."""
        return RemovableHandle(self._step_post_hooks, hook)

    def _prepare(self, p: Tensor, group: dict, found_inf: Any, grad_scale: Any, keeps: dict) -> tuple:
        """(param, weight array, grad array, keep mask, master) for one parameter with a gradient."""
        dev = p.device
        if dev not in keeps:
            keeps[dev] = self._keep_flag(dev, found_inf)
        # Only a group that keeps master weights holds parameters with one (the usual group skips the call).
        master = self._master(p, group) if group.get("master_weights") else None
        if master is not None and master.grad is not None:
            if grad_scale is not None:
                raise RuntimeError("step: grad_scale was given, but GradScaler.unscale_ already wrote "
                                   "unscaled float32 master gradients for this optimizer")
            grad = master.grad.array
        else:
            grad = p.grad.array if master is None else p.grad.array.astype(np.float32)
            if grad_scale is not None:
                scale = backend.to_device(as_array(grad_scale), dev)
                grad = dt.opmath(grad) * inverse_scale(dev.xp, scale).reshape(())
        weight = p.array if master is None else master.array
        if grad.shape != weight.shape:
            raise RuntimeError(f"{type(self).__name__}.step: the gradient of shape {list(grad.shape)} does not fit "
                               f"its parameter of shape {list(p.shape)} ({dt.dtype_name(p.dtype)})")
        return p, weight, grad, keeps[dev], master

    def _keep_flag(self, dev: backend.Device, found_inf: Any) -> Any:
        """Whether this step's update applies, for the parameters on ``dev``.

        True without AMP. On the CPU a Python bool (the host reads found_inf for
        free). On a GPU a 0-d device bool, or for optimizers whose kernels read it
        themselves found_inf as a one-element float32 device array.
        """
        if found_inf is None:
            return True
        found = backend.to_device(as_array(found_inf), dev)
        if dev.type == "cpu":
            return found.item() == 0
        if self._kernels_read_found_inf:
            return found.reshape(1) if found.dtype == dt.float32 else found.astype(dt.float32).reshape(1)
        return dev.xp.equal(found.reshape(()), 0)

    # ------------------------------------------------- CUDA graphs (tinyamp/cuda/graphed_step.py)
    def _graph_device_keys(self, group: dict) -> tuple[str, ...]:
        """The keys of ``group`` a captured step reads from device memory (none here: see optim/fused.py)."""
        return ()

    def _graph_frozen(self, group: dict) -> tuple:
        """What a captured step of ``group`` fixed that the device keys do not (which kernel variant runs)."""
        return ()

    def _refresh_device_hyper(self) -> None:
        """Write changed device-resident hyper-parameters before a replay (none here: see optim/fused.py)."""

    def _refresh_masters(self) -> None:
        """Refresh the masters of parameters written since the last step (``_master``), before a graph replay:
        the captured update reads the master, which an eager step would first bring up to date."""
        for group in self.param_groups:
            if group.get("master_weights"):
                for p in group["params"]:
                    if p in self._master_versions:
                        self._master(p, group)

    def _finish(self, p: Tensor, master: "Tensor | None") -> None:
        """After the update: round masters back into the parameter, bump the version."""
        if master is not None:
            self._write_back(p, master)
            master.grad = None  # consumed: the next step reads the next unscale_'s grads
        p._version[0] += 1
        if master is not None:
            self._master_versions[p] = _write_stamp(p)

    def _write_back(self, p: Tensor, master: Tensor) -> None:
        """The rounded master into the parameter; a skipped step left the master unchanged, so the
        rounding reproduces the parameter's current value bit for bit."""
        p.array[...] = master.array.astype(p.dtype)

    def _update_group(self, group: dict, entries: list) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement _update_group")

    def _state_buffer(self, p: Tensor, name: str, like: Any, fill: float = 0.0) -> Any:
        """``state[p][name]`` as a raw array, created (filled with ``fill``) on first use.

        An existing buffer must have ``like``'s shape and dtype: the
        update kernels index it element by element (a user's edit of
        ``state``, or a resumed run after a layer changed, is refused here).
        """
        state = self.state.setdefault(p, {})
        if name not in state:
            xp = backend.array_module(like)
            state[name] = Tensor._wrap(xp.full(like.shape, fill, dtype=like.dtype))
        buffer = state[name].array
        if buffer.shape != like.shape or buffer.dtype != like.dtype:
            self._refuse_buffer(p, name, buffer, like)
        return buffer

    def _refuse_buffer(self, p: Tensor, name: str, buffer: Any, like: Any) -> None:
        raise RuntimeError(f"{type(self).__name__}.step: state[{name!r}] of shape {list(buffer.shape)} and dtype "
                           f"{dt.dtype_name(buffer.dtype)} does not fit its parameter (shape {list(p.shape)}): "
                           f"expected shape {list(like.shape)} and dtype {dt.dtype_name(like.dtype)}")

    def _step_counter(self, p: Tensor, like: Any) -> Any:
        """``state[p]["step"]``: a 0-d float32 device array, as in PyTorch."""
        state = self.state.setdefault(p, {})
        if "step" not in state:
            xp = backend.array_module(like)
            state["step"] = Tensor._wrap(xp.zeros((), dtype=np.float32))
        step = state["step"].array
        if step.shape != () or step.dtype != dt.float32:
            self._refuse_buffer(p, "step", step, backend.array_module(like).zeros((), dtype=np.float32))
        return step

    # ---------------------------------------------------------- state dict
    def state_dict(self) -> dict:
        """PyTorch's format: ``{"state": {id: {...}}, "param_groups": [{..., "params": [ids]}]}``.

        Parameters are replaced by integer ids in group order; the state tensors
        (master weights included) are the live ones, as in PyTorch: pickle or
        ``copy.deepcopy`` the result to snapshot it.
        """
        ids: dict[int, int] = {}
        groups = []
        for group in self.param_groups:
            packed = {k: v for k, v in group.items() if k != "params"}
            packed["params"] = [ids.setdefault(id(p), len(ids)) for p in group["params"]]
            groups.append(packed)
        state = {}
        for group in self.param_groups:
            for p in group["params"]:
                if p in self.state:
                    state[ids[id(p)]] = {k: v for k, v in self.state[p].items()}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """Load a ``state_dict()``: hyper-parameters, buffers and master weights (deep-copied).

        All or nothing: every group and state entry is checked against this
        optimizer's parameters before anything changes (group sizes, the
        constructor's hyper-parameter checks, each buffer's shape). Buffers are
        moved to their parameter's device and, as PyTorch does, floating ones
        cast to the dtype the step updates in (the parameter's, or float32 for a
        parameter with a master weight). ``master_weights`` stays as this
        optimizer was built: a float32 run's state resumes under O2 (masters made
        from the parameters), and a state holding master weights is refused by an
        optimizer that would drop them.
        """
        state_dict = copy.deepcopy(state_dict)
        saved_groups = state_dict["param_groups"]
        if len(saved_groups) != len(self.param_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        for mine, saved in zip(self.param_groups, saved_groups):
            if len(mine["params"]) != len(saved["params"]):
                raise ValueError("loaded state dict contains a parameter group that doesn't match the "
                                 "size of optimizer's group")
        by_id = {}
        group_of = {}
        for index, (mine, saved) in enumerate(zip(self.param_groups, saved_groups)):
            by_id.update(zip(saved["params"], mine["params"]))
            group_of.update((id(p), (index, mine)) for p in mine["params"])
            check_hyperparameters(**{k: saved[k] for k in ("betas", *_HYPERPARAMETER_CHECKS) if k in saved})
        state: defaultdict = defaultdict(dict)
        for key, entry in state_dict["state"].items():
            p = by_id.get(key)
            if p is not None:
                index, group = group_of[id(p)]
                state[p] = self._loaded_state(p, group, index, entry)
        groups = []
        for mine, saved in zip(self.param_groups, saved_groups):
            group = {k: v for k, v in saved.items() if k != "params"}
            group["params"] = mine["params"]
            if "master_weights" in mine:
                group["master_weights"] = mine["master_weights"]
            groups.append(group)
        self.state = state
        self._master_versions = {p: _write_stamp(p) for p, entry in state.items() if "master_param" in entry}
        for mine, group in zip(self.param_groups, groups):
            mine.clear()
            mine.update(group)

    # State entries that are one number per parameter (0-d), not one per element.
    _SCALAR_STATE = frozenset({"step", "mu_product"})

    def _loaded_state(self, p: Tensor, group: dict, index: int, entry: dict) -> dict:
        """One parameter's loaded state, checked against ``p`` and put on its device in the step's dtypes."""
        name = f"{type(self).__name__}.load_state_dict"
        has_master = bool(group.get("master_weights")) and p.dtype in dt.LOW_PRECISION
        if "master_param" in entry and not has_master:
            raise ValueError(f"{name}: the loaded state holds a float32 master weight for a parameter of group "
                             f"{index} (shape {list(p.shape)}, {dt.dtype_name(p.dtype)}), which this optimizer "
                             f"would drop: build it with master_weights=True and float16/bfloat16 parameters")
        step_dtype = dt.float32 if has_master else p.dtype
        loaded = {}
        for key, value in entry.items():
            if not isinstance(value, Tensor):
                loaded[key] = value
                continue
            array = as_array(value)
            if key in self._SCALAR_STATE:
                want_shape, want_dtype = (), dt.float32
            else:
                want_shape, want_dtype = p.shape, step_dtype
            if array.shape != want_shape or array.dtype not in dt.FLOATING:
                raise ValueError(f"{name}: state[{key!r}] of shape {list(array.shape)} and dtype "
                                 f"{dt.dtype_name(array.dtype)} does not fit a parameter of group {index} with "
                                 f"shape {list(p.shape)} and dtype {dt.dtype_name(p.dtype)} (expected a floating "
                                 f"tensor of shape {list(want_shape)})")
            array = backend.to_device(array, p.device)
            loaded[key] = Tensor._wrap(array if array.dtype == want_dtype else array.astype(want_dtype))
        return loaded
