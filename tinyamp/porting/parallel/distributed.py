"""DistributedDataParallel: one model replica per process, gradients averaged across the group.

As ``torch.nn.parallel.DistributedDataParallel``:

- at construction the replicas are checked to have the same parameter shapes,
  and rank 0's parameters and buffers are broadcast (``init_sync``);
- parameters are assigned to buckets in reverse registration order (the order
  backward produces their gradients), one open bucket per dtype and device,
  the first closed at 1 MiB and the others at ``bucket_cap_mb``;
- each parameter gets a post-accumulate-grad hook; when every gradient of a
  bucket is in ``.grad``, that bucket (and any complete ones after it, in
  bucket order, so every rank issues the same sequence) is packed into its
  flat buffer, multiplied by ``1/world_size`` and all-reduced with SUM
  (PyTorch's order: divide, then sum); when the last bucket has gone out,
  the results are written back into the ``.grad`` of every parameter, before
  ``backward`` returns, so ``scaler.unscale_`` and the optimizer see averages;
- with ``find_unused_parameters=True``, a parameter the output does not depend
  on counts as ready at once (its slot reduces zeros, or its accumulated
  ``.grad``); a usage map is all-reduced with the buckets, and a parameter no
  rank used keeps its ``.grad`` as it was (None stays None, so an optimizer
  skips it: no weight decay), as PyTorch's globally unused parameters do;
- ``no_sync()`` turns the reduction off for the backward passes of forwards
  run inside it (gradient accumulation); the ``.grad`` accumulated locally is
  averaged by the first backward outside it;
- ``module`` is the wrapped model, and ``state_dict`` keys carry ``module.``.

Buffers. On the MPI backend a 16-bit gradient's bucket is float32 (MPI
reduces 16-bit floats as float32 anyway): each gradient is widened, scaled and
summed in float32 and rounded once back. On NCCL the bucket has the gradient's
dtype, as PyTorch's. The buffers are made once, so a CUDA graph of the step
captures the packing, the NCCL all-reduce and the unpacking on fixed memory.

tinyamp's engine accumulates leaf gradients when the whole backward has run,
so the hooks fire at its end: the buckets go out in order but do not overlap
with backward computation as they do in PyTorch.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import numpy as np

from ... import backend as device_backend
from ...autograd.graph import reachable_nodes
from ...grad_mode import is_grad_enabled
from ..distributed import mpi_backend, process_group
from ..distributed.process_group import ReduceOp
from ...tensor import Tensor
from ...nn.module import Module

_FIRST_BUCKET_BYTES = 1024 * 1024  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
_UNFINISHED = (
    "Expected to have finished reduction in the prior iteration before starting a new one. This error "
    "indicates that your module has parameters that were not used in producing loss. You can enable unused "
    "parameter detection by passing the keyword argument `find_unused_parameters=True` to "
    "`tinyamp.nn.parallel.DistributedDataParallel`, and by making sure all `forward` function outputs "
    "participate in calculating loss. Parameters that did not receive a gradient on this rank: {names}")


class _Bucket:
    """Parameters reduced together: their slots in one flat buffer of the reduction dtype."""

    def __init__(self, params: list, names: list, device: Any, dtype: Any) -> None:
        self.params, self.names, self.device, self.dtype = params, names, device, dtype
        self.slots = []
        start = 0
        for p in params:
            self.slots.append((start, start + p.numel()))
            start += p.numel()
        self.numel = start
        self.buffer: Any = None
        self.pending = 0


def _assign_buckets(params: list, first_cap: int, cap: int) -> list[list[int]]:
    """Parameter indices per bucket: reverse order, one open bucket per (device, dtype), closed at the cap."""
    open_buckets: dict = {}
    limits: dict = {}
    closed: list[list[int]] = []
    for index in reversed(range(len(params))):
        p = params[index]
        key = (p.device, p.dtype)
        members, size = open_buckets.get(key, ([], 0))
        members.append(index)
        size += p.numel() * p.array.itemsize
        limit = limits.setdefault(key, first_cap)
        if size >= limit:
            closed.append(members)
            open_buckets.pop(key, None)
            limits[key] = cap
        else:
            open_buckets[key] = (members, size)
    closed.extend(members for members, _ in open_buckets.values())
    return closed


class DistributedDataParallel(Module):
    """Data parallelism over the default process group (``torch.nn.parallel.DistributedDataParallel``)."""

    def __init__(self, module: Module, device_ids: Any = None, output_device: Any = None, dim: int = 0,
                 broadcast_buffers: bool = True, init_sync: bool = True, process_group: Any = None,
                 bucket_cap_mb: "float | None" = None, find_unused_parameters: bool = False,
                 check_reduction: bool = False, gradient_as_bucket_view: bool = False, static_graph: bool = False,
                 delay_all_reduce_named_params: Any = None, param_to_hook_all_reduce: Any = None,
                 mixed_precision: Any = None, device_mesh: Any = None,
                 skip_all_reduce_unused_params: bool = False) -> None:
        super().__init__()
        group = _group(process_group)
        if not isinstance(module, Module):
            raise TypeError(f"DistributedDataParallel: module must be a tinyamp.nn.Module, got "
                            f"{type(module).__name__}")
        for name, value in (("mixed_precision", mixed_precision), ("device_mesh", device_mesh),
                            ("delay_all_reduce_named_params", delay_all_reduce_named_params),
                            ("param_to_hook_all_reduce", param_to_hook_all_reduce)):
            if value is not None:
                raise ValueError(f"DistributedDataParallel: {name}= is not supported by tinyamp (use autocast "
                                 "and GradScaler for mixed precision)")
        self.module = module
        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        if not named:
            raise RuntimeError("DistributedDataParallel is not needed when a module doesn't have any parameter "
                               "that requires a gradient.")
        devices = {p.device for _, p in named}
        if len(devices) > 1:
            raise ValueError(f"DistributedDataParallel's input module must be on the same type of devices, but "
                             f"input module parameters locate in {sorted(str(d) for d in devices)}.")
        (device,) = devices
        if device.type == "cpu":
            if device_ids is not None or output_device is not None:
                raise ValueError(
                    f"DistributedDataParallel device_ids and output_device arguments only work with "
                    f"single-device/multiple-device GPU modules or CPU modules, but got device_ids {device_ids}, "
                    f"output_device {output_device}, and module parameters {{{device!r}}}.")
            if group.name == "nccl":
                raise ValueError("DistributedDataParallel: the module's parameters are on the CPU but the process "
                                 "group's backend is 'nccl'; move the model to cuda:LOCAL_RANK or use backend='mpi'")
        elif device_ids is not None:
            ids = [device_backend.Device(d if not isinstance(d, int) else f"cuda:{d}").index for d in device_ids]
            if ids != [device.index]:
                raise ValueError(f"DistributedDataParallel: device_ids {list(device_ids)} must name the one device "
                                 f"holding the module's parameters ({device})")
        self.device_ids = None if device_ids is None else list(device_ids)
        self.broadcast_buffers = bool(broadcast_buffers)
        self.find_unused_parameters = bool(find_unused_parameters)
        self.require_backward_grad_sync = True
        self.bucket_bytes_cap = int((25 if bucket_cap_mb is None else bucket_cap_mb) * 1024 * 1024)
        object.__setattr__(self, "_group", group)
        object.__setattr__(self, "_names", [n for n, _ in named])
        object.__setattr__(self, "_params", [p for _, p in named])
        self._verify_same_model()
        if init_sync:
            self._sync_module_states()
        buckets = []
        for members in _assign_buckets(self._params, _FIRST_BUCKET_BYTES, self.bucket_bytes_cap):
            params = [self._params[i] for i in members]
            dtype = group_reduction_dtype(group, params[0].dtype)
            bucket = _Bucket(params, [self._names[i] for i in members], device, dtype)
            bucket.buffer = device.xp.zeros(bucket.numel, dtype=dtype)
            buckets.append(bucket)
        object.__setattr__(self, "_buckets", buckets)
        object.__setattr__(self, "_bucket_of", {id(p): b for b in buckets for p in b.params})
        object.__setattr__(self, "_expect_hooks", False)
        object.__setattr__(self, "_ready", set())
        object.__setattr__(self, "_next_bucket", 0)
        object.__setattr__(self, "_works", [])
        object.__setattr__(self, "_used_here", None)  # find_unused_parameters: 1 per parameter used this pass
        object.__setattr__(self, "_hook_handles",
                           [p.register_post_accumulate_grad_hook(self._grad_ready) for p in self._params])

    # ------------------------------------------------------------ set-up
    def _verify_same_model(self) -> None:
        shapes = [tuple(p.shape) for p in self._params]
        everyone = self._group.mpi_comm.allgather(shapes)
        for rank, theirs in enumerate(everyone):
            if len(theirs) != len(shapes):
                raise RuntimeError(f"DDP expects same model across all ranks, but Rank {self._group.rank} has "
                                   f"{len(shapes)} params, while rank {rank} has inconsistent {len(theirs)} params.")
            for index, (mine, other) in enumerate(zip(shapes, theirs)):
                if mine != other:
                    raise RuntimeError(f"DDP expects same model across all ranks, but Rank {self._group.rank} "
                                       f"has parameter {self._names[index]} of shape {list(mine)}, while rank "
                                       f"{rank} has shape {list(other)}.")

    def _sync_module_states(self) -> None:
        """Rank 0's parameters and buffers, broadcast to every rank (in place)."""
        group = self._group
        for t in [*self.module.parameters(), *self.module.buffers()]:
            group.broadcast(t.array, 0)()
            t._version[0] += 1

    # ------------------------------------------------------------ forward
    def forward(self, *inputs: Any, **kwargs: Any) -> Any:
        if self._expect_hooks and self._ready:
            missing = [n for n, p in zip(self._names, self._params) if id(p) not in self._ready]
            raise RuntimeError(_UNFINISHED.format(names=", ".join(missing)))
        sync = is_grad_enabled() and self.require_backward_grad_sync and self.module.training
        object.__setattr__(self, "_expect_hooks", sync)
        self._ready.clear()
        object.__setattr__(self, "_next_bucket", 0)
        if self.broadcast_buffers and self.module.training:
            for buffer in self.module.buffers():
                self._group.broadcast(buffer.array, 0)()
        output = self.module(*inputs, **kwargs)
        if sync and self.find_unused_parameters:
            self._mark_unused(output)
        return output

    def _mark_unused(self, output: Any) -> None:
        """Parameters the output does not depend on count as ready now (their slots reduce zeros)."""
        tensors: list = []
        _flatten(output, tensors)
        used = set()
        for node in reachable_nodes(tensors):
            for edge in node._edges:
                if edge is not None and edge[0] is None:
                    used.add(id(edge[1]))
        object.__setattr__(self, "_used_here", np.array([id(p) in used for p in self._params], dtype=np.int32))
        for p in self._params:
            if id(p) not in used:
                self._grad_ready(p)

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Forwards run inside accumulate their gradients locally; the next synced backward averages them."""
        previous = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = previous

    # ------------------------------------------------------------ the reduction
    def _grad_ready(self, param: Tensor) -> None:
        if not self._expect_hooks or id(param) in self._ready:
            return
        self._ready.add(id(param))
        bucket = self._bucket_of[id(param)]
        bucket.pending += 1
        while self._next_bucket < len(self._buckets) and \
                self._buckets[self._next_bucket].pending == len(self._buckets[self._next_bucket].params):
            self._launch(self._buckets[self._next_bucket])
            object.__setattr__(self, "_next_bucket", self._next_bucket + 1)
        if self._next_bucket == len(self._buckets):
            self._finish()

    def _launch(self, bucket: _Bucket) -> None:
        buffer = bucket.buffer
        xp = bucket.device.xp
        for p, (start, end) in zip(bucket.params, bucket.slots):
            if p.grad is None:
                buffer[start:end] = 0
            else:
                buffer[start:end] = p.grad.array.reshape(-1)
        xp.multiply(buffer, buffer.dtype.type(1.0 / self._group.size), out=buffer)
        self._works.append((bucket, self._group.all_reduce(buffer, ReduceOp.SUM)))

    def _globally_unused(self) -> set:
        """Ids of the parameters no rank used in this pass (the usage map's all-reduce, on the host over MPI)."""
        used = self._used_here
        object.__setattr__(self, "_used_here", None)
        if used is None:
            return set()
        mpi_backend.all_reduce_host(self._group, used, "DistributedDataParallel (find_unused_parameters)")
        return {id(p) for p, count in zip(self._params, used) if count == 0}

    def _finish(self) -> None:
        unused = self._globally_unused()
        for bucket, finish in self._works:
            finish()
            buffer = bucket.buffer
            for p, (start, end) in zip(bucket.params, bucket.slots):
                if id(p) in unused:
                    continue  # no rank used it: its .grad stays as it was (None stays None)
                piece = buffer[start:end].reshape(p.shape)
                if p.grad is None:
                    p.grad = Tensor._wrap(piece.astype(p.dtype))
                else:
                    p.grad.array[...] = piece
                    p.grad._version[0] += 1
            bucket.pending = 0
        self._works.clear()
        self._ready.clear()
        object.__setattr__(self, "_expect_hooks", False)

    def extra_repr(self) -> str:
        return f"buckets={len(self._buckets)}, world_size={self._group.size}"


def group_reduction_dtype(group: Any, dtype: Any) -> Any:
    """The dtype a bucket of ``dtype`` gradients is reduced in: float32 for 16-bit floats on MPI, else ``dtype``."""
    if group.name != "nccl" and np.dtype(dtype).itemsize == 2 and np.dtype(dtype).kind in "fV":
        return np.dtype(np.float32)
    return np.dtype(dtype)


def _group(process_group_arg: Any) -> Any:
    group = process_group.default_backend()  # PyTorch's ValueError before init_process_group
    if process_group_arg is not None and process_group_arg is not group:
        raise ValueError("DistributedDataParallel: only the default process group is supported")
    return group


def _flatten(value: Any, found: list) -> None:
    if isinstance(value, Tensor):
        found.append(value)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _flatten(item, found)
    elif isinstance(value, dict):
        for item in value.values():
            _flatten(item, found)
