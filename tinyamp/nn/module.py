"""Module: the base class of layers and models.

A Module owns three ordered registries filled in by ``__setattr__``:
``_parameters`` (Parameters), ``_buffers`` (tensors that are state but not
trained, like BatchNorm's running statistics) and ``_modules`` (submodules).
Everything else (``parameters()``, ``state_dict()``, ``to()``, ``half()``, the
nested repr) walks those registries, in registration order, as PyTorch does.

A state dict maps dotted names (``"0.weight"``, ``"bn.running_mean"``) to the
model's parameters and persistent buffers. Loading checks every entry first
(missing, unexpected and misshapen keys, with PyTorch's messages) and copies
nothing unless all fit; values are then written in place, converted to each
tensor's dtype and device.

Mixed precision lives here in one place: ``half(keep_norm_fp32=True)`` is the
"O2" recipe. Every floating parameter and buffer becomes float16 except those of
normalization layers, which stay float32; their ops take the float16 input,
normalize in float32 and return float16 (see normalization.py).
"""

from __future__ import annotations

from collections import OrderedDict, namedtuple
from typing import Any, Callable, Iterator

import numpy as np

from .. import backend
from .. import dtypes as dt
from ..kernels.convert import convert
from ..tensor import Tensor
from ..ops.methods import parse_to_args
from .backward_hooks import BackwardHookCall
from .parameter import Parameter
from ..grad_mode import no_grad
from ..hooks import RemovableHandle


