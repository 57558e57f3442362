"""Reading the recorded graph without running it: the nodes a set of tensors depends on.

The engine walks the tape in its own order (decreasing sequence numbers, with
gradients); everything else that looks at the graph (the scaler's bfloat16
check, memory accounting) goes through :func:`reachable_nodes`, so the node's
private edge list is read in one place besides the engine.
"""

from __future__ import annotations

from typing import Iterable, Iterator

from ..tensor import Tensor
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
