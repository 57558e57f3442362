"""User-defined autograd functions: ``ta.autograd.Function`` with PyTorch's ``apply`` and ``ctx``.

::

    class Cube(ta.autograd.Function):
        @staticmethod
        def forward(ctx, x, k):               # Tensors (and other arguments) in and out
            ctx.save_for_backward(x)
            ctx.k = k
            return x * x * x * k

        @staticmethod
        def backward(ctx, gy):                # one gradient (or None) per forward argument
            (x,) = ctx.saved_tensors
            return gy * 3 * x * x * ctx.k, None

    y = Cube.apply(x, 2.0)

``apply`` runs ``forward`` on Tensors with grad mode off, then records one node
for the whole call through the same code as a built-in op
(``Function._record_and_trace``); the node is the ``ctx``. A user Function runs
in the dtypes it receives (``precision = NEUTRAL``) unless ``amp.custom_fwd``
says otherwise; its ``cast_inputs`` casts are inserted here, as recorded casts,
before the node records its inputs. The gradients ``backward`` returns are
fitted to the inputs as PyTorch's engine fits them: cast to each input's dtype
(``custom_bwd``'s float16 gradient for a float32 argument) and summed over
the dims the input was broadcast along (see ``_run_backward``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes as dt
from ..precision import NEUTRAL, current_autocast, insert_cast
from ..tensor import Tensor
from .function import FREED_MESSAGE, Function, modified_error
from ..grad_mode import no_grad
from ..ops.broadcast import sum_to
from ..ops.cast import cast


class CustomFunction(Function):
    """Base of user-defined Functions (exported as ``ta.autograd.Function``).

    Subclasses write ``@staticmethod forward(ctx, *args)`` and
    ``@staticmethod backward(ctx, *grads)`` and are run with ``apply``.
    """

    # User functions run in the dtypes they receive unless custom_fwd says
    # otherwise (PyTorch's meaning).
    precision = NEUTRAL

    _saved_user: tuple = ()              # what save_for_backward got, then ("in", t, version) / ("out", index, None)
    _arg_is_tensor: "list[bool] | tuple" = ()  # per forward argument: is it a Tensor (has a recorded edge)?
    _returned: tuple = ()                # forward's outputs while apply records the node
    _autocast_at_forward: Any = None     # the region forward ran in (custom_bwd replays it)

    def __call__(self, *args: Any) -> Any:
        raise TypeError(f"{type(self).__name__} is a custom Function: call "
                        f"{type(self).__name__}.apply(...) instead")

    @classmethod
    def apply(cls, *args: Any) -> Any:
        """Run the Function (PyTorch's ``MyFunction.apply(...)``)."""
        ctx = cls()
        ctx._autocast_at_forward = current_autocast()
        cast_to = getattr(cls.forward, "_amp_cast_inputs", None)
        if cast_to is not None:
            # custom_fwd(cast_inputs=...): recorded casts before the node records
            # its inputs, so each gradient returns in its argument's dtype.
            args = _custom_fwd_casts(ctx, args, cast_to, cls.forward._amp_device_type)
        tensor_args = [a for a in args if isinstance(a, Tensor)]
        ctx.needs_input_grad = tuple(isinstance(a, Tensor) and a.requires_grad for a in args)
        ctx._arg_is_tensor = [isinstance(a, Tensor) for a in args]
        with no_grad():
            outputs = cls.forward(ctx, *args)
        single = not isinstance(outputs, tuple)
        returned = (outputs,) if single else outputs
        for out in returned:
            if not isinstance(out, Tensor):
                raise TypeError(f"{cls.__name__}.forward must return Tensors, got {type(out).__name__}")
        out_tensors = [Tensor._wrap(o.array) for o in returned]
        ctx._returned = returned
        ctx._record_and_trace(tensor_args, out_tensors)
        ctx._returned = ()
        return out_tensors[0] if single else tuple(out_tensors)

    def _record(self, inputs: list[Tensor], outputs: list[Tensor]) -> None:
        needs = self.needs_input_grad
        super()._record(inputs, outputs)
        self.needs_input_grad = needs  # _record set tensor-only flags; PyTorch's are per argument
        # Outputs the user saved are re-linked to this node at backward time.
        out_ids = {id(o): i for i, o in enumerate(self._returned)}
        # Saved inputs keep the version they had here, so backward can refuse one
        # modified in place since (outputs carry theirs in _saved_out), as PyTorch does.
        self._saved_user = tuple(("out", out_ids[id(t)], None) if id(t) in out_ids
                                 else ("in", t, t._version[0]) for t in self._saved_user)
        self._saved_out = [(o.array, o._version, o._version[0]) for o in outputs]

    def save_for_backward(self, *tensors: Tensor) -> None:
        """Keep tensors for backward."""
        self._saved_user = tensors

    def mark_non_differentiable(self, *tensors: Tensor) -> None:  # accepted for portability
        pass

    @property
    def saved_tensors(self) -> tuple[Tensor, ...]:
        """What ``save_for_backward`` got; a saved output comes back linked to this node."""
        if self._freed:
            raise RuntimeError(FREED_MESSAGE)
        result = []
        for kind, item, saved_version in self._saved_user:
            if kind == "in":
                if item._version[0] != saved_version:
                    raise modified_error(self, item.shape, item.dtype, saved_version, item._version[0])
                result.append(item)
            else:
                array, counter, version = self._saved_out[item]
                if counter[0] != version:
                    raise modified_error(self, array.shape, array.dtype, version, counter[0])
                out = Tensor._wrap(array)
                out.grad_fn, out._out_index, out.requires_grad = self, item, True
                result.append(out)
        return tuple(result)

    def saved_items(self) -> list[tuple[Any, "Tensor | None"]]:
        return [(item.array, item) if kind == "in" else (self._saved_out[item][0], None)
                for kind, item, _version in self._saved_user]

    def release(self) -> None:
        self._saved_in, self._saved_out = [], []
        self._freed = True

    def _run_backward(self, grads: list[Tensor]) -> tuple:
        """Call the static backward; one gradient per forward argument, each fitted to its input.

        PyTorch's rules (``PyNode::apply`` and the engine's ``validate_outputs``):
        extra trailing Nones are dropped; a non-Tensor argument gets None; a
        gradient of another dtype is cast to the input's dtype (a float16
        gradient for a float32 input, as ``custom_bwd`` under autocast gives);
        a gradient of a shape the input broadcasts to is summed down to the
        input's shape; any other shape is an error. Built-in ops get no such
        help: their gradients must match exactly (engine.py).
        """
        name = f"{type(self).__name__}Backward"
        result = type(self).backward(self, *grads)
        result = result if isinstance(result, tuple) else (result,)
        expected = len(self._arg_is_tensor)
        if len(result) > expected and all(g is None for g in result[expected:]):
            result = result[:expected]
        if len(result) != expected:
            raise RuntimeError(f"function {name} returned an incorrect number of gradients (expected "
                               f"{expected}, got {len(result)}): one per argument of forward")
        fitted = []
        for position, (grad, is_tensor) in enumerate(zip(result, self._arg_is_tensor)):
            if grad is not None and not isinstance(grad, Tensor):
                raise RuntimeError(f"function {name} returned a {type(grad).__name__} as the gradient at "
                                   f"position {position + 1}; expected a Tensor or None")
            if not is_tensor:
                if grad is not None:
                    raise RuntimeError(f"function {name} returned a gradient different than None at position "
                                       f"{position + 1}, but the corresponding forward input was not a Tensor")
                continue
            index = len(fitted)  # the gradient's index among the tensor inputs, as PyTorch counts
            if grad is not None and index < len(self._input_meta) and self._edges[index] is not None:
                grad = _fit_gradient(name, index, grad, *self._input_meta[index])
            fitted.append(grad)
        return tuple(fitted)


def _fit_gradient(name: str, index: int, grad: Tensor, shape: tuple, dtype: np.dtype) -> Tensor:
    """``grad`` summed to ``shape`` if ``shape`` broadcasts to it, then cast to ``dtype`` (recorded ops)."""
    if grad.shape != shape:
        if len(shape) > grad.ndim or not all(s == g or s == 1 for s, g in zip(shape[::-1], grad.shape[::-1])):
            raise RuntimeError(f"Function {name} returned an invalid gradient at index {index} - got "
                               f"{list(grad.shape)} but expected shape compatible with {list(shape)}")
        grad = sum_to(grad, shape)  # summed in its own dtype, as PyTorch's sum_to
    if grad.dtype != dtype:
        grad = cast(grad, dtype)
    return grad


def _custom_fwd_casts(ctx: CustomFunction, args: tuple, dtype: np.dtype, device_type: "str | None") -> tuple:
    """Floating (not float64) Tensor arguments cast to ``dtype`` when autocast is on."""
    state = current_autocast()
    if state is None or (device_type is not None and state.device_type not in (None, device_type)):
        return args
    return tuple(insert_cast(ctx, a, dtype, state, None)
                 if isinstance(a, Tensor) and a.dtype in dt.FLOATING and a.dtype != dt.float64
                 and a.dtype != dtype else a for a in args)