class Module:
    """Base class for all layers and models: subclass it and define ``forward``."""

    # Normalization layers set this; ``half(keep_norm_fp32=True)`` leaves them float32.
    _is_normalization = False

    def __init__(self) -> None:
        # object.__setattr__: our own __setattr__ needs these dicts to exist.
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent_buffers", set())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "_forward_pre_hooks", OrderedDict())
        object.__setattr__(self, "_forward_hooks", OrderedDict())
        object.__setattr__(self, "_backward_hooks", OrderedDict())
        object.__setattr__(self, "_backward_pre_hooks", OrderedDict())

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required "forward" function')

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if backend._step_observers:
            backend.observe(self)  # a graphed step learns the modules it replays (tinyamp/cuda/graphed_step.py)
        for hook in self._forward_pre_hooks.values():
            result = hook(self, args)
            if result is not None:
                args = result if isinstance(result, tuple) else (result,)
        backward_hooks = None
        if self._backward_hooks or self._backward_pre_hooks:
            backward_hooks = BackwardHookCall(self, list(self._backward_hooks.values()),
                                              list(self._backward_pre_hooks.values()))
            args = backward_hooks.setup_inputs(args)
        output = self.forward(*args, **kwargs)
        for hook in self._forward_hooks.values():
            result = hook(self, args, output)
            if result is not None:
                output = result
        if backward_hooks is not None:
            output = backward_hooks.setup_outputs(output)
        return output

    def register_forward_pre_hook(self, hook: Callable) -> RemovableHandle:
        """``hook(module, args)`` runs before ``forward``; it may return replacement args."""
        return RemovableHandle(self._forward_pre_hooks, hook)

    def register_forward_hook(self, hook: Callable) -> RemovableHandle:
        """``hook(module, args, output)`` runs after ``forward``; it may return a replacement output."""
        return RemovableHandle(self._forward_hooks, hook)

    def register_full_backward_hook(self, hook: Callable, prepend: bool = False) -> RemovableHandle:
        """``hook(module, grad_input, grad_output)`` runs when the gradients of the module's inputs are
        computed; it may return a replacement ``grad_input`` tuple (see ``nn/backward_hooks.py``)."""
        return RemovableHandle(self._backward_hooks, hook, prepend)

    def register_full_backward_pre_hook(self, hook: Callable, prepend: bool = False) -> RemovableHandle:
        """``hook(module, grad_output)`` runs when the gradients of the module's outputs arrive, before the
        module's own backward; it may return a replacement ``grad_output`` tuple."""
        return RemovableHandle(self._backward_pre_hooks, hook, prepend)

    # --------------------------------------------------------- registration
    def __setattr__(self, name: str, value: Any) -> None:
        params = self.__dict__.get("_parameters")
        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            self._forget(name, keep=self._parameters)
            self.register_parameter(name, value)
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as parameter '{name}' "
                                f"(ta.nn.Parameter or None expected)")
            params[name] = None
        elif isinstance(value, Module):
            if params is None:
                raise AttributeError("cannot assign module before Module.__init__() call")
            self._forget(name, keep=self._modules)
            self._modules[name] = value
        elif params is not None and name in self._modules:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as child module '{name}' "
                                f"(ta.nn.Module or None expected)")
            self._modules[name] = None
        elif params is not None and name in self._buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign '{type(value).__name__}' as buffer '{name}' "
                                f"(ta.Tensor or None expected)")
            self._buffers[name] = value
        else:
            object.__setattr__(self, name, value)

    def _forget(self, name: str, keep: dict | None = None) -> None:
        """Remove ``name`` from the instance dict and the registries other than ``keep``.

        Keeping the target registry's entry keeps its position: re-assigning
        ``self.fc`` must not move it to the end of ``state_dict``.
        """
        self.__dict__.pop(name, None)
        for registry in (self._parameters, self._buffers, self._modules):
            if registry is not keep:
                registry.pop(name, None)
        self._non_persistent_buffers.discard(name)

    def __getattr__(self, name: str) -> Any:
        # Only called when normal lookup fails: the registries hold the rest.
        for registry in ("_parameters", "_buffers", "_modules"):
            entries = self.__dict__.get(registry)
            if entries is not None and name in entries:
                return entries[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name: str) -> None:
        for registry in (self._parameters, self._buffers, self._modules):
            if name in registry:
                del registry[name]
                self._non_persistent_buffers.discard(name)
                return
        object.__delattr__(self, name)

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self._parameters) | set(self._buffers) | set(self._modules))

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        _check_name(self, name, "parameter")
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"cannot assign '{type(param).__name__}' object to parameter '{name}' "
                            f"(ta.nn.Parameter or None required)")
        if param is not None and param.grad_fn is not None:
            raise ValueError(f"cannot assign non-leaf Tensor to parameter '{name}': model parameters must "
                             f"be created explicitly (Parameter(t.detach()) if it comes from a computation)")
        self._parameters[name] = param

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """Register state that is not trained; ``persistent=False`` keeps it out of ``state_dict``."""
        _check_name(self, name, "buffer")
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign '{type(tensor).__name__}' object to buffer '{name}' "
                            f"(ta.Tensor or None required)")
        self._forget(name, keep=self._buffers)
        self._buffers[name] = tensor
        if not persistent:
            self._non_persistent_buffers.add(name)

    def add_module(self, name: str, module: "Module | None") -> None:
        _check_name(self, name, "module")
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        self._forget(name, keep=self._modules)
        self._modules[name] = module

    register_module = add_module

    def get_submodule(self, target: str) -> "Module":
        """``model.get_submodule("encoder.0")``."""
        module = self
        for part in target.split(".") if target else []:
            child = module._modules.get(part)
            if child is None:
                raise AttributeError(f"{type(module).__name__} has no submodule '{part}' (looking up '{target}')")
            module = child
        return module

    # ------------------------------------------------------------ traversal
    def named_modules(self, memo: set | None = None, prefix: str = "",
                      remove_duplicate: bool = True) -> Iterator[tuple[str, "Module"]]:
        """Self, then every submodule depth-first, each once (by identity) unless told otherwise."""
        if memo is None:
            memo = set()
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, child in self._modules.items():
            if child is not None:
                yield from child.named_modules(memo, f"{prefix}.{name}" if prefix else name, remove_duplicate)

    def modules(self) -> Iterator["Module"]:
        for _, module in self.named_modules():
            yield module

    def named_children(self) -> Iterator[tuple[str, "Module"]]:
        seen: set = set()
        for name, child in self._modules.items():
            if child is not None and id(child) not in seen:
                seen.add(id(child))
                yield name, child

    def children(self) -> Iterator["Module"]:
        for _, child in self.named_children():
            yield child

    def _named_members(self, registry: str, prefix: str, recurse: bool,
                       remove_duplicate: bool) -> Iterator[tuple[str, Tensor]]:
        # A tensor shared by two modules (tied weights) is yielded once, under
        # its first name, so an optimizer never steps it twice.
        seen: set = set()
        modules = self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate) if recurse else [(prefix, self)]
        for module_prefix, module in modules:
            for name, value in getattr(module, registry).items():
                if value is None or (remove_duplicate and id(value) in seen):
                    continue
                seen.add(id(value))
                yield (f"{module_prefix}.{name}" if module_prefix else name), value

    def named_parameters(self, prefix: str = "", recurse: bool = True,
                         remove_duplicate: bool = True) -> Iterator[tuple[str, Parameter]]:
        yield from self._named_members("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        for _, param in self.named_parameters(recurse=recurse):
            yield param

    def named_buffers(self, prefix: str = "", recurse: bool = True,
                      remove_duplicate: bool = True) -> Iterator[tuple[str, Tensor]]:
        yield from self._named_members("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        for _, buf in self.named_buffers(recurse=recurse):
            yield buf

    # ------------------------------------------------------------ modes
    def train(self, mode: bool = True) -> "Module":
        if not isinstance(mode, bool):
            raise ValueError(f"training mode is expected to be boolean, got {mode!r}")
        self.training = mode
        for child in self.children():
            child.train(mode)
        return self

    def eval(self) -> "Module":
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> "Module":
        for param in self.parameters():
            param.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        for param in self.parameters():
            if param.grad is None:
                continue
            if set_to_none:
                param.grad = None
            else:
                param.grad = param.grad.detach()
                param.grad.zero_()

    def apply(self, fn: Callable[["Module"], None]) -> "Module":
        """Call ``fn`` on every submodule (children first) and on self, e.g. a custom init."""
        for child in self.children():
            child.apply(fn)
        fn(self)
        return self

    # ------------------------------------------------- devices and dtypes
    def _convert(self, convert: Callable[[Any], Any], floating_only: bool, skip_norms: bool = False) -> "Module":
        """Replace the array of every parameter, gradient and buffer, keeping the tensor objects.

        Optimizers hold parameter objects, so identity must survive ``model.half()``;
        the version bump tells the autocast weight-cast cache its entry is stale.
        """
        for module in self.modules():
            if skip_norms and module._is_normalization:
                continue
            tensors = list(module._parameters.values()) + list(module._buffers.values())
            for tensor in tensors:
                if tensor is None or (floating_only and tensor.dtype not in dt.FLOATING):
                    continue
                for target in (tensor, tensor.grad):
                    if target is None:
                        continue
                    new = convert(target.array)
                    if new is not target.array:
                        target.array = new
                        target._version[0] += 1
        return self

    def to(self, *args: Any, **kwargs: Any) -> "Module":
        """``to(device)``, ``to(dtype)``, ``to(device, dtype)`` or ``to(tensor)``, in place.

        A dtype applies to floating parameters and buffers only (integer buffers
        such as ``num_batches_tracked`` keep their dtype), as in PyTorch.
        """
        device, dtype = parse_to_args("Module.to", args, kwargs)
        if dtype is not None and dtype not in dt.FLOATING:
            raise TypeError(f"Module.to only accepts floating point dtypes, but got desired dtype="
                            f"{dt.dtype_name(dtype)}")
        if device is not None:
            self._convert(lambda a: backend.to_device(a, device), floating_only=False)
        if dtype is not None:
            self._convert(lambda a: convert_to(a, dtype), floating_only=True)
        return self

    def cpu(self) -> "Module":
        return self.to("cpu")

    def cuda(self, device: Any = None) -> "Module":
        return self.to("cuda" if device is None else f"cuda:{device}" if isinstance(device, int) else device)

    def half(self, keep_norm_fp32: bool = False) -> "Module":
        """Floating parameters and buffers to float16.

        ``keep_norm_fp32=True`` leaves normalization layers (BatchNorm, LayerNorm)
        in float32 (the O2 recipe): their statistics need float32 range and
        precision. They still take and return float16 activations; their own
        gradients arrive in float32.
        """
        return self._convert(lambda a: convert_to(a, dt.float16), floating_only=True, skip_norms=keep_norm_fp32)

    def bfloat16(self, keep_norm_fp32: bool = False) -> "Module":
        return self._convert(lambda a: convert_to(a, dt.bfloat16), floating_only=True, skip_norms=keep_norm_fp32)

    def float(self) -> "Module":
        return self._convert(lambda a: convert_to(a, dt.float32), floating_only=True)

    def double(self) -> "Module":
        return self._convert(lambda a: convert_to(a, dt.float64), floating_only=True)

    def type(self, dst_type: Any) -> "Module":
        return self.to(dst_type)

    # ---------------------------------------------------------- state dict
    def _state_items(self, prefix: str) -> Iterator[tuple[str, Tensor]]:
        """Every parameter and persistent buffer under its dotted key, as state_dict orders them."""
        for name, param in self._parameters.items():
            if param is not None:
                yield prefix + name, param
        for name, buf in self._buffers.items():
            if buf is not None and name not in self._non_persistent_buffers:
                yield prefix + name, buf
        for name, child in self._modules.items():
            if child is not None:
                yield from child._state_items(f"{prefix}{name}.")

    def _has_extra_state(self) -> bool:
        """Whether ``state_dict`` holds ``{prefix}_extra_state`` for this module: PyTorch's rule (the class
        overrides ``get_extra_state``); a layer may narrow it (``nn.Linear``: only once it holds fp8 state)."""
        return type(self).get_extra_state is not Module.get_extra_state

    def get_extra_state(self) -> Any:
        """State beyond parameters and buffers, saved under ``{prefix}_extra_state`` (PyTorch's protocol)."""
        raise RuntimeError("Reached a code path in Module.get_extra_state() that should never be called. Please "
                           "file an issue at https://github.com/pytorch/pytorch/issues/new?template=bug-report.yml "
                           "to report this bug.")

    def set_extra_state(self, state: Any) -> None:
        """Load what ``get_extra_state`` returned (PyTorch's protocol)."""
        raise RuntimeError("Reached a code path in Module.set_extra_state() that should never be called. Please "
                           "file an issue at https://github.com/pytorch/pytorch/issues/new?template=bug-report.yml "
                           "to report this bug.")

    def _extra_states(self, prefix: str) -> Iterator[tuple[str, "Module"]]:
        """(key, module) of every ``_extra_state`` entry under this module, in state_dict order."""
        if self._has_extra_state():
            yield prefix + "_extra_state", self
        for name, child in self._modules.items():
            if child is not None:
                yield from child._extra_states(f"{prefix}{name}.")

    def state_dict(self, destination: dict | None = None, prefix: str = "",
                   keep_vars: bool = False) -> "OrderedDict[str, Tensor]":
        """Parameters and persistent buffers by dotted name, detached (they share memory with the model), and
        each module's ``_extra_state`` (PyTorch's protocol; ``nn.Linear``'s fp8 quantiser state)."""
        result = OrderedDict() if destination is None else destination
        for key, tensor in self._state_items(prefix):
            result[key] = tensor if keep_vars else tensor.detach()
        for key, module in self._extra_states(prefix):
            result[key] = module.get_extra_state()
        return result

    def load_state_dict(self, state_dict: "dict[str, Any]", strict: bool = True) -> _IncompatibleKeys:
        """Copy values into this model's tensors in place (cast to each tensor's dtype and device).

        Nothing is copied unless every entry fits: a size mismatch is always an
        error, missing and unexpected keys are an error when ``strict``.
        """
        if not isinstance(state_dict, dict):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict).__name__}.")
        own = OrderedDict(self._state_items(""))
        extra = dict(self._extra_states(""))
        takes_extra = {key: module for key, module in self._extra_keys("")}
        missing = [key for key in own if key not in state_dict] + [key for key in extra if key not in state_dict]
        unexpected = [key for key in state_dict if key not in own and key not in takes_extra]
        errors = []
        if strict and missing:
            errors.append("Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in missing) + ". ")
        if strict and unexpected:
            errors.append("Unexpected key(s) in state_dict: " + ", ".join(f'"{k}"' for k in unexpected) + ". ")
        pairs = []
        for key, target in own.items():
            if key not in state_dict:
                continue
            source = state_dict[key]
            if not isinstance(source, (Tensor, np.ndarray)):
                errors.append(f'While copying the parameter named "{key}", expected a Tensor from checkpoint '
                              f'but received {type(source).__name__}')
                continue
            if tuple(source.shape) != tuple(target.shape):
                errors.append(f"size mismatch for {key}: copying a param with shape {list(source.shape)} from "
                              f"checkpoint, the shape in current model is {list(target.shape)}.")
                continue
            array = source.array if isinstance(source, Tensor) else source
            try:  # converted before anything is written: a value that cannot be cast copies nothing
                pairs.append((target, convert_to(backend.to_device(array, target.device), target.dtype)))
            except (TypeError, ValueError) as error:
                errors.append(f'While copying the parameter named "{key}", whose dimensions in the model are '
                              f'{list(target.shape)} and whose dimensions in the checkpoint are '
                              f'{list(source.shape)}, an exception occurred : {error}')
        if errors:
            raise RuntimeError(f"Error(s) in loading state_dict for {type(self).__name__}:\n\t" + "\n\t".join(errors))
        with no_grad():
            for target, value in pairs:
                target.array[...] = value
                target._version[0] += 1
        for key, module in takes_extra.items():
            if key in state_dict:
                module.set_extra_state(state_dict[key])
        return _IncompatibleKeys(missing, unexpected)

    def _extra_keys(self, prefix: str) -> Iterator[tuple[str, "Module"]]:
        """(key, module) of every module that can load an ``_extra_state`` (its class overrides
        ``set_extra_state``), held now or not."""
        if type(self).set_extra_state is not Module.set_extra_state:
            yield prefix + "_extra_state", self
        for name, child in self._modules.items():
            if child is not None:
                yield from child._extra_keys(f"{prefix}{name}.")

    # ---------------------------------------------------------------- repr
    def extra_repr(self) -> str:
        """The layer's own settings, shown inside its repr (override in subclasses)."""
        return ""

    def _get_name(self) -> str:
        return type(self).__name__

    def __repr__(self) -> str:
        extra = self.extra_repr()
        lines = extra.split("\n") if extra else []
        for name, child in self._modules.items():
            # Indent a child's continuation lines so nesting stays visible.
            child_text = repr(child).replace("\n", "\n  ")
            lines.append(f"({name}): {child_text}")
        if not lines:
            return self._get_name() + "()"
        if not self._modules and len(lines) == 1:
            return f"{self._get_name()}({lines[0]})"
        return self._get_name() + "(\n  " + "\n  ".join(lines) + "\n)"


class _IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    """What ``load_state_dict`` returns: the keys it did not match."""

    __slots__ = ()

    def __repr__(self) -> str:
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()


def _check_name(module: Module, name: str, kind: str) -> None:
    if "_parameters" not in module.__dict__:
        raise AttributeError(f"cannot assign {kind} before Module.__init__() call")
    if not isinstance(name, str):
        raise TypeError(f"{kind} name should be a string, got {type(name).__name__}")
    if not name or "." in name:
        raise KeyError(f"{kind} name can't be empty or contain \".\", got: {name!r}")
    registered = name in module._parameters or name in module._buffers or name in module._modules
    if not registered and (name in module.__dict__ or hasattr(type(module), name)):
        raise KeyError(f"attribute '{name}' already exists on {type(module).__name__}")


def convert_to(array: Any, dtype: np.dtype) -> Any:
    """``array`` in ``dtype``: the same object when it already is (so nothing is bumped)."""
    return array if array.dtype == dtype else convert(array, dtype)
