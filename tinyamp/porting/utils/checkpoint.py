"""``torch.utils.checkpoint``: activation checkpointing, ``checkpoint(fn, *args, use_reentrant=False)``.

``checkpoint`` runs ``fn`` and keeps none of the tensors its ops save for
backward: the region's graph is dropped as soon as ``fn`` returns, and one
``Checkpoint`` node stands for it, holding only the arguments. Its backward
runs ``fn`` again, with the autocast state, grad mode and (``preserve_rng_state``)
the random generators' state of the first run, so dropout draws the same mask
and a LOWER op runs in the same dtype, and takes the gradients of the
recomputed outputs with respect to the arguments and to every leaf ``fn``
used (the module's parameters). Memory: only the arguments and outputs of the
region outlive its forward; the activations inside come back for the
duration of its backward.

``use_reentrant`` is PyTorch's: leaving it out warns, as PyTorch 2.13 does,
and means True. Both variants compute the same gradients here; True keeps
PyTorch's reentrant behaviours that code can notice: keyword arguments are
refused, and when no argument requires grad the output does not either (with
PyTorch's warning). A tensor ``fn`` closes over that requires grad and was
made outside it (not a leaf) must be passed as an argument instead.

The arguments are saved tensors: one written in place between the forward and
the backward (its version moved) raises autograd's "modified by an inplace
operation" error at the backward, as PyTorch does for both variants; the
recompute would otherwise run on the new values.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable, Iterable

from ... import backend
from ... import random as ta_random
from ...autograd.function import FREED_MESSAGE, Function, modified_error
from ...autograd.engine import grad as autograd_grad
from ...grad_mode import enable_grad, is_grad_enabled, no_grad
from ...autograd.graph import region_inputs, sequence_mark
from ...precision import NEUTRAL, current_autocast, current_scope, reset_autocast, reset_scope, set_autocast, set_scope
from ...tensor import Tensor

_REENTRANT_WARNING = ("torch.utils.checkpoint: the use_reentrant parameter should be passed explicitly. Starting in "
                      "PyTorch 2.9, calling checkpoint without use_reentrant will raise an exception. "
                      "use_reentrant=False is recommended, but if you need to preserve the current default "
                      "behavior, you can pass use_reentrant=True. Refer to docs for more details on the "
                      "differences between the two variants.")
_SEQUENTIAL_WARNING = ("torch.utils.checkpoint.checkpoint_sequential: the use_reentrant parameter should be passed "
                       "explicitly. In version 2.9 we will raise an exception if use_reentrant is not passed. "
                       "use_reentrant=False is recommended, but if you need to preserve the current default "
                       "behavior, you can pass use_reentrant=True. Refer to docs for more details on the "
                       "differences between the two variants.")


def _rng_devices(args: Iterable[Any]) -> list:
    """The CPU and the CUDA devices of the tensor arguments: the generators a recompute must replay."""
    devices = [backend.CPU]
    for a in args:
        if isinstance(a, Tensor) and a.device.type == "cuda" and a.device not in devices:
            devices.append(a.device)
    return devices


class Checkpoint(Function):
    """outputs = fn(*args), nothing inside saved; backward: fn again (same autocast, RNG), then its gradients"""

    precision = NEUTRAL

    def __init__(self, function: Callable, args: tuple, kwargs: dict, preserve_rng_state: bool) -> None:
        self.function, self.args, self.kwargs = function, args, kwargs
        self.arg_versions = [a._version[0] if isinstance(a, Tensor) else None for a in args]
        self.autocast, self.scope = current_autocast(), current_scope()
        self.rng = ({d: ta_random.snapshot(d) for d in _rng_devices(args)} if preserve_rng_state else None)
        self.arg_positions: list = []   # per node input: (argument position, None) or (None, a leaf fn used)

    def run(self) -> tuple:
        """The forward with grad on, recorded (the node's inputs are read off its graph, then it is dropped)."""
        mark = sequence_mark()
        with enable_grad():
            outputs = self.function(*self.args, **self.kwargs)
        return outputs, mark

    def backward(self, *grads: Tensor) -> tuple:
        if self.function is None:
            raise RuntimeError(FREED_MESSAGE)
        for a, version in zip(self.args, self.arg_versions):
            if version is not None and a._version[0] != version:
                raise modified_error(self, a.shape, a.dtype, version, a._version[0])
        create_graph = is_grad_enabled()
        detached = [a.detach().requires_grad_(a.requires_grad) if isinstance(a, Tensor) else a for a in self.args]
        now = {d: ta_random.snapshot(d) for d in self.rng} if self.rng is not None else None
        token, scope_token = set_autocast(self.autocast), set_scope(self.scope)
        try:
            if self.rng is not None:
                for device, state in self.rng.items():
                    ta_random.restore(device, state)
            with enable_grad():
                outputs = self.function(*detached, **self.kwargs)
        finally:
            reset_scope(scope_token)
            reset_autocast(token)
            if now is not None:
                for device, state in now.items():
                    ta_random.restore(device, state)
        outs = _tensors_of(outputs)
        roots, seeds = [], []
        for out, g in zip(outs, grads):
            if out.requires_grad and g is not None:
                roots.append(out)
                seeds.append(g)
        inputs = [detached[p] if p is not None else leaf for p, leaf in self.arg_positions]
        if not roots:
            return tuple(None for _ in inputs)
        return tuple(autograd_grad(roots, inputs, seeds, retain_graph=create_graph, create_graph=create_graph,
                                   allow_unused=True))

    def release(self) -> None:
        super().release()
        self.function, self.args, self.kwargs, self.rng = None, (), {}, None


def _tensors_of(outputs: Any) -> list:
    if isinstance(outputs, Tensor):
        return [outputs]
    if isinstance(outputs, (tuple, list)):
        return [o for o in outputs if isinstance(o, Tensor)]
    return []


def _replace_tensors(outputs: Any, new: list) -> Any:
    if isinstance(outputs, Tensor):
        return new[0]
    if isinstance(outputs, (tuple, list)):
        it = iter(new)
        return type(outputs)(next(it) if isinstance(o, Tensor) else o for o in outputs)
    return outputs


def checkpoint(function: Callable, *args: Any, use_reentrant: "bool | None" = None,
               context_fn: "Callable | None" = None, determinism_check: str = "default", debug: bool = False,
               preserve_rng_state: bool = True, early_stop: bool = True, **kwargs: Any) -> Any:
    """``function(*args, **kwargs)`` without keeping its activations; they are recomputed in backward."""
    if use_reentrant is None:
        warnings.warn(_REENTRANT_WARNING, stacklevel=2)
        use_reentrant = True
    if use_reentrant and kwargs:
        raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
    if context_fn is not None and use_reentrant:
        raise ValueError("Passing `context_fn` or `debug` is only supported when use_reentrant=False.")
    if determinism_check not in ("default", "none"):
        raise ValueError(f"determinism_check should be one of ['default', 'none'], but got {determinism_check}")
    if not is_grad_enabled():
        return function(*args, **kwargs)
    if use_reentrant and not any(isinstance(a, Tensor) and a.requires_grad for a in args):
        warnings.warn("None of the inputs have requires_grad=True. Gradients will be None", stacklevel=2)
        with no_grad():
            return function(*args, **kwargs)
    node = Checkpoint(function, args, kwargs, preserve_rng_state)
    outputs, mark = node.run()
    outs = _tensors_of(outputs)
    positions, inputs = _node_inputs(args, region_inputs(outs, mark))
    node.arg_positions = positions
    fresh = [Tensor._wrap(o.array) for o in outs]
    keep = [o.requires_grad for o in outs]
    result = _replace_tensors(outputs, fresh)
    # The region's graph, and every activation its ops saved, goes with the first run's outputs.
    del outputs, outs
    if inputs:
        node._record_and_trace(inputs, fresh)
    for t, needs_grad in zip(fresh, keep):
        if not needs_grad:  # an output that needed no gradient (an integer, a detached tensor)
            t.grad_fn, t._requires_grad = None, False
    return result


def checkpoint_sequential(functions: Any, segments: int, input: Any,  # noqa: A002 - torch name
                          use_reentrant: "bool | None" = None, **kwargs: Any) -> Any:
    """Run ``functions`` (a list or an ``nn.Sequential``) in ``segments`` pieces, each but the last checkpointed."""
    if use_reentrant is None:
        warnings.warn(_SEQUENTIAL_WARNING, stacklevel=2)
        use_reentrant = True
    preserve = kwargs.pop("preserve_rng_state", True)
    if kwargs:
        raise ValueError("Unexpected keyword arguments: " + ",".join(kwargs))
    if hasattr(functions, "children") and not isinstance(functions, (list, tuple)):
        functions = list(functions.children())

    def run_function(start: int, end: int) -> Callable:
        def forward(x: Any) -> Any:
            for j in range(start, end + 1):
                x = functions[j](x)
            return x
        return forward

    segment_size = len(functions) // segments
    end = -1
    for start in range(0, segment_size * (segments - 1), segment_size):
        end = start + segment_size - 1
        input = checkpoint(run_function(start, end), input, use_reentrant=use_reentrant,
                           preserve_rng_state=preserve)
    return run_function(end + 1, len(functions) - 1)(input)


def _node_inputs(args: tuple, leaving: list) -> "tuple[list, list]":  # noqa: C901
    """The node's inputs: the arguments that require grad, then each leaf ``fn`` used (``region_inputs``)."""
    positions, inputs = [], []
    by_edge = {}
    for i, a in enumerate(args):
        if isinstance(a, Tensor) and a.requires_grad:
            positions.append((i, None))
            inputs.append(a)
            by_edge[(id(a.grad_fn), a._out_index) if a.grad_fn is not None else id(a)] = i
    seen = set()
    for parent, target, shape, dtype in leaving:
        key = (id(parent), target) if parent is not None else id(target)
        if key in by_edge or key in seen:
            continue
        if parent is not None:
            raise RuntimeError(f"checkpoint: the function uses a tensor of shape {list(shape)} and dtype {dtype} "
                               f"that requires grad and was made outside it by {type(parent).__name__} (not a leaf, "
                               f"not an argument); pass it to checkpoint as an argument")
        seen.add(key)
        positions.append((None, target))
        inputs.append(target)
    return positions, inputs
