"""Memory accounting: what a training step keeps alive, and in which dtype.

Two questions a person studying mixed precision asks, answered from the live
objects rather than from a process-wide allocator:

- :func:`saved_tensor_bytes` walks the autograd graph behind a loss and adds up
  the arrays its nodes keep for backward ("activations saved for backward"),
  per dtype and per op. This is the number AMP roughly halves: a float16 run
  saves float16 activations.
- :func:`memory_split` puts that next to the model (parameters and buffers),
  the gradients and the optimizer state (momentum, Adam moments, float32
  master weights), as the mixed-precision write-up reports a step.

Each underlying array is counted once: two nodes saving the same tensor, or a
view and the array it views, share one buffer. Arrays an op keeps as its own
attributes (max-pool's int64 argmax indices, dropout's mask) count too. Leaf parameters (leaves that
require grad) are not activations: they are the model and are excluded, but
their low-precision copies made by autocast are included, because those exist
only for the step. On CUDA, :func:`gpu_pool_bytes` adds what CuPy's memory pool
holds (through ``tinyamp.backend.cupy()``, the one door to CuPy).
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from .. import backend
from .. import dtypes as dt
from ..autograd.graph import reachable_nodes
from ..tensor import Tensor

__all__ = ["saved_tensor_bytes", "memory_split", "gpu_pool_bytes", "format_bytes", "format_split"]

MB = 1e6  # the write-up reports decimal megabytes (563 MB vs 1100 MB)


def _owner(array: Any) -> Any:
    """The array that owns the memory: a view is charged to its base."""
    while getattr(array, "base", None) is not None and hasattr(array.base, "nbytes"):
        array = array.base
    return array


def _flatten(items: Iterable[Any]) -> list[Tensor]:
    out: list[Tensor] = []
    for item in items:
        if isinstance(item, Tensor):
            out.append(item)
        elif isinstance(item, (list, tuple)):
            out.extend(_flatten(item))
        elif item is not None:
            raise TypeError(f"saved_tensor_bytes: expected Tensors (or lists of them), got {type(item).__name__}")
    return out


def _saved_by(node: Any) -> list[tuple[Any, bool]]:
    """(array, is a leaf parameter) for each array ``node`` keeps for backward."""
    saved = [(array, tensor is not None and tensor.grad_fn is None and tensor._requires_grad)
             for array, tensor in node.saved_items()]
    return saved + _held_arrays(node)


def _held_arrays(node: Any) -> list[tuple[Any, bool]]:
    """Arrays an op keeps as its own attributes for backward (max-pool indices, a dropout mask).

    They are not declared in ``save_inputs``/``save_outputs`` but live as long as
    the node, so they are memory kept for backward all the same. Private
    attributes are the tape's bookkeeping and are skipped.
    """
    return [(value, False) for key, value in vars(node).items()
            if not key.startswith("_") and (isinstance(value, np.ndarray) or backend.is_cupy_array(value))]


def saved_tensor_bytes(*outputs: Any) -> dict:
    """Bytes the graph behind ``outputs`` keeps for backward, each array counted once.

    Returns ``{"total": int, "by_dtype": {"float16": int, ...}, "by_op": {"linear":
    int, ...}, "arrays": int, "nodes": int}``. ``by_op`` charges a shared array to
    the first node found saving it (the one closest to the outputs), which is
    enough to see which op keeps a float32 copy. Leaf parameters are excluded;
    inputs that need no gradient (the batch) and autocast's casts of parameters
    are included. Call it after the forward pass and before ``backward()``, which
    frees what it used (a freed graph is an error here, not a silent zero).
    """
    roots = _flatten(outputs)
    by_dtype: dict[str, int] = {}
    by_op: dict[str, int] = {}
    seen_arrays: dict[int, Any] = {}  # id(owner) -> owner (kept alive so ids stay unique)
    nodes = 0
    for node in reachable_nodes(roots):
        nodes += 1
        if node._freed:
            raise RuntimeError(f"saved_tensor_bytes: the graph was already freed by backward() (at "
                               f"{type(node).__name__}); measure after the forward pass and before backward, "
                               f"or run backward(retain_graph=True)")
        for array, is_param in _saved_by(node):
            owner = _owner(array)
            if is_param or id(owner) in seen_arrays:
                continue
            seen_arrays[id(owner)] = owner
            size = int(owner.nbytes)
            name = dt.dtype_name(owner.dtype)
            by_dtype[name] = by_dtype.get(name, 0) + size
            by_op[node.name] = by_op.get(node.name, 0) + size
    return {"total": sum(by_dtype.values()), "by_dtype": by_dtype, "by_op": by_op,
            "arrays": len(seen_arrays), "nodes": nodes}


class _Counter:
    """Adds array bytes once per underlying buffer, across all categories."""

    def __init__(self) -> None:
        self.seen: dict[int, Any] = {}

    def add(self, tensors: Iterable[Any]) -> int:
        total = 0
        for t in tensors:
            if t is None:
                continue
            array = _owner(t.array if isinstance(t, Tensor) else t)
            if not hasattr(array, "nbytes") or id(array) in self.seen:
                continue
            self.seen[id(array)] = array
            total += int(array.nbytes)
        return total


def _optimizer_state_tensors(optimizer: Any) -> list[Any]:
    found: list[Any] = []
    for state in getattr(optimizer, "state", {}).values():
        for value in state.values():
            if isinstance(value, Tensor) or hasattr(value, "nbytes"):
                found.append(value)
    return found


def _master_bytes(optimizer: Any) -> int:
    states = getattr(optimizer, "state", {}).values() if optimizer is not None else ()
    return _Counter().add([s["master_param"] for s in states if isinstance(s.get("master_param"), Tensor)])


def _gradients(model: Any, optimizer: Any) -> list[Any]:
    grads = [p.grad for p in model.parameters()] if model is not None else []
    if optimizer is not None:
        for group in optimizer.param_groups:
            grads.extend(p.grad for p in group["params"])
        for state in optimizer.state.values():
            master = state.get("master_param")
            if isinstance(master, Tensor):
                grads.append(master.grad)  # float32 master grads, between unscale_ and step
    return grads


def gpu_pool_bytes() -> "dict | None":
    """CuPy's default memory pool: ``{"used": bytes in live arrays, "held": bytes the pool holds}``.

    ``held`` includes freed blocks the pool keeps for reuse, so it bounds the
    peak of the process from above since the pool was last emptied (CuPy keeps
    no peak counter). None when CUDA is unavailable.
    """
    if not backend.cuda_available():
        return None
    pool = backend.cupy().get_default_memory_pool()
    return {"used": int(pool.used_bytes()), "held": int(pool.total_bytes())}


def memory_split(model: Any = None, optimizer: Any = None, loss: "Tensor | None" = None, *,
                 activations: "dict | None" = None) -> dict:
    """Model, gradients, optimizer state and saved activations, in bytes and MB.

    ``activations`` is a :func:`saved_tensor_bytes` result measured earlier (the
    usual case: measure after the forward pass, call this after the optimizer
    step, when the gradients and the optimizer state exist); otherwise ``loss``'s
    graph is walked now. Each buffer is counted once across the categories, in
    the order model, gradients, optimizer state. Returns ``{"model",
    "gradients", "optimizer_state", "activations", "total"}`` in bytes, plus
    ``"activations_by_dtype"``, ``"mb"`` (the same in MB) and, on CUDA,
    ``"gpu_pool"`` (see :func:`gpu_pool_bytes`).
    """
    if activations is None:
        activations = saved_tensor_bytes(loss) if loss is not None else {"total": 0, "by_dtype": {}}
    counter = _Counter()
    split = {
        "model": counter.add(list(model.parameters()) + list(model.buffers())) if model is not None else 0,
        "gradients": counter.add(_gradients(model, optimizer)),
        "optimizer_state": counter.add(_optimizer_state_tensors(optimizer)) if optimizer is not None else 0,
        "activations": int(activations["total"]),
    }
    split["total"] = sum(split.values())
    # The float32 master weights' share of the optimizer state (0 without master weights: O1, float32).
    split["master_weights"] = _master_bytes(optimizer)
    split["activations_by_dtype"] = dict(activations.get("by_dtype", {}))
    split["mb"] = {key: round(split[key] / MB, 3) for key in
                   ("model", "gradients", "optimizer_state", "activations", "total")}
    on_cuda = model is not None and any(p.is_cuda for p in model.parameters())
    pool = gpu_pool_bytes() if on_cuda else None
    if pool is not None:
        split["gpu_pool"] = pool
    return split


def format_bytes(n: float) -> str:
    """``12.35 MB`` (decimal megabytes, as the write-up), ``812.0 kB`` or ``96 B``."""
    if n >= MB:
        return f"{n / MB:.2f} MB"
    if n >= 1e3:
        return f"{n / 1e3:.1f} kB"
    return f"{int(n)} B"


def format_split(split: dict) -> str:
    """A few aligned lines for a :func:`memory_split` result."""
    by_dtype = ", ".join(f"{name} {format_bytes(n)}" for name, n in sorted(split["activations_by_dtype"].items()))
    rows = [("model (parameters + buffers)", split["model"]),
            ("gradients", split["gradients"]),
            ("optimizer state" + (f" (float32 master weights {format_bytes(split['master_weights'])})"
                                  if split.get("master_weights") else ""), split["optimizer_state"]),
            ("activations saved for backward", split["activations"]),
            ("total", split["total"])]
    width = max(len(label) for label, _ in rows)
    lines = [f"  {label.ljust(width)}  {format_bytes(n):>10}" for label, n in rows]
    if by_dtype:
        lines[3] += f"  ({by_dtype})"
    pool = split.get("gpu_pool")
    if pool is not None:
        lines.append(f"  {'GPU pool: used / held (peak bound)'.ljust(width)}  "
                     f"{format_bytes(pool['used']):>10} / {format_bytes(pool['held'])}")
    return "\n".join(lines)
