"""The collectives of ``torch.distributed`` on the default group: checks, then the backend's call.

Each function checks its tensors (a tinyamp Tensor, contiguous, on the
backend's kind of device, matching sizes and dtypes), starts the backend's
collective on the raw arrays, in place, and returns a :class:`Work` handle when
``async_op=True`` (None otherwise, after completing it). A collective is not
recorded by autograd, as in PyTorch; the tensor's version counter moves.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import backend as device_backend
from ...tensor import Tensor
from .process_group import SUPPORTED_OPS, ReduceOp, Work, default_backend


def _check_tensor(name: str, tensor: Any, param: str = "tensor") -> Any:
    if not isinstance(tensor, Tensor):
        raise TypeError(f"Invalid function argument. Expected parameter `{param}` of type tinyamp.Tensor "
                        f"but got {type(tensor)} instead.")
    array = tensor.array
    if not array.flags.c_contiguous:
        raise ValueError(f"{name}: Tensors must be contiguous (got shape {list(tensor.shape)} with strides "
                         f"{array.strides}); call .contiguous() first")
    return array


def _check_group(name: str, group: Any) -> Any:
    backend = default_backend()
    if group is not None and group is not backend:
        raise ValueError(f"{name}: only the default process group (group=None) is supported")
    return backend


def _check_device(name: str, backend: Any, array: Any) -> None:
    on_gpu = device_backend.is_cupy_array(array)
    if backend.name != "nccl" and on_gpu:
        raise ValueError(f"{name}: the '{backend.name}' backend works on CPU tensors, got a tensor on "
                         f"cuda:{array.device.id} (use init_process_group(backend='nccl') for CUDA tensors)")


def _check_op(name: str, op: Any, array: Any) -> None:
    if not isinstance(op, ReduceOp):
        raise ValueError(f"{name}: op must be a ReduceOp (ReduceOp.SUM, AVG, PRODUCT, MIN, MAX), got {op!r}")
    if op not in SUPPORTED_OPS:
        raise ValueError(f"{name}: ReduceOp.{op.name} is not supported (tinyamp offers SUM, AVG, PRODUCT, "
                         "MIN and MAX)")
    if op is ReduceOp.AVG and not np.issubdtype(np.dtype(array.dtype), np.floating) \
            and np.dtype(array.dtype).name != "bfloat16":
        raise ValueError(f"{name}: ReduceOp.AVG needs a floating-point tensor, got {array.dtype}")
    if np.dtype(array.dtype) == np.bool_:
        raise TypeError(f"{name}: bool tensors cannot be reduced; convert to an integer dtype first")


def _finish(tensors: tuple, finish: Any, async_op: bool) -> "Work | None":
    for t in tensors:
        t._version[0] += 1
    if async_op:
        return Work(finish)
    finish()
    return None


def all_reduce(tensor: Tensor, op: ReduceOp = ReduceOp.SUM, group: Any = None, async_op: bool = False) -> "Work | None":
    """Reduce ``tensor`` across every rank in place: each rank ends with the same result."""
    backend = _check_group("all_reduce", group)
    array = _check_tensor("all_reduce", tensor)
    _check_device("all_reduce", backend, array)
    _check_op("all_reduce", op, array)
    return _finish((tensor,), backend.all_reduce(array, op), async_op)


def broadcast(tensor: Tensor, src: "int | None" = None, group: Any = None, async_op: bool = False,
              group_src: "int | None" = None) -> "Work | None":
    """Copy rank ``src``'s ``tensor`` into every other rank's ``tensor``."""
    backend = _check_group("broadcast", group)
    if src is None:
        src = group_src
    if not isinstance(src, int) or not 0 <= src < backend.size:
        raise ValueError(f"broadcast: src must be a rank in [0, {backend.size}), got {src!r}")
    array = _check_tensor("broadcast", tensor)
    _check_device("broadcast", backend, array)
    return _finish((tensor,), backend.broadcast(array, src), async_op)


def _check_pair(name: str, backend: Any, output_tensor: Any, input_tensor: Any, big: str) -> tuple:
    out = _check_tensor(name, output_tensor, "output_tensor")
    inp = _check_tensor(name, input_tensor, "input_tensor")
    _check_device(name, backend, out)
    _check_device(name, backend, inp)
    if out.dtype != inp.dtype:
        raise TypeError(f"{name}: output tensor must have the same type as input tensor (got "
                        f"{out.dtype} and {inp.dtype})")
    small, large = (inp, out) if big == "output" else (out, inp)
    if large.size != small.size * backend.size:
        if big == "output":
            raise ValueError(f"{name}: output tensor size must be equal to world_size times input tensor size "
                             f"(output {out.size}, input {inp.size}, world_size {backend.size})")
        raise ValueError(f"{name}: input tensor must be the same size as output size times world size "
                         f"(input {inp.size}, output {out.size}, world_size {backend.size})")
    return out, inp


def all_gather_into_tensor(output_tensor: Tensor, input_tensor: Tensor, group: Any = None,
                           async_op: bool = False) -> "Work | None":
    """Every rank's ``input_tensor`` concatenated in rank order into ``output_tensor`` (world_size times larger)."""
    backend = _check_group("all_gather_into_tensor", group)
    out, inp = _check_pair("all_gather_into_tensor", backend, output_tensor, input_tensor, "output")
    return _finish((output_tensor,), backend.all_gather(out, inp), async_op)


def reduce_scatter_tensor(output: Tensor, input: Tensor, op: ReduceOp = ReduceOp.SUM, group: Any = None,  # noqa: A002
                          async_op: bool = False) -> "Work | None":
    """``input`` reduced across ranks; rank r keeps the r-th of world_size equal pieces in ``output``."""
    backend = _check_group("reduce_scatter_tensor", group)
    out, inp = _check_pair("reduce_scatter_tensor", backend, output, input, "input")
    _check_op("reduce_scatter_tensor", op, inp)
    return _finish((output,), backend.reduce_scatter(out, inp, op), async_op)


def barrier(group: Any = None, async_op: bool = False, device_ids: Any = None) -> "Work | None":
    """Return once every rank has called ``barrier``."""
    backend = _check_group("barrier", group)
    backend.barrier()
    return Work() if async_op else None
