"""The backward engine: replay the reachable part of the tape in reverse; ``backward`` and ``grad``.

Nodes are visited in decreasing sequence number from a heap: every node is
recorded after the nodes that made its inputs, so this is a reverse topological
order, found without recursion (a 10,000-op chain is fine). Gradients for one
node's outputs are summed before the node runs. Backward runs with grad mode
equal to ``create_graph`` (so the backward ops are themselves recorded for
higher-order gradients) and with autocast off (the recorded casts already put
every gradient back in its tensor's dtype).
"""

from __future__ import annotations

import heapq
from typing import Any, Sequence

import numpy as np

from .. import dtypes as dt
from .. import backend
from ..backend import array_module
from ..precision import current_trace, reset_autocast, set_autocast
from ..tensor import Tensor
from ..grad_mode import _grad_enabled


def _check_gradient(node: Any, index: int, grad: Tensor, shape: tuple, dtype: Any) -> None:
    """A gradient must match its input exactly: never summed or cast to fit.

    A mismatch from a built-in op is a bug (often a missing Cast, which would
    otherwise hide a precision loss). A user Function's gradients were fitted
    already, as PyTorch fits them (``CustomFunction._run_backward``).
    """
    if grad.shape != shape or grad.dtype != dtype:
        raise RuntimeError(
            f"Function {type(node).__name__}Backward returned an invalid gradient at index {index}: "
            f"got shape {list(grad.shape)} dtype {dt.dtype_name(grad.dtype)}, expected shape "
            f"{list(shape)} dtype {dt.dtype_name(dtype)}")


def _hooked(hook: Any, grad: Tensor) -> Tensor:
    """``hook(grad)``'s replacement for ``grad`` (or grad itself): same shape, dtype and device (PyTorch's checks)."""
    replaced = hook(grad)
    if replaced is None:
        return grad
    name = getattr(hook, "__name__", type(hook).__name__)
    if not isinstance(replaced, Tensor):
        raise TypeError(f"expected Tensor, but hook '{name}' returned '{type(replaced).__name__}'")
    if replaced.array.dtype != grad.array.dtype:
        raise RuntimeError(f"hook '{name}' has changed the type of value (was {dt.dtype_name(grad.dtype)} "
                           f"got {dt.dtype_name(replaced.dtype)})")
    if replaced.device != grad.device:
        raise RuntimeError(f"hook '{name}' has changed the device of value (was {grad.device} got {replaced.device})")
    if replaced.array.shape != grad.array.shape:
        raise RuntimeError(f"hook '{name}' has changed the size of value (was {list(grad.shape)} "
                           f"got {list(replaced.shape)})")
    return replaced


def _accumulate(store: dict, key: Any, grad: Tensor) -> None:
    previous = store.get(key)
    store[key] = grad if previous is None else previous + grad


def _zeros(shape: tuple, dtype: Any, like: Tensor) -> Tensor:
    xp = like.device.xp
    return Tensor._wrap(xp.zeros(shape, dtype=dtype))


