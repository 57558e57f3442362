"""A module's full backward hooks: ``register_full_backward_hook`` and ``register_full_backward_pre_hook``.

PyTorch's semantics: for one call of a module that has such hooks, the
tensors among its positional arguments that require grad, and the tensors it
returns, pass through an identity node each (``BackwardHookIdentity``). When
the gradients of the outputs arrive, the pre hooks run as
``hook(module, grad_output)`` (a returned tuple replaces ``grad_output``);
when the gradients of the inputs are complete, the hooks run as
``hook(module, grad_input, grad_output)`` (a returned tuple replaces
``grad_input``). Both tuples have one entry per positional argument / output,
None where that is not a tensor or gets no gradient. When no input requires
grad the hooks run at the outputs' node, with ``grad_input`` all None, and may
not replace it.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

from ..autograd.function import Function
from ..grad_mode import is_grad_enabled
from ..precision import NEUTRAL
from ..tensor import Tensor


class BackwardHookIdentity(Function):
    """y_i = x_i; dx_i = on_backward(dy)_i (the hook sees the gradients and may replace them)"""

    precision = NEUTRAL

    def __init__(self, on_backward: Callable[[tuple], tuple]) -> None:
        self.on_backward = on_backward

    def forward(self, xp: Any, *arrays: Any) -> Any:
        return arrays[0] if len(arrays) == 1 else tuple(arrays)

    def backward(self, *grads: Tensor) -> Any:
        result = self.on_backward(grads)
        return result[0] if len(result) == 1 else tuple(result)


def _pack(indices: list, values: "tuple | list", size: int) -> tuple:
    """One entry per position: the value at each tensor position, None elsewhere."""
    packed: list = [None] * size
    for i, v in zip(indices, values):
        packed[i] = v
    return tuple(packed)


def _check_replacement(kind: str, module: Any, old: tuple, new: Any) -> tuple:
    if not isinstance(new, tuple) or len(new) != len(old):
        got = len(new) if isinstance(new, (tuple, list)) else type(new).__name__
        raise RuntimeError(f"Backward hook returned an invalid number of {kind}, got {got}, but expected "
                           f"{len(old)} (module {type(module).__name__})")
    for before, after in zip(old, new):
        if after is not None and before is not None and (after.shape != before.shape or after.dtype != before.dtype):
            raise RuntimeError(f"Backward hook of {type(module).__name__} returned a {kind} of shape "
                               f"{list(after.shape)} and dtype {after.dtype} where the gradient has shape "
                               f"{list(before.shape)} and dtype {before.dtype}")
    return new


class BackwardHookCall:
    """The hooks' bookkeeping for one call of a module (PyTorch makes one ``BackwardHook`` per call)."""

    def __init__(self, module: Any, hooks: list, pre_hooks: list) -> None:
        self.module, self.hooks, self.pre_hooks = module, hooks, pre_hooks
        self.n_inputs = 0
        self.input_indices: "list | None" = None
        self.n_outputs = 0
        self.output_indices: list = []
        self.grad_outputs: "tuple | None" = None

    def setup_inputs(self, args: tuple) -> tuple:
        """The positional arguments, each tensor that requires grad passed through an identity node."""
        self.n_inputs = len(args)
        indices = [i for i, a in enumerate(args) if isinstance(a, Tensor) and a.requires_grad]
        if not indices or not is_grad_enabled():
            return args
        self.input_indices = indices
        wrapped = BackwardHookIdentity(self._input_hook)(*[args[i] for i in indices])
        wrapped = (wrapped,) if isinstance(wrapped, Tensor) else wrapped
        new_args = list(args)
        for i, t in zip(indices, wrapped):
            new_args[i] = t
        return tuple(new_args)

    def setup_outputs(self, output: Any) -> Any:
        """The output (a tensor or a tuple/list of them), each tensor passed through an identity node."""
        single = isinstance(output, Tensor)
        items = [output] if single else list(output) if isinstance(output, (tuple, list)) else None
        if items is None:
            return output
        self.n_outputs = len(items)
        indices = [i for i, o in enumerate(items) if isinstance(o, Tensor) and o.requires_grad]
        if not indices or not is_grad_enabled():
            return output
        self.output_indices = indices
        wrapped = BackwardHookIdentity(self._output_hook)(*[items[i] for i in indices])
        wrapped = (wrapped,) if isinstance(wrapped, Tensor) else wrapped
        for i, t in zip(indices, wrapped):
            items[i] = t
        return items[0] if single else type(output)(items)

    def _output_hook(self, grads: tuple) -> tuple:
        grad_outputs = _pack(self.output_indices, grads, self.n_outputs)
        for hook in list(self.pre_hooks):
            result = hook(self.module, grad_outputs)
            if result is not None:
                grad_outputs = _check_replacement("grad_output", self.module, grad_outputs, result)
        self.grad_outputs = grad_outputs
        if self.input_indices is None:  # no input requires grad: the hooks run here, with grad_input all None
            if self.hooks:
                warnings.warn("Full backward hook is firing when gradients are computed with respect to module "
                              "outputs since no inputs require gradients. See "
                              "https://docs.pytorch.org/docs/main/generated/torch.nn.Module.html"
                              "#torch.nn.Module.register_full_backward_hook for more details.", stacklevel=2)
            grad_inputs = (None,) * self.n_inputs
            for hook in list(self.hooks):
                result = hook(self.module, grad_inputs, grad_outputs)
                if result is not None and not (isinstance(result, tuple) and all(r is None for r in result)):
                    raise RuntimeError("Backward hook for Modules where no input requires gradient should always "
                                       "return None or None for all gradients.")
            self.grad_outputs = None
        return tuple(grad_outputs[i] for i in self.output_indices)

    def _input_hook(self, grads: tuple) -> tuple:
        grad_inputs = _pack(self.input_indices, grads, self.n_inputs)  # type: ignore[arg-type]
        if self.grad_outputs is None:  # the outputs' node did not run (their gradient is not needed)
            return grads
        for hook in list(self.hooks):
            result = hook(self.module, grad_inputs, self.grad_outputs)
            if result is not None:
                grad_inputs = _check_replacement("grad_input", self.module, grad_inputs, result)
        self.grad_outputs = None
        return tuple(grad_inputs[i] for i in self.input_indices)  # type: ignore[union-attr]
