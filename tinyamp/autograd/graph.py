"""Reading the recorded graph without running it: the nodes a set of tensors depends on.

The engine walks the tape in its own order (decreasing sequence numbers, with
gradients); everything else that looks at the graph (the scaler's bfloat16
check, memory accounting) goes through :func:`reachable_nodes`, so the node's
private edge list is read in one place besides the engine.
"""

from __future__ import annotations

from typing import Iterable, Iterator

from ..tensor import Tensor
from . import function
from .function import Function


def reachable_nodes(tensors: Iterable[Tensor]) -> Iterator[Function]:
    """Every node reachable from ``tensors``' ``grad_fn``, each once, depth first.

    Leaves and tensors without history contribute nothing. The walk is
    iterative (a 10,000-op chain is fine) and lazy: stop consuming to stop it.
    """
    stack = [t.grad_fn for t in tensors if t.grad_fn is not None]
    seen: set[int] = set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        yield node
        stack.extend(edge[0] for edge in node._edges if edge is not None and edge[0] is not None)


def sequence_mark() -> int:
    """A number below the sequence number of every node recorded from now on (and above every earlier one)."""
    return next(function._sequence)


def region_inputs(outputs: Iterable[Tensor], since: int) -> list:
    """Where the graph of ``outputs`` recorded since ``sequence_mark()`` gave ``since`` leaves that region.

    One ``(parent, target, shape, dtype)`` per edge from a region node (or an output) to a leaf
    (``parent`` None, ``target`` the leaf) or to an earlier node (``target`` its output index), with
    the shape and dtype recorded on that edge; an edge is listed once per use.
    """
    leaving: list = []
    stack = []
    for t in outputs:
        node = t.grad_fn
        if node is None:
            if t.requires_grad:
                leaving.append((None, t, t.shape, t.dtype))
        elif node.seq < since:
            leaving.append((node, t._out_index, t.shape, t.dtype))
        else:
            stack.append(node)
    seen: set[int] = set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        for edge, (shape, dtype) in zip(node._edges, node._input_meta):
            if edge is None:
                continue
            parent, target = edge
            if parent is None or parent.seq < since:
                leaving.append((parent, target, shape, dtype))
            else:
                stack.append(parent)
    return leaving