# A scaled float16 backward overflows by design (the scaler skips the step), and
# accumulating into .grad adds inf to -inf: NumPy's floating-point warnings are off
# for the whole call, set once per backward, never per node.
@np.errstate(all="ignore")
def run_backward(roots: Sequence[Tensor], root_grads: Sequence[Tensor], retain_graph: bool,
                 create_graph: bool, inputs: Sequence[Tensor] | None = None,
                 accumulate: bool = True) -> "list[Tensor | None]":
    """Propagate ``root_grads`` from ``roots`` to the leaves.

    With ``accumulate`` the leaf gradients are added into ``.grad`` (``backward``);
    otherwise the gradients of ``inputs`` are returned (``autograd.grad``).
    """
    node_grads: dict[tuple[int, int], Tensor] = {}  # (id(node), output index) -> grad
    leaf_grads: dict[int, Tensor] = {}              # id(leaf) -> grad
    leaves: dict[int, Tensor] = {}
    heap: list[tuple[int, int, Any]] = []
    queued: set[int] = set()

    # Which non-leaf tensors' gradients were asked for (autograd.grad on an intermediate).
    wanted: dict[tuple[int, int], None] = {}
    if inputs is not None:
        for t in inputs:
            if t.grad_fn is not None:
                wanted[(id(t.grad_fn), t._out_index)] = None
    captured: dict[tuple[int, int], Tensor] = {}

    def push(node: Any) -> None:
        if id(node) not in queued:
            queued.add(id(node))
            heapq.heappush(heap, (-node.seq, id(node), node))

    for root, grad in zip(roots, root_grads):
        if root.grad_fn is None:
            leaves[id(root)] = root
            _accumulate(leaf_grads, id(root), grad)
        else:
            _accumulate(node_grads, (id(root.grad_fn), root._out_index), grad)
            push(root.grad_fn)

    token_grad = _grad_enabled.set(bool(create_graph))
    token_amp = set_autocast(None)
    tracer = current_trace()  # an open precision report (study.report), else None
    if tracer is not None:
        tracer.begin_backward()
    try:
        while heap:
            _, node_id, node = heapq.heappop(heap)
            if tracer is not None:
                tracer.node = node  # the report names the node each backward op serves
            grads = []
            missing = False  # an output of this node that received no gradient
            for index in range(len(node._output_meta)):
                grad = node_grads.pop((node_id, index), None)
                if grad is None:
                    missing = True
                else:
                    if node._output_hooks and index in node._output_hooks:
                        for hook in node._output_hooks[index]:
                            grad = _hooked(hook, grad)
                    if wanted and (node_id, index) in wanted:
                        captured[(node_id, index)] = grad
                grads.append(grad)
            if missing:
                received = [g for g in grads if g is not None]
                if not received:
                    continue
                # Outputs that received no gradient (an unused split piece) count as zeros.
                grads = [g if g is not None else _zeros(shape, dtype, received[0])
                         for g, (shape, dtype) in zip(grads, node._output_meta)]
            input_grads = node._run_backward(grads)
            if tracer is not None:
                tracer.record_gradients(node, input_grads)  # what this node handed back (the shadow run reads it)
            if len(input_grads) != len(node._edges):
                raise RuntimeError(f"{type(node).__name__}.backward returned {len(input_grads)} "
                                   f"gradients for {len(node._edges)} inputs")
            for index, (edge, grad) in enumerate(zip(node._edges, input_grads)):
                if edge is None or grad is None:
                    continue
                shape, dtype = node._input_meta[index]
                data = grad.array
                if data.shape != shape or data.dtype != dtype:  # compared here first: this runs on every edge
                    _check_gradient(node, index, grad, shape, dtype)
                parent, target = edge
                if parent is None:
                    leaves[id(target)] = target
                    _accumulate(leaf_grads, id(target), grad)
                else:
                    _accumulate(node_grads, (id(parent), target), grad)
                    push(parent)
            if not retain_graph:
                node.release()
    finally:
        if tracer is not None:
            tracer.end_backward()
        reset_autocast(token_amp)
        _grad_enabled.reset(token_grad)

    # Leaf hooks see the fully summed gradient, then it lands in .grad or is returned.
    for key, leaf in leaves.items():
        grad = leaf_grads[key]
        for hook in leaf._hooks or ():
            grad = _hooked(hook, grad)
        leaf_grads[key] = grad

    if accumulate:
        allowed = None if inputs is None else {id(t) for t in inputs}
        # .grad is later written in place (accumulation, unscale_, clipping), so
        # each leaf must own its buffer. A fresh array from a backward op is
        # owned already; copy only views (e.g. mean's broadcast gradient), the
        # caller's seed, and an array handed to two leaves (x + y gives both gy).
        handed_out = {id(g.array) for g in root_grads}
        for key, leaf in leaves.items():
            if allowed is not None and key not in allowed:
                continue
            grad = leaf_grads[key]  # without create_graph only its array is used: no detached Tensor needed
            if leaf.grad is None:
                data = grad.array
                if not create_graph and (data.base is not None or id(data) in handed_out):
                    data = data.copy()
                handed_out.add(id(data))
                leaf.grad = grad if create_graph else Tensor._wrap(data)
            elif create_graph:
                leaf.grad = leaf.grad + grad
            else:
                leaf.grad.array += grad.array
                leaf.grad._version[0] += 1
            if leaf._post_accumulate_hooks:
                for hook in tuple(leaf._post_accumulate_hooks):
                    hook(leaf)
        return []
    results: list[Tensor | None] = []
    for t in inputs or ():
        if t.grad_fn is None:
            results.append(leaf_grads.get(id(t)))
        else:
            results.append(captured.get((id(t.grad_fn), t._out_index)))
    return results


# ----------------------------------------------------------- the public entry points

def _as_list(x: "Tensor | Sequence[Tensor] | None") -> list:
    if x is None:
        return []
    return [x] if isinstance(x, Tensor) else list(x)


_ONES: dict = {}  # (module, device, dtype) -> a read-only 0-d one, the seed of every scalar loss
backend.on_cuda_switch(_ONES.clear)  # arrays of one CUDA backend never reach the other


def _ones(like: Any) -> Any:
    """Ones shaped like ``like``: for a scalar, a kept 0-d array (a fill per backward saved on a GPU).

    It is never written: a leaf that would receive it as its ``.grad`` gets a
    copy (the "handed out" rule of ``run_backward``), and NumPy's copy is
    read-only so any write would raise.
    """
    xp = array_module(like)
    if like.ndim != 0:
        return xp.ones(like.shape, dtype=like.dtype)
    key = (id(xp), None if xp is np else like.device.id, like.dtype)
    one = _ONES.get(key)
    if one is None:
        one = _ONES[key] = xp.ones((), dtype=like.dtype)
        if xp is np:
            one.flags.writeable = False
    return one


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
            if out.array.size != 1:
                raise RuntimeError(f"{caller}: grad can be implicitly created only for scalar outputs; "
                                   f"output {i} has shape {list(out.shape)}, pass a gradient")
            g = Tensor._wrap(_ones(out.array))
        elif not isinstance(g, Tensor):
            raise TypeError(f"{caller}: gradients must be Tensors or None, got {type(g).__name__}")
        elif g.array.shape != out.array.shape or g.array.dtype != out.array.dtype:
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


def _tensor_backward(self: Tensor, gradient: "Tensor | None" = None, retain_graph: bool | None = None,
                     create_graph: bool = False, inputs: "Sequence[Tensor] | None" = None) -> None:
    """``Tensor.backward``: accumulate d(self)/d(leaf) into every leaf's ``.grad``."""
    backward(self, gradient, retain_graph, create_graph, inputs=inputs)


Tensor.backward = _tensor_backward  # the engine builds on Tensor (see tensor.py)
