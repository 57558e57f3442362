"""The Function base class: the one place an op is prepared, autocast, run and recorded.

An op is a subclass with three things side by side::

    class Exp(Function):
        '''y = exp(x); dx = gy * y'''
        precision = FP32
        save_outputs = (0,)

        def forward(self, xp, x):           # raw numpy/cupy arrays in and out
            return xp.exp(x)

        def backward(self, gy):             # Tensors in and out, written in tinyamp ops
            (y,) = self.saved_tensors
            return gy * y

``Exp()(x)`` runs it. ``__call__`` turns Python scalars into tensors of the
operand's dtype, lets autocast insert recorded ``Cast`` ops, runs ``forward`` and,
when grad mode is on and an input requires grad, records the instance itself as a
node of the tape. The instance is also the op's context: non-tensor arguments
(``dim``, ``keepdim``) go to ``__init__``.

User-defined Functions (PyTorch's ``apply``, ``ctx.save_for_backward``) are a
subclass of this one, in ``custom_function.py``. The life of one call, and how
the engine replays the tape: docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import itertools
from typing import Any, ClassVar

import numpy as np

from .. import dtypes as dt
from ..backend import array_module
from ..precision import (NEUTRAL, PROMOTE, AutocastState, Precision, cast_plan, current_autocast, current_trace,
                         global_overrides, insert_cast)
from ..tensor import Tensor
from ..grad_mode import _grad_enabled
from .scalars import with_scalars

# The global per-op overrides (the live dict, never rebound): _apply_precision tests it on every op
# under autocast, and an empty one (the common case) leaves each op its class tag.
_GLOBAL_OVERRIDES = global_overrides()

# The tape's clock: every recorded node takes the next number, so decreasing
# sequence numbers are a valid reverse topological order.
_sequence = itertools.count()

FREED_MESSAGE = (
    "Trying to backward through the graph a second time (or directly access saved "
    "tensors after they have already been freed). Saved intermediate values of the "
    "graph are freed when you call .backward() or autograd.grad(). Specify "
    "retain_graph=True if you need to backward through the graph a second time or "
    "if you need to access saved tensors after calling backward."
)


# Every Function subclass, in definition order (filled by Function.__init_subclass__).
REGISTRY: list[type] = []


class Function:
    """Base of every op (and, through ``CustomFunction``, of user-defined autograd functions)."""

    # Required on every op class: what autocast does to its inputs.
    precision: ClassVar[Precision]
    # The inputs type promotion brings to one dtype before forward, inside and
    # outside autocast (PyTorch's binary-op rule: mse_loss(float16, float32) is
    # float32). Every input of a PROMOTE op (set by __init_subclass__); a slice
    # for an op of another tag whose leading inputs promote (a loss's input and
    # target); None for the rest.
    promoted_inputs: ClassVar["slice | None"] = None
    # The name autocast overrides and the precision report use; defaults to the
    # lower-cased class name.
    name: ClassVar[str]
    # Which inputs / outputs backward reads (kept alive, version-checked).
    save_inputs: ClassVar[tuple[int, ...]] = ()
    save_outputs: ClassVar[tuple[int, ...]] = ()
    # Optional {saved input: the input gradients that need it}. A saved input
    # none of whose gradients is needed is not kept (saved_tensors gives None):
    # x @ W with a constant x keeps x only, not the (float16 copy of the) weight.
    saved_input_needed_by: ClassVar["dict[int, tuple[int, ...]] | None"] = None
    # Per-node state, filled in by _record().
    seq: int = -1
    needs_input_grad: tuple[bool, ...] = ()
    _edges: "list | tuple" = ()          # per input: None, (node, output index) or (None, leaf)
    _input_meta: "list | tuple" = ()     # per input: (shape, dtype) as recorded
    _output_meta: "list | tuple" = ()    # per output: (shape, dtype)
    _freed: bool = False
    _saved_in: "list | tuple" = ()
    _saved_out: "list | tuple" = ()
    _output_hooks: "dict[int, list] | None" = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        REGISTRY.append(cls)  # ta.amp.op_table() reads the op classes from here
        if "name" not in cls.__dict__:
            cls.name = cls.__name__.lower()
        if "promoted_inputs" not in cls.__dict__:
            if getattr(cls, "precision", None) is PROMOTE:
                cls.promoted_inputs = slice(None)
            elif cls.promoted_inputs == slice(None):
                cls.promoted_inputs = None  # a PROMOTE op's subclass with another tag

    # ------------------------------------------------------------------ ops
    def forward(self, xp: Any, *arrays: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.forward")

    def backward(self, *grads: Tensor) -> Any:
        raise NotImplementedError(f"{type(self).__name__} has no backward")

    def __call__(self, *args: Any) -> Any:
        """Prepare the inputs, autocast them, run ``forward``, record the node: the one way an op runs."""
        tensors = _as_tensors(self, args)
        state = current_autocast()  # None when autocast is off: one ContextVar read
        if state is not None:
            # A NEUTRAL op (relu, reshapes) with no override in force is left alone by autocast.
            if self.precision is not NEUTRAL or self.promoted_inputs is not None or state.overrides \
                    or _GLOBAL_OVERRIDES:
                tensors = self._apply_precision(tensors, state)
        elif self.promoted_inputs is not None and _mixed_dtypes(tensors):
            tensors = self._apply_precision(tensors, state)
        arrays = [t.array for t in tensors]
        xp = array_module(arrays[0]) if arrays else np
        outputs = self.forward(xp, *arrays)
        single = not isinstance(outputs, tuple)
        out_tensors = [Tensor._wrap(o) for o in ((outputs,) if single else outputs)]
        self._record_and_trace(tensors, out_tensors)
        return out_tensors[0] if single else tuple(out_tensors)

    def _record_and_trace(self, inputs: list[Tensor], outputs: list[Tensor]) -> None:
        """Record the node when grad mode is on and an input requires grad; tell an open trace."""
        if _grad_enabled.get():
            for t in inputs:
                if t._requires_grad:
                    self._record(inputs, outputs)
                    break
        tracer = current_trace()
        if tracer is not None:
            tracer.record_op(self, inputs, outputs)

    def _apply_precision(self, tensors: list[Tensor], state: "AutocastState | None") -> list[Tensor]:
        """Insert recorded casts so the inputs reach the op's compute dtype."""
        if state is not None and state.device_type is not None and tensors and \
                tensors[0].device.type != state.device_type:
            state = None  # a device-specific region leaves other devices' ops alone
        if state is None or not (state.overrides or _GLOBAL_OVERRIDES):
            tag = self.precision  # no override in force: the class tag
        else:
            tag = self.effective_precision(state)
        if tag is NEUTRAL and self.promoted_inputs is None:
            return tensors  # nothing moves (relu, reshapes): the usual NEUTRAL op under autocast
        everything = range(len(tensors))
        tensors = self._cast_inputs(tensors, everything, tag, state, None if state is None else state.dtype)
        if tag is not PROMOTE and self.promoted_inputs is not None:
            # The tag's casts are done (an FP32 loss's float16 input is float32 now; an overridden
            # PROMOTE op's inputs may still differ); the promoted inputs still need one dtype.
            tensors = self._cast_inputs(tensors, everything[self.promoted_inputs], PROMOTE, state, None)
        return tensors

    def _cast_inputs(self, tensors: list[Tensor], indices: range, tag: Precision, state: "AutocastState | None",
                     autocast_dtype: "np.dtype | None") -> list[Tensor]:
        """``tensors`` with those at ``indices`` cast as the pure rule says ``tag`` asks (recorded Cast nodes)."""
        target, moves = cast_plan(tag, tuple([tensors[i].array.dtype for i in indices]), autocast_dtype)
        if target is None:
            return tensors
        tensors = list(tensors)
        for i, move in zip(indices, moves):
            if move:
                tensors[i] = insert_cast(self, tensors[i], target, state, tag)
        return tensors

    def effective_precision(self, state: "AutocastState | None") -> Precision:
        """The op's tag after any per-region or global override by name (autocast regions only)."""
        if state is None:
            return self.precision  # outside autocast only the class tag counts
        overrides = global_overrides()
        if state.overrides:
            return state.overrides.get(self.name, overrides.get(self.name, self.precision))
        return overrides.get(self.name, self.precision) if overrides else self.precision

    # --------------------------------------------------------------- the tape
    def _record(self, inputs: list[Tensor], outputs: list[Tensor]) -> None:
        self.seq = next(_sequence)
        needs, edges, meta = [], [], []
        for t in inputs:
            # An edge says where an input's gradient goes: to the node that made it,
            # or (for a leaf) to the tensor itself. Inputs that need no gradient get None.
            needs.append(t._requires_grad)
            if not t._requires_grad:
                edges.append(None)
            elif t.grad_fn is not None:
                edges.append((t.grad_fn, t._out_index))
            else:
                edges.append((None, t))
            meta.append((t.array.shape, t.array.dtype))
        self.needs_input_grad = tuple(needs)
        self._edges = edges
        self._input_meta = meta
        self._output_meta = [(o.array.shape, o.array.dtype) for o in outputs]
        # Nothing to save (scale_by, reshapes): the class's empty defaults stand, without building lists.
        if self.save_inputs:
            needed_by = self.saved_input_needed_by
            self._saved_in = [(inputs[i], inputs[i]._version[0])
                              if needed_by is None or any(needs[j] for j in needed_by[i]) else (None, 0)
                              for i in self.save_inputs]
        if self.save_outputs:
            self._saved_out = [(outputs[i].array, outputs[i]._version, outputs[i]._version[0])
                               for i in self.save_outputs]
        for index, out in enumerate(outputs):
            if out.array.dtype in dt.FLOATING:
                out.grad_fn = self
                out._out_index = index
                out._requires_grad = True

    @property
    def input_shapes(self) -> tuple[tuple[int, ...], ...]:
        """The shapes of the inputs as recorded (after autocast's casts), one per input."""
        return tuple(shape for shape, _dtype in self._input_meta)

    @property
    def input_dtypes(self) -> tuple[np.dtype, ...]:
        """The dtypes of the inputs as recorded (after autocast's casts), one per input."""
        return tuple(dtype for _shape, dtype in self._input_meta)

    @property
    def saved_tensors(self) -> tuple[Tensor, ...]:
        """The saved inputs, then the saved outputs, as graph-connected Tensors."""
        if self._freed:
            raise RuntimeError(FREED_MESSAGE)
        result = []
        for tensor, version in self._saved_in:
            if tensor is not None and tensor._version[0] != version:
                raise modified_error(self, tensor.shape, tensor.dtype, version, tensor._version[0])
            result.append(tensor)
        for (array, counter, version), index in zip(self._saved_out, self.save_outputs):
            if counter[0] != version:
                raise modified_error(self, array.shape, array.dtype, version, counter[0])
            # A fresh Tensor over the same array, linked to this node, so a
            # backward that uses the output is itself differentiable.
            out = Tensor._wrap(array)
            out.grad_fn, out._out_index, out.requires_grad = self, index, True
            result.append(out)
        return tuple(result)

    def saved_items(self) -> list[tuple[Any, "Tensor | None"]]:
        """What this node keeps alive for backward: (array, its input Tensor or None for an output).

        For the precision report and memory accounting; nothing is version-checked.
        """
        items = [(t.array, t) for t, _version in self._saved_in if t is not None]
        return items + [(array, None) for array, _counter, _version in self._saved_out]

    def release(self) -> None:
        """Drop saved tensors (after a backward without retain_graph)."""
        if self._saved_in or self._saved_out:
            self._saved_in, self._saved_out = [], []
            self._freed = True

    def register_output_hook(self, index: int, hook: Any) -> None:
        if self._output_hooks is None:
            self._output_hooks = {}
        self._output_hooks.setdefault(index, []).append(hook)

    def __repr__(self) -> str:
        return f"<{type(self).__name__}Backward seq={self.seq}>"

    def _run_backward(self, grads: list[Tensor]) -> tuple:
        """Call backward and return one gradient (or None) per recorded input."""
        result = self.backward(*grads)
        return result if isinstance(result, tuple) else (result,)


def modified_error(node: Function, shape: tuple, dtype: np.dtype, saved: int, now: int) -> RuntimeError:
    return RuntimeError(
        f"one of the variables needed for gradient computation has been modified by an "
        f"inplace operation: [{dt.dtype_name(dtype)} {list(shape)}] saved by "
        f"{type(node).__name__} is at version {now}; expected version {saved} instead.")


def _mixed_dtypes(tensors: list[Tensor]) -> bool:
    """True when the operands do not all share one dtype (PROMOTE has work to do)."""
    first = tensors[0].array.dtype
    for t in tensors:
        if t.array.dtype != first:
            return True
    return False


def _as_tensors(op: Function, args: tuple) -> list[Tensor]:
    """Inputs as Tensors; a Python number takes the dtype and device of the tensor operand (``scalars.py``)."""
    for arg in args:
        if not isinstance(arg, Tensor):
            return with_scalars(op.name, args)
    return list(args)  # the common case, on every op: Tensors only
