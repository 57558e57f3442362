"""Autograd: the tape (Function), the engine and the public entry points.

``backward`` accumulates into leaves' ``.grad``; ``grad`` returns gradients and
leaves ``.grad`` alone. Both follow PyTorch's signatures and defaults:
``retain_graph`` defaults to ``create_graph``.
"""

from __future__ import annotations

from typing import Sequence

from ..tensor import Tensor
from .custom_function import CustomFunction
from .engine import run_backward
from .grad_mode import enable_grad, inference_mode, is_grad_enabled, no_grad, set_grad_enabled

# PyTorch's name for the base of user-defined Functions (built-in ops subclass
# autograd.function.Function, which has no apply).
Function = CustomFunction

__all__ = ["Function", "backward", "grad", "no_grad", "enable_grad", "set_grad_enabled", "inference_mode",
           "is_grad_enabled", "gradcheck", "gradgradcheck"]


def _as_list(x: "Tensor | Sequence[Tensor] | None") -> list:
    if x is None:
        return []
    return [x] if isinstance(x, Tensor) else list(x)


def _seed_gradients(outputs: list, grad_outputs: list, caller: str) -> list:
    """One gradient per output; an implicit one only for scalars."""
    if grad_outputs and len(grad_outputs) != len(outputs):
        raise RuntimeError(f"{caller}: got {len(grad_outputs)} gradients for {len(outputs)} outputs")
    seeds = []
    for i, out in enumerate(outputs):
        if not isinstance(out, Tensor):
            raise TypeError(f"{caller}: outputs must be Tensors, got {type(out).__name__}")
        if not out.requires_grad:
            raise RuntimeError(f"{caller}: element {i} of tensors does not require grad and does not "
                               f"have a grad_fn")
        g = grad_outputs[i] if grad_outputs else None
        if g is None:
            if out.data.size != 1:
                raise RuntimeError(f"{caller}: grad can be implicitly created only for scalar outputs; "
                                   f"output {i} has shape {list(out.shape)}, pass a gradient")
            g = Tensor._wrap(out.device.xp.ones(out.shape, dtype=out.dtype))
        elif not isinstance(g, Tensor):
            raise TypeError(f"{caller}: gradients must be Tensors or None, got {type(g).__name__}")
        elif g.shape != out.shape or g.dtype != out.dtype:
            raise RuntimeError(f"{caller}: mismatch in shape or dtype: gradient has shape {list(g.shape)} "
                               f"and dtype {g.dtype}, output {i} has shape {list(out.shape)} and dtype {out.dtype}")
        seeds.append(g)
    return seeds


def backward(tensors: "Tensor | Sequence[Tensor]", grad_tensors: "Tensor | Sequence[Tensor | None] | None" = None,
             retain_graph: bool | None = None, create_graph: bool = False,
             inputs: "Sequence[Tensor] | None" = None) -> None:
    """Sum of d(tensors)/d(leaf), weighted by ``grad_tensors``, added into each leaf's ``.grad``."""
    outputs = _as_list(tensors)
    seeds = _seed_gradients(outputs, _as_list(grad_tensors) if grad_tensors is not None else [], "backward")
    if retain_graph is None:
        retain_graph = create_graph
    run_backward(outputs, seeds, retain_graph, create_graph,
                 inputs=None if inputs is None else _as_list(inputs), accumulate=True)


def grad(outputs: "Tensor | Sequence[Tensor]", inputs: "Tensor | Sequence[Tensor]",
         grad_outputs: "Tensor | Sequence[Tensor | None] | None" = None, retain_graph: bool | None = None,
         create_graph: bool = False, allow_unused: bool = False) -> tuple:
    """Gradients of ``outputs`` with respect to ``inputs``, returned (``.grad`` untouched)."""
    outs = _as_list(outputs)
    ins = _as_list(inputs)
    for i, t in enumerate(ins):
        if not isinstance(t, Tensor) or not t.requires_grad:
            raise RuntimeError(f"grad: input {i} does not require grad")
    seeds = _seed_gradients(outs, _as_list(grad_outputs) if grad_outputs is not None else [], "grad")
    if retain_graph is None:
        retain_graph = create_graph
    results = run_backward(outs, seeds, retain_graph, create_graph, inputs=ins, accumulate=False)
    for i, (t, g) in enumerate(zip(ins, results)):
        if g is None and not allow_unused:
            raise RuntimeError(f"grad: one of the differentiated Tensors (input {i}, shape {list(t.shape)}) "
                               f"appears to not have been used in the graph. Set allow_unused=True "
                               f"if this is the desired behavior.")
    if not create_graph:
        results = [None if g is None else g.detach() for g in results]
    return tuple(results)


from .gradcheck import gradcheck, gradgradcheck  # noqa: E402 - gradcheck uses grad() above
